#include "engine/grammar_mask.h"

#include <algorithm>
#include <limits>

#include "engine/grammar_gate.h"
#include "grammar/matcher.h"

namespace deepinfer {

bool SyncMatcher(grammar::GrammarMatcher* m, const int32_t* hist, int prompt_len, int pos) {
  return SyncMatcherFrom(m, hist, prompt_len, pos, 0);
}

bool SyncMatcherFrom(grammar::GrammarMatcher* m, const int32_t* hist, int first, int pos, int lead) {
  const int want = lead + pos - first;
  const auto& toks = m->step_tokens();
  const int have = static_cast<int>(toks.size());
  if (have == want && (want == lead || toks.back() == hist[pos - 1])) return true;
  int common = std::min(lead, have);
  while (common < have && common < want && toks[common] == hist[first + common - lead]) ++common;
  m->Rollback(have - common);
  for (int i = common; i < want; ++i)
    if (!m->AcceptToken(hist[first + i - lead])) return false;
  return true;
}

bool ConstrainRow(grammar::GrammarMatcher* m, GrammarGateState* gate, const int32_t* hist, int prompt_len, int pos,
                  float* logits, int vocab, std::vector<uint32_t>* bits) {
  if (!gate) {
    if (!SyncMatcher(m, hist, prompt_len, pos)) return false;
    ApplyGrammarMask(m, logits, vocab, bits);
    return true;
  }
  switch (gate->Sync(m, hist, prompt_len, pos)) {
    case GrammarGateState::Phase::kOpen:
      ApplyGrammarMask(m, logits, vocab, bits);
      return true;
    case GrammarGateState::Phase::kLost: return false;
    default:
      gate->Mask(logits, vocab);
      return false;
  }
}

void ApplyGrammarMask(grammar::GrammarMatcher* m, float* logits, int vocab, std::vector<uint32_t>* bits) {
  const int grammar_vocab = m->trie()->vocab_size();
  bits->assign((grammar_vocab + 31) / 32, 0);
  m->FillMask(bits->data());
  ApplyMaskBits(bits->data(), grammar_vocab, logits, vocab);
}

void ApplyMaskBits(const uint32_t* b, int grammar_vocab, float* logits, int vocab) {
  bool any = false;
  for (int w = 0; w < (grammar_vocab + 31) / 32; ++w) any |= b[w] != 0;
  if (!any) return;  // nothing the vocabulary can spell continues the grammar: leave the row unconstrained
  // A word at a time: inside a JSON string nearly every word is all-allowed (skipped), outside one nearly every
  // word is all-refused (32 stores); only mixed words go bit by bit.
  const float ninf = -std::numeric_limits<float>::infinity();
  const int whole = std::min(vocab, grammar_vocab) / 32;
  for (int w = 0; w < whole; ++w) {
    const uint32_t word = b[w];
    if (word == 0xFFFFFFFFu) continue;
    float* l = logits + static_cast<int64_t>(w) * 32;
    if (word == 0) {
      std::fill(l, l + 32, ninf);
      continue;
    }
    for (uint32_t off = ~word; off; off &= off - 1) l[__builtin_ctz(off)] = ninf;
  }
  for (int t = whole * 32; t < vocab; ++t)
    if (t >= grammar_vocab || !((b[t >> 5] >> (t & 31)) & 1)) logits[t] = ninf;
}

}  // namespace deepinfer
