#include "engine/grammar_mask.h"

#include <algorithm>
#include <limits>

#include "grammar/matcher.h"

namespace deepinfer {

bool SyncMatcher(grammar::GrammarMatcher* m, const int32_t* hist, int prompt_len, int pos) {
  const int want = pos - prompt_len;
  const auto& toks = m->step_tokens();
  const int have = static_cast<int>(toks.size());
  if (have == want && (want == 0 || toks.back() == hist[pos - 1])) return true;
  int common = 0;
  while (common < have && common < want && toks[common] == hist[prompt_len + common]) ++common;
  m->Rollback(have - common);
  for (int i = common; i < want; ++i)
    if (!m->AcceptToken(hist[prompt_len + i])) return false;
  return true;
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
