#include "grammar/token_sets.h"

#include <algorithm>
#include <chrono>
#include <functional>

#include "grammar/matcher.h"

namespace deepinfer::grammar {

namespace {
// A chain keeps the runtime trie walk when that walk is cheap: it visits few nodes (narrow first bytes: a
// literal, digits), or about as many as its uncertain tokens would cost to feed.
constexpr uint64_t kCheapWalkNodes = 2048;
// Trie nodes all classifications of one grammar may visit (about 0.2 s), and the bytes its sets may hold; past
// either, positions keep the walk (a huge GBNF with many wide classes cannot take unbounded time or memory).
constexpr uint64_t kBuildBudgetNodes = 24'000'000;
constexpr size_t kMaxSetBytes = 32u << 20;
// Uncertain tokens a chain may leave to the per-step feed before the frame below is looked at as well.
constexpr size_t kMaxUncertainFed = 1024;
}  // namespace

size_t TokenSets::KeyHash::operator()(const Key& k) const {
  uint64_t h = 1469598103934665603ull;
  for (uint32_t v : k) h = (h ^ v) * 1099511628211ull;
  return static_cast<size_t>(h);
}

int32_t TokenSets::Lookup(const uint32_t* chain, int len) const {
  Key k;
  k.fill(0);
  for (int i = 0; i < len; ++i) k[i] = chain[i];
  k[kMaxChain] = static_cast<uint32_t>(len);
  auto it = index_.find(k);
  return it == index_.end() ? kWalk : it->second;
}

std::shared_ptr<const TokenSets> TokenSets::Build(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenTrie> trie,
                                                  bool every_position) {
  const auto t0 = std::chrono::steady_clock::now();
  auto out = std::shared_ptr<TokenSets>(new TokenSets());
  out->g_ = g;
  out->trie_ = trie;
  const TokenTrie& t = *trie;
  const size_t words = (static_cast<size_t>(t.vocab_size()) + 31) / 32;
  out->spelled_.assign(words, 0);
  size_t spelled_count = 0;
  for (size_t i = 1; i < t.num_nodes(); ++i)
    for (const int32_t* tok = t.tokens_begin(i); tok != t.tokens_end(i); ++tok) {
      out->spelled_[*tok >> 5] |= 1u << (*tok & 31);
      ++spelled_count;
    }

  // Which rule each position belongs to, and which positions the frame below a rule's frames can hold: the
  // continuation after a reference to the rule, or (a reference that ends its alternative is a tail call)
  // whatever lies below the referencing rule; kBottom for the root.
  const size_t nsym = g->symbols.size();
  std::vector<uint32_t> rule_of(nsym, 0);
  for (uint32_t r = 0; r < g->rules.size(); ++r)
    for (uint32_t a : g->rules[r])
      for (uint32_t x = a; x < nsym; ++x) {
        rule_of[x] = r;
        if (g->symbols[x].kind == Symbol::kEnd) break;
      }
  std::vector<std::vector<uint32_t>> below(g->rules.size());
  below[g->root].push_back(kBottom);
  for (bool changed = true; changed;) {
    changed = false;
    for (uint32_t x = 0; x < nsym; ++x) {
      if (g->symbols[x].kind != Symbol::kRule) continue;
      auto& dst = below[g->symbols[x].arg];
      const size_t before = dst.size();
      if (g->symbols[x + 1].kind != Symbol::kEnd) dst.push_back(x + 1);
      else dst.insert(dst.end(), below[rule_of[x]].begin(), below[rule_of[x]].end());
      std::sort(dst.begin(), dst.end());
      dst.erase(std::unique(dst.begin(), dst.end()), dst.end());
      changed |= dst.size() != before;
    }
  }

  GrammarMatcher m(g, trie);
  std::vector<int32_t> accepted, uncertain;
  std::vector<uint32_t> bits;
  uint64_t spent = 0;
  auto key_of = [](const std::vector<uint32_t>& chain) {
    Key k;
    k.fill(0);
    std::copy(chain.begin(), chain.end(), k.begin());
    k[kMaxChain] = static_cast<uint32_t>(chain.size());
    return k;
  };
  std::vector<uint32_t> chain;
  std::function<void()> classify = [&] {
    if ((spent > kBuildBudgetNodes || out->stats_.bytes > kMaxSetBytes) && !every_position) return;
    accepted.clear();
    uncertain.clear();
    uint64_t visited = 0;
    m.Classify(chain, &accepted, &uncertain, &visited);
    spent += visited;
    if (visited < kCheapWalkNodes && !every_position) return;
    const bool last = static_cast<int>(chain.size()) >= kMaxChain || chain.back() == kBottom;
    // Many uncertain tokens cost a per-step feed each even when they are a small share of the walk (near the
    // end of a bounded repetition, every token longer than what is left runs past it): look deeper then too.
    if ((uncertain.size() * 4 >= visited || uncertain.size() > kMaxUncertainFed) && !(every_position && last)) {
      // Mostly context-dependent: look one frame further down, if there is one.
      if (last) return;
      out->index_[key_of(chain)] = kDeeper;
      const std::vector<uint32_t> next = below[rule_of[chain.back()]];
      for (uint32_t q : next) {
        chain.push_back(q);
        classify();
        chain.pop_back();
      }
      return;
    }
    Entry e;
    if (accepted.size() * 2 > spelled_count) {
      e.complement = true;
      bits = out->spelled_;
      for (int32_t tok : accepted) bits[tok >> 5] &= ~(1u << (tok & 31));
      for (int32_t tok : uncertain) bits[tok >> 5] &= ~(1u << (tok & 31));
      for (size_t w = 0; w < words; ++w)
        for (uint32_t b = bits[w]; b; b &= b - 1) e.ids.push_back(static_cast<int32_t>(w * 32 + __builtin_ctz(b)));
    } else {
      e.ids = accepted;
    }
    e.uncertain = uncertain;
    e.uncertain_lcp.resize(uncertain.size());
    for (size_t k = 0; k < uncertain.size(); ++k) {
      size_t lcp = 0;
      if (k > 0) {
        const std::string &a = t.bytes(uncertain[k - 1]), &b = t.bytes(uncertain[k]);
        const size_t n = std::min(a.size(), b.size());
        while (lcp < n && a[lcp] == b[lcp]) ++lcp;
      }
      e.uncertain_lcp[k] = static_cast<uint16_t>(std::min<size_t>(lcp, 0xFFFF));
    }
    ++out->stats_.chains;
    out->stats_.accepted += accepted.size();
    out->stats_.rejected += spelled_count - accepted.size() - uncertain.size();
    out->stats_.uncertain += uncertain.size();
    out->stats_.bytes += (e.ids.size() + e.uncertain.size()) * sizeof(int32_t) + e.uncertain_lcp.size() * 2;
    out->index_[key_of(chain)] = static_cast<int32_t>(out->entries_.size());
    out->entries_.push_back(std::move(e));
  };
  for (uint32_t pos = 0; pos < nsym; ++pos) {
    if (g->symbols[pos].kind != Symbol::kChar) continue;
    ++out->stats_.positions;
    chain.assign(1, pos);
    classify();
  }
  out->stats_.build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace deepinfer::grammar
