// The per-sample state of a gated grammar (RequestParams::gate, engine/request.h): which phase the answer is in
// at a position, brought to the row's history the way SyncMatcher brings a matcher (rolling back after a
// preemption, a discarded step or rejected drafts), and the logit mask of the closed phases.
//
// Phases: kHeader (a header is being written: only tokens continuing a listed header are allowed), kFree (the
// body of a free header, e.g. Harmony's analysis channel, or text after a header no list names: unconstrained
// but for end-of-generation ids and the header markers), kOpen (the body of an open header: the grammar's mask applies). The phase
// changes only at a header_begin token and at the token that completes or breaks a header, so a body token
// costs O(1) and the state a rollback returns to is a short stack of those changes.
// A trigger gate (GrammarGate::open_after) has no headers: kFree from the output's start, kOpen from the token
// whose text completes the trigger (the grammar first reads that token's bytes after the trigger).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/request.h"

namespace deepinfer {

namespace grammar {
class GrammarMatcher;
class TokenTrie;
}  // namespace grammar

class GrammarGateState {
 public:
  enum class Phase : uint8_t { kHeader, kFree, kOpen, kLost };  // kLost: open, but the history is no sentence
  // prompt: the sample's prompt (a header may begin there: Harmony's generation prompt is `<|start|>assistant`).
  GrammarGateState(const GrammarGate& spec, const grammar::TokenTrie* trie, const std::vector<int32_t>& prompt);

  // Brings the gate to hist[0, pos) and, when the phase at pos is kOpen, the matcher to the open body's tokens
  // before pos (preceded by the header's text when spec.feed_header).
  Phase Sync(grammar::GrammarMatcher* m, const int32_t* hist, int prompt_len, int pos);
  // The closed phases' mask for the position Sync was last brought to: kHeader keeps only the tokens that
  // continue a listed header, kFree refuses the end-of-generation ids and the header markers.
  void Mask(float* logits, int vocab);
  Phase phase() const { return states_.back().phase; }

 private:
  struct Header {
    std::string text;
    std::vector<int32_t> marker_at;  // per byte: the marker id whose text starts there, -1 none, -2 inside one
    bool open = false;
  };
  struct State {
    Phase phase;
    int since;   // the position of the token that began it (kHeader: the header_begin token, or prompt_len - 1)
    int header;  // kOpen: the header it opened on
    std::string lead;  // kOpen on a trigger: the triggering token's bytes after it (the grammar reads them first)
  };
  void Push(Phase p, int since, int header = -1, std::string lead = {}) {
    states_.push_back({p, since, header, std::move(lead)});
  }
  // A trigger gate's kFree token (seen_ holds it last): pushes kOpen when the output's text completes the trigger
  // in it.
  void TriggerToken(int32_t t, int pos);
  void ResetHeader();
  // One token of a header: narrows the headers still possible; pushes kFree when none is, kOpen / kFree when one
  // is complete.
  void HeaderToken(int32_t t, int pos);
  void Step(int32_t t, int pos);
  bool IsBegin(int32_t t) const;
  const std::string* MarkerText(int32_t t) const;
  void RollbackTo(int pos, const int32_t* hist);

  const GrammarGate& spec_;
  const grammar::TokenTrie* trie_;
  std::vector<Header> headers_;
  std::vector<uint8_t> alive_;  // per header: its text starts with the header written so far
  size_t len_ = 0;              // bytes of the header written so far
  std::vector<State> states_;   // phase changes, oldest first; back() is the current phase
  int prompt_len_;
  int scanned_;                 // positions [0, scanned_) are stepped
  std::vector<int32_t> seen_;   // the tokens stepped at positions prompt_len_ ..
  std::vector<std::pair<int32_t, float>> keep_;  // Mask: the allowed tokens' logits
  int fed_since_ = -1;          // the kOpen state whose lead the matcher was fed (its since), -1 none
};

}  // namespace deepinfer
