// Structured output's shared state: the vocabulary trie grammar masks walk (built on the first constrained
// request, shared by all of them) and the token sets of recent grammars by GBNF text (agents send the same tool
// schemas again and again; building them costs ~1-90 ms), least recently used evicted past 64 grammars or
// 256 MB of sets. Thread-safe: requests are checked on the server's threads.
#pragma once
#include <list>
#include <memory>
#include <mutex>
#include <string>

#include "engine/request.h"
#include "grammar/token_sets.h"
#include "grammar/token_trie.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {

class GrammarCache {
 public:
  explicit GrammarCache(const Tokenizer* tok) : tok_(tok) {}
  std::shared_ptr<const grammar::TokenTrie> Trie() const;
  // The token sets of p.compiled_grammar (cached by its source, p.grammar, when it has one).
  std::shared_ptr<const grammar::TokenSets> Sets(const RequestParams& p) const;

 private:
  static constexpr size_t kCachedGrammars = 64, kCachedBytes = 256u << 20;
  const Tokenizer* tok_;
  mutable std::mutex trie_mu_;
  mutable std::shared_ptr<const grammar::TokenTrie> trie_;
  mutable std::mutex sets_mu_;
  mutable std::list<std::pair<std::string, std::shared_ptr<const grammar::TokenSets>>> sets_lru_;
};

}  // namespace deepinfer
