#include "engine/grammar_cache.h"

namespace deepinfer {

std::shared_ptr<const grammar::TokenTrie> GrammarCache::Trie() const {
  std::lock_guard<std::mutex> lock(trie_mu_);
  if (!trie_) trie_ = grammar::TokenTrie::FromTokenizer(*tok_);
  return trie_;
}

std::shared_ptr<const grammar::TokenSets> GrammarCache::Sets(const RequestParams& p) const {
  const std::string& key = p.grammar;
  if (!key.empty()) {
    std::lock_guard<std::mutex> lock(sets_mu_);
    for (auto it = sets_lru_.begin(); it != sets_lru_.end(); ++it)
      if (it->first == key) {
        sets_lru_.splice(sets_lru_.begin(), sets_lru_, it);
        return it->second;
      }
  }
  auto sets = grammar::TokenSets::Build(p.compiled_grammar, Trie());
  if (!key.empty()) {
    std::lock_guard<std::mutex> lock(sets_mu_);
    sets_lru_.emplace_front(key, sets);
    size_t bytes = 0;
    for (const auto& e : sets_lru_) bytes += e.second->stats().bytes;
    while (sets_lru_.size() > 1 && (sets_lru_.size() > kCachedGrammars || bytes > kCachedBytes)) {
      bytes -= sets_lru_.back().second->stats().bytes;
      sets_lru_.pop_back();
    }
  }
  return sets;
}

}  // namespace deepinfer
