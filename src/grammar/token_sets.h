// Per-position token sets (xgrammar's "adaptive token mask cache", in this matcher's terms), built once per
// (grammar, vocabulary) off the engine thread and shared by every matcher of that grammar.
//
// A matcher state is a set of stacks, each topped by a character position of the grammar. Whether a token can
// be consumed from a stack depends on the stack below its top only if the token runs past the end of the top's
// rule. So, for each character position p, walking the vocabulary trie once from the stack {p, <any context>}
// splits the tokens into three sets:
//  - accepted: some path consumes every byte inside the rule (or ends exactly where the rule ends): allowed
//    whatever the context;
//  - rejected: every path dies before the rule could end: disallowed whatever the context;
//  - uncertain: a path reached the end of the rule with bytes left: decided per state by feeding the token to
//    that one stack (usually a few thousand tokens: those that close a JSON string, say).
// A mask is then the union, over the state's stacks, of accepted + verified uncertain tokens, with no trie walk.
// The top's rule is often a single character (JSON's `char`, looped by its parent), so a position whose tokens
// are mostly uncertain is classified again under each frame that can lie below it (up to kMaxChain frames),
// keyed by the chain of positions; positions whose walk is cheap anyway (a literal, digits) get no sets.
// The first mask of a state inside a JSON string used to walk the whole trie (~300k nodes); now it is a copy of
// a precomputed bitset plus a few thousand short feeds.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/token_trie.h"

namespace deepinfer::grammar {

class TokenSets {
 public:
  struct Entry {
    // ids lists the rejected tokens when complement is set (everything else the trie spells, minus the
    // uncertain ones, is accepted), else the accepted ones: whichever list is shorter.
    bool complement = false;
    std::vector<int32_t> ids;
    // Uncertain tokens in trie order, with the length of the byte prefix each shares with the previous one, so
    // a check resumes from the common prefix's state instead of the start.
    std::vector<int32_t> uncertain;
    std::vector<uint16_t> uncertain_lcp;
  };

  // Classifies the tokens at every character position of g. Costs about one trie walk per position that
  // admits many first bytes (a JSON string's characters) and a few hundred node visits for the others.
  // every_position: sets for every character position, even where the walk is cheaper (tests and the fuzzer
  // use it to compare the two mask paths on small vocabularies).
  static std::shared_ptr<const TokenSets> Build(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenTrie> trie,
                                                bool every_position = false);

  const Grammar* grammar() const { return g_.get(); }
  const std::shared_ptr<const Grammar>& grammar_ptr() const { return g_; }
  const TokenTrie* trie() const { return trie_.get(); }
  static constexpr int kMaxChain = 3;
  static constexpr uint32_t kBottom = 0xFFFFFFFEu;  // a chain entry: the empty stack (nothing lies below)
  static constexpr int32_t kWalk = -1, kDeeper = -2;
  // The sets of the stack whose top frames hold chain[0..len) (kBottom ends a chain at the empty stack): an
  // entry index, kWalk (no sets: walk the trie), or kDeeper (look again with one more frame).
  int32_t Lookup(const uint32_t* chain, int len) const;
  const Entry& entry(int32_t i) const { return entries_[i]; }
  // Bit per token: the trie spells it (the base a complement entry subtracts from).
  const std::vector<uint32_t>& spelled() const { return spelled_; }

  struct Stats {
    size_t positions = 0, chains = 0, accepted = 0, rejected = 0, uncertain = 0, bytes = 0;
    double build_ms = 0;
  };
  const Stats& stats() const { return stats_; }

 private:
  std::shared_ptr<const Grammar> g_;
  std::shared_ptr<const TokenTrie> trie_;
  using Key = std::array<uint32_t, kMaxChain + 1>;  // positions, then the length
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  std::unordered_map<Key, int32_t, KeyHash> index_;  // chain -> entry index or kDeeper; absent: kWalk
  std::vector<Entry> entries_;
  std::vector<uint32_t> spelled_;
  Stats stats_;
};

}  // namespace deepinfer::grammar
