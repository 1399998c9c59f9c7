// Structured output's stage of the executor: a constrained row's matcher is brought to the row's history, then
// the logits of every token the grammar does not allow are set to -inf before sampling (plain rows and
// speculative verification rows alike).
#pragma once
#include <cstdint>
#include <vector>

namespace deepinfer {

namespace grammar {
class GrammarMatcher;
}
class GrammarGateState;
// Brings a row's matcher to the tokens the token table holds before `pos` (rolling back and replaying after a
// preemption, a discarded step or rejected drafts). False when the history is not a sentence prefix.
bool SyncMatcher(grammar::GrammarMatcher* m, const int32_t* hist, int prompt_len, int pos);
// The same for a matcher whose first `lead` steps are not tokens of the history (a gated grammar's header text)
// and whose later steps are the tokens from hist[first] on.
bool SyncMatcherFrom(grammar::GrammarMatcher* m, const int32_t* hist, int first, int pos, int lead);
// Sets the logits of every token the matcher does not allow to -inf (a no-op when it allows none).
void ApplyGrammarMask(grammar::GrammarMatcher* m, float* logits, int vocab, std::vector<uint32_t>* bits);
// The same with the mask already filled (bits over the matcher's vocabulary, grammar_vocab tokens).
void ApplyMaskBits(const uint32_t* bits, int grammar_vocab, float* logits, int vocab);
// A row's whole grammar stage at `pos`: the matcher (and the gate, for a gated grammar) brought to the history,
// then the grammar's mask or the gate's. True when the sampled token must then be fed to the matcher.
bool ConstrainRow(grammar::GrammarMatcher* m, GrammarGateState* gate, const int32_t* hist, int prompt_len, int pos,
                  float* logits, int vocab, std::vector<uint32_t>* bits);

}  // namespace deepinfer
