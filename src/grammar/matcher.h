// Byte-level grammar matcher: a pushdown recognizer over the grammar's rules (llama.cpp's stack-set design,
// which the parse state is a set of stacks of positions), with three changes that make it fast and exact:
//  - stacks are hash-consed (a stack is a node {position, parent}), so a state is a sorted set of integers,
//    expansions and successors are computed once per stack and cached;
//  - input is bytes: an incomplete UTF-8 sequence keeps only the stacks whose next class intersects the code
//    points still possible, so a token that ends inside a character is allowed exactly when a completion is;
//  - every accepted token pushes a state, so Rollback(n) is O(n) (preemption, rejected speculative drafts).
// Token masks walk the shared TokenTrie from the current state, skipping rejected subtrees; masks are cached
// per state (JSON strings and whitespace revisit the same states constantly). With TokenSets (token_sets.h),
// stacks whose top position has precomputed sets skip the walk: their tokens come from the sets, and only the
// few tokens that leave the top's rule are fed to that stack.
#pragma once
#include <cstdint>
#include <list>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/token_sets.h"
#include "grammar/token_trie.h"

namespace deepinfer::grammar {

class GrammarMatcher {
 public:
  GrammarMatcher(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenTrie> trie = nullptr);
  // A matcher of sets->grammar() over sets->trie() that uses the precomputed token sets for its masks.
  explicit GrammarMatcher(std::shared_ptr<const TokenSets> sets);

  // Feeds bytes as one step; false (state unchanged) when the grammar rejects them.
  bool AcceptBytes(std::string_view bytes);
  // Feeds a token's bytes as one step. An end-of-generation token is accepted (as an empty step) only in an
  // accepting state. Needs the trie.
  bool AcceptToken(int32_t id);
  // Undoes the last n accepted steps (n <= num_steps()).
  void Rollback(int n);
  int num_steps() const { return static_cast<int>(history_.size()) - 1; }
  // The token of each step (-1 for an AcceptBytes step), so a caller can check it against its own history.
  const std::vector<int32_t>& step_tokens() const { return step_tokens_; }

  // The input so far is a complete sentence of the grammar.
  bool IsAccepting() const;
  // Accepting, and no byte can follow: generation must end here.
  bool IsTerminated() const;

  // Allowed next tokens as a bitset over the trie's vocabulary (bit id set = allowed), written to
  // bits[0 .. (vocab + 31) / 32). End-of-generation ids are allowed exactly when IsAccepting().
  void FillMask(uint32_t* bits);
  const TokenTrie* trie() const { return trie_.get(); }

  struct Stats {
    uint64_t masks = 0, cache_hits = 0, nodes_visited = 0, table_stacks = 0, uncertain_checked = 0;
  };
  const Stats& stats() const { return stats_; }

 private:
  friend class TokenSets;
  // Stack id 0 is the empty stack (the input so far is complete); id 1 stands for "whatever context lies below"
  // while TokenSets classifies a position: reaching it means the token ran past the end of the top's rule.
  static constexpr uint32_t kContext = 1;
  struct State {
    std::vector<uint32_t> stacks;  // sorted hash-consed stack ids; 0 is the empty (complete) stack
    uint32_t partial = 0;          // code point bits of an incomplete UTF-8 sequence
    uint8_t left = 0;              // continuation bytes still expected
    uint8_t len = 0;               // total length of that sequence
    bool operator==(const State& o) const {
      return stacks == o.stacks && partial == o.partial && left == o.left && len == o.len;
    }
  };
  struct StateHash {
    size_t operator()(const State& s) const;
  };

  uint32_t Intern(uint32_t pos, uint32_t parent);
  // Appends the terminal-topped (or empty) stacks reachable from stack id without consuming input.
  void Expand(uint32_t id, std::vector<uint32_t>* out, int depth);
  const std::vector<uint32_t>& Expanded(uint32_t id);
  const std::vector<uint32_t>& Successors(uint32_t id);  // after the top character matched
  const CharClass& TopClass(uint32_t id) const { return g_->classes[g_->symbols[nodes_[id].pos].arg]; }
  // One byte: from `in` into `out` (cleared first); false when no stack survives.
  bool Step(const State& in, uint8_t byte, State* out);
  // Mask bits (ORed in) of the tokens some stack of st can consume, by walking the whole trie.
  void WalkMask(const State& st, uint32_t* bits);
  // Mask bits (ORed in) of the tokens stack id can consume, from its top's precomputed sets.
  void TableMask(uint32_t id, const TokenSets::Entry& e, uint32_t* bits);
  // TokenSets' walk from the stack whose frames hold chain[0] (top), chain[1], ... over kContext (or over the
  // empty stack when the last entry is TokenSets::kBottom): appends the accepted and the uncertain tokens (trie
  // order) and counts the nodes visited.
  void Classify(const std::vector<uint32_t>& chain, std::vector<int32_t>* accepted, std::vector<int32_t>* uncertain,
                uint64_t* visited);

  std::shared_ptr<const Grammar> g_;
  std::shared_ptr<const TokenTrie> trie_;
  std::shared_ptr<const TokenSets> sets_;
  struct Node {
    uint32_t pos, parent;
  };
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, uint32_t> intern_;
  std::vector<int32_t> expanded_idx_, succ_idx_;  // per stack id: index into lists_, -1 not yet computed
  std::vector<std::vector<uint32_t>> lists_;
  std::vector<uint32_t> mark_;  // per stack id: stamp of the last union it was added to
  uint32_t stamp_ = 0;
  std::vector<State> history_;   // history_.back() is the current state
  std::vector<int32_t> step_tokens_;
  // The mask walk runs over interned states with a lazily filled byte-transition table per state (a DFA built
  // on demand): inside a JSON string or a repetition the walk revisits a handful of states across the whole
  // trie, so most edges cost one table lookup. Tables are kept for the first kMaxDfaStates states. Before a mask
  // the pool is cleared once it holds more than kMaxDfaStates (a long generation keeps meeting new states, which
  // would otherwise go without tables: inside a bounded repetition each position is a new state); before a
  // build-time classification, past kMaxInterned (states shared between positions are worth keeping there).
  static constexpr size_t kMaxDfaStates = 4096, kMaxInterned = 1 << 18;
  int32_t InternState(const State& s);
  void ResetDfaIfFull(size_t limit);  // before a walk, so ids held in levels_ stay valid during it
  int32_t Next(int32_t sid, uint8_t byte);
  std::vector<State> dfa_states_;
  std::unordered_map<State, int32_t, StateHash> dfa_ids_;
  std::vector<std::unique_ptr<int32_t[]>> dfa_next_;  // per state: 256 successor ids, -1 reject, -2 unknown
  State scratch_;
  std::vector<int32_t> levels_;  // mask walk: the state id at each trie depth
  std::vector<uint8_t> past_end_;  // Classify: whether the path reached kContext before each depth
  std::vector<uint32_t> tmp_bits_;  // TableMask: one stack's bits before the union
  // Per-state mask cache, least recently used evicted.
  static constexpr size_t kMaskCacheEntries = 32;
  std::list<std::pair<State, std::vector<uint32_t>>> lru_;
  std::unordered_map<State, decltype(lru_)::iterator, StateHash> cache_;
  Stats stats_;
};

}  // namespace deepinfer::grammar
