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

using SpecVerify = api::SpeculativeVerify;  // kExact, kRejection (the public enum is the engine's own)

struct EngineOptions;

const char* SpecVerifyName(SpecVerify v);
StatusOr<SpecMethod> ParseSpecMethod(const std::string& name);
StatusOr<SpecVerify> ParseSpecVerify(const std::string& name);

// Start-up checks of the engine's speculative options (speculative, num_speculative_tokens, ngram_min/max,
// draft): clear errors before any request: ranges, the draft's vocabulary against the target's, an MTP module
// present for kMtp.
Status ValidateSpeculative(const EngineOptions& opt, const Model& target);

// Resolves a request's speculation (its spec_method and num_speculative_tokens over the engine's options):
// method kNone or k = 0 turn it off. Errors name the field (per-request 400s).
Status ResolveSpeculation(const RequestParams& p, const EngineOptions& opt, bool has_draft, bool has_mtp,
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
