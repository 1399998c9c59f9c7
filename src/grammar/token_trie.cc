#include "grammar/token_trie.h"

#include <algorithm>
#include <numeric>

#include "tokenizer/tokenizer.h"

namespace deepinfer::grammar {

TokenTrie::TokenTrie(const std::vector<std::string>& token_bytes, std::vector<int32_t> eog)
    : vocab_(static_cast<int>(token_bytes.size())), bytes_(token_bytes), eog_(std::move(eog)) {
  std::vector<int32_t> order;
  for (int32_t id = 0; id < vocab_; ++id)
    if (!bytes_[id].empty() && bytes_[id].size() < 0xFFFF) order.push_back(id);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return bytes_[a] < bytes_[b] || (bytes_[a] == bytes_[b] && a < b); });
  byte_.push_back(0);
  depth_.push_back(0);
  std::vector<uint32_t> path = {0};  // path[d]: the node at depth d on the previous token's path
  std::vector<std::pair<uint32_t, int32_t>> ends;  // (node, token)
  const std::string* prev = nullptr;
  for (int32_t id : order) {
    const std::string& b = bytes_[id];
    size_t lcp = 0;
    if (prev) {
      const size_t m = std::min(prev->size(), b.size());
      while (lcp < m && (*prev)[lcp] == b[lcp]) ++lcp;
    }
    path.resize(lcp + 1);
    for (size_t d = lcp; d < b.size(); ++d) {
      path.push_back(static_cast<uint32_t>(byte_.size()));
      byte_.push_back(static_cast<uint8_t>(b[d]));
      depth_.push_back(static_cast<uint16_t>(d + 1));
    }
    ends.push_back({path[b.size()], id});
    max_depth_ = std::max(max_depth_, static_cast<int>(b.size()));
    prev = &b;
  }
  // Subtree ends: a node's subtree ends at the next node that is not deeper.
  const uint32_t n = static_cast<uint32_t>(byte_.size());
  skip_.assign(n, n);
  std::vector<uint32_t> open;
  for (uint32_t i = 0; i < n; ++i) {
    while (!open.empty() && depth_[open.back()] >= depth_[i]) {
      skip_[open.back()] = i;
      open.pop_back();
    }
    open.push_back(i);
  }
  std::stable_sort(ends.begin(), ends.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  tok_off_.assign(n + 1, 0);
  for (const auto& e : ends) ++tok_off_[e.first + 1];
  std::partial_sum(tok_off_.begin(), tok_off_.end(), tok_off_.begin());
  for (const auto& e : ends) tokens_.push_back(e.second);
}

std::shared_ptr<const TokenTrie> TokenTrie::FromTokenizer(const Tokenizer& tok) {
  std::vector<std::string> bytes(tok.vocab_size());
  std::vector<int32_t> eog;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (tok.IsEog(id)) eog.push_back(id);
    if (!tok.IsControl(id)) bytes[id] = tok.TokenBytes(id);
  }
  return std::make_shared<TokenTrie>(bytes, std::move(eog));
}

}  // namespace deepinfer::grammar
