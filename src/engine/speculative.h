// Speculative decoding: a cheap proposer guesses up to k tokens, the target verifies them in one forward pass
// (a row of 1 + k positions), and the accepted prefix plus the target's own next token are committed together.
//
// Lossless by construction (docs/architecture.md "Speculative decoding"): the sampler draws the token at
// position p with randomness keyed by (seed, p, sample), so the target's choice at every position is fixed
// before any draft exists. Exact verification accepts a draft exactly when it equals that choice, which makes
// the output identical to plain decoding for greedy and seeded sampling alike; a proposer only changes speed.
// Rejection verification (Leviathan et al.) is offered too: distribution-preserving, higher acceptance, not
// token-identical.
//
// Everything that depends on the accepted length runs on the executor (the "device"): it keeps each slot's
// committed length, so the host can schedule step N+1 before step N's acceptance is known (overlap on).
#pragma once
#include <cstdint>
#include <vector>

#include "deepinfer/status.h"
#include "engine/request.h"

namespace deepinfer {

struct Model;

constexpr int kMaxSpecTokens = 16;  // drafts per verify row

enum class SpecVerify : uint8_t { kExact, kRejection };

struct SpeculativeOptions {
  SpecMethod method = SpecMethod::kNone;  // the default proposer of requests that do not choose one
  int num_tokens = 3;                     // k: drafts per step (1..kMaxSpecTokens)
  int ngram_min = 2, ngram_max = 4;       // n-gram proposer: match lengths tried, longest first
  SpecVerify verify = SpecVerify::kExact;
  const Model* draft_model = nullptr;     // kDraft: same vocabulary as the target; must outlive the engine
};

const char* SpecVerifyName(SpecVerify v);
StatusOr<SpecMethod> ParseSpecMethod(const std::string& name);
StatusOr<SpecVerify> ParseSpecVerify(const std::string& name);

// Start-up checks (clear errors before any request): ranges, the draft's vocabulary against the target's, an
// MTP module present for kMtp.
Status ValidateSpeculative(const SpeculativeOptions& opt, const Model& target);

// Resolves a request's speculation (its SpecParams over the engine's options): method kNone or k = 0 turn it
// off. Errors name the field (per-request 400s).
Status ResolveSpeculation(const SpecParams& p, const SpeculativeOptions& opt, bool has_draft, bool has_mtp,
                          SpecMethod* method, int* k);

// Prompt lookup: the most recent earlier occurrence of the history's last n tokens (n from n_max down to
// n_min) and the tokens that followed it, continued periodically past the end of the history (a match just
// before the end means the text repeats with that period). Writes k of them to out; returns k, or 0 without a
// match.
int ProposeNgram(const int32_t* hist, int len, int n_min, int n_max, int k, int32_t* out);

// Random sub-streams of a sample beside its main one (which draws the target's token): the draft's own draws
// under rejection verification, and the acceptance coin.
constexpr uint32_t kDraftSubstream = 0x40000000u;
constexpr uint32_t kAcceptSubstream = 0x80000000u;

}  // namespace deepinfer
