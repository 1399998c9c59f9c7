#include "engine/speculative.h"

#include <algorithm>

#include "engine/engine_options.h"
#include "model/model.h"

namespace deepinfer {

const char* SpecMethodName(SpecMethod m) {
  switch (m) {
    case SpecMethod::kNone: return "none";
    case SpecMethod::kNgram: return "ngram";
    case SpecMethod::kDraft: return "draft";
    case SpecMethod::kMtp: return "mtp";
  }
  return "?";
}

const char* SpecVerifyName(SpecVerify v) { return v == SpecVerify::kExact ? "exact" : "rejection"; }

StatusOr<SpecMethod> ParseSpecMethod(const std::string& name) {
  if (name == "none" || name.empty()) return SpecMethod::kNone;
  if (name == "ngram") return SpecMethod::kNgram;
  if (name == "draft") return SpecMethod::kDraft;
  if (name == "mtp") return SpecMethod::kMtp;
  return InvalidArgument("speculative method '" + name + "': expected ngram, draft, mtp or none");
}

StatusOr<SpecVerify> ParseSpecVerify(const std::string& name) {
  if (name == "exact") return SpecVerify::kExact;
  if (name == "rejection") return SpecVerify::kRejection;
  return InvalidArgument("--spec-verify '" + name + "': expected exact or rejection");
}

Status ValidateSpeculative(const EngineOptions& o, const Model& target) {
  if (o.num_speculative_tokens < 1 || o.num_speculative_tokens > kMaxSpecTokens)
    return InvalidArgument("--num-speculative-tokens must be in [1, " + std::to_string(kMaxSpecTokens) + "], got " +
                           std::to_string(o.num_speculative_tokens));
  if (o.ngram_min < 1 || o.ngram_max < o.ngram_min || o.ngram_max > 64)
    return InvalidArgument("--ngram-min / --ngram-max: need 1 <= min <= max <= 64, got " + std::to_string(o.ngram_min) +
                           " and " + std::to_string(o.ngram_max));
  if (o.speculative == SpecMethod::kDraft && !o.draft)
    return InvalidArgument("--speculative draft needs --draft-model");
  if (o.speculative != SpecMethod::kDraft && o.draft)
    return InvalidArgument("--draft-model is only used with --speculative draft");
  if (o.speculative == SpecMethod::kMtp && target.mtp.empty())
    return InvalidArgument("--speculative mtp: the model has no MTP (next-n) module");
  if (const Model* d = o.draft) {
    if (d->config.vocab_size != target.config.vocab_size)
      return InvalidArgument("--draft-model has a vocabulary of " + std::to_string(d->config.vocab_size) +
                             " tokens, the target " + std::to_string(target.config.vocab_size) +
                             ": a draft must share the target's vocabulary");
    if (d->tokenizer && target.tokenizer) {
      const int n = std::min(d->tokenizer->vocab_size(), target.tokenizer->vocab_size());
      for (int32_t t = 0; t < n; ++t)
        if (d->tokenizer->piece(t) != target.tokenizer->piece(t))
          return InvalidArgument("--draft-model: token " + std::to_string(t) + " is '" + d->tokenizer->piece(t) +
                                 "' in the draft and '" + target.tokenizer->piece(t) +
                                 "' in the target: a draft must share the target's vocabulary");
    }
  }
  return Status::Ok();
}

Status ResolveSpeculation(const RequestParams& p, const EngineOptions& opt, bool has_draft, bool has_mtp,
                          SpecMethod* method, int* k) {
  *method = p.spec_method.value_or(opt.speculative);
  if (p.num_speculative_tokens < -1 || p.num_speculative_tokens > kMaxSpecTokens)
    return InvalidArgument("num_speculative_tokens must be in [0, " + std::to_string(kMaxSpecTokens) + "]");
  *k = p.num_speculative_tokens >= 0 ? p.num_speculative_tokens : opt.num_speculative_tokens;
  if (*method == SpecMethod::kDraft && !has_draft)
    return InvalidArgument("speculative method 'draft': the server has no draft model (--draft-model)");
  if (*method == SpecMethod::kMtp && !has_mtp)
    return InvalidArgument("speculative method 'mtp': the model has no MTP module (or the server runs without --speculative mtp)");
  if (*method == SpecMethod::kNone || *k == 0) {
    *method = SpecMethod::kNone;
    *k = 0;
  }
  return Status::Ok();
}

int ProposeNgram(const int32_t* hist, int len, int n_min, int n_max, int k, int32_t* out) {
  if (k <= 0) return 0;
  for (int n = std::min(n_max, len - 1); n >= n_min; --n) {
    const int32_t* tail = hist + len - n;
    // Most recent earlier occurrence first: recent text predicts the next tokens best.
    for (int start = len - n - 1; start >= 0; --start) {
      if (hist[start + n - 1] != tail[n - 1] || !std::equal(tail, tail + n, hist + start)) continue;
      // The continuation may run into the proposal itself (an overlapping copy, as in LZ77), so a repeating
      // pattern of any period is proposed k tokens deep, not only up to the end of the history.
      for (int i = 0; i < k; ++i) {
        const int idx = start + n + i;
        out[i] = idx < len ? hist[idx] : out[idx - len];
      }
      return k;
    }
  }
  return 0;
}

}  // namespace deepinfer
