// The latency target's cost model (--target-itl-ms; docs/architecture.md "Latency target"): an online fit of how
// long one engine step runs on the executor,
//
//     seconds ≈ a + b · tokens + c · attention
//
// where tokens are the query positions the step computes (decode rows plus prefill chunks) and attention is the
// number of query-key pairs its rows attend over (a row of q_len positions starting at q_begin: q_len · q_begin +
// q_len (q_len + 1) / 2). a is the fixed cost of a step (weights streamed once, launch, sampling), b the per-token
// GEMM/MLP cost, c the attention cost that grows with the context. From a target time it returns the largest
// prefill chunk whose predicted step time stays within the target, given the decode rows already in the step.
//
// The fit is least squares over two windows of recent steps: the last kWindow steps that computed prefill and the
// last kWindow that did not. Decode-only steps vary little in their token count, so a single window of recent steps
// would, after a long run of decoding, forget what a prefill token costs (b would be unidentifiable and fall to 0,
// letting the next large prefill through); keeping the prefill steps apart keeps b measured. Coefficients are
// clamped to be non-negative (the best fit over the subsets of {a, b, c} whose least-squares solution has no
// negative coefficient), so noise can never make a longer step look cheaper. Single-threaded (the engine thread).
#pragma once
#include <array>
#include <cstdint>
#include <deque>

namespace deepinfer {

// What one step computed, as the cost model and the latency target see it (Engine::Launch fills it).
struct StepShape {
  int tokens = 0;          // query positions: decode rows plus prefill chunks
  int prefill_tokens = 0;  // of those, prompt positions (and recomputed ones after a preemption)
  int decode_rows = 0;     // rows that generate from a committed token (speculative verify rows included)
  double attention = 0;    // query-key pairs over all rows
  int prefill_limit = -1;  // the prefill budget the latency target gave the scheduler (-1: none, only
                           // --max-batched-tokens: target off, cost model not warm yet, or no decode row to protect)
};

// One processed step's timing as the ranks of an attention group share it (--tp / --cp; engine/dist_control.h):
// every rank of the group feeds its cost model its group leader's observations, at the same iteration.
struct StepObservation {
  uint64_t step = 0;
  bool ok = true;  // false: the step failed (its time says nothing about a normal one; not observed)
  StepShape shape;
  double seconds = 0;
};

// Query-key pairs of a row of q_len positions starting at q_begin (causal: position p sees p + 1 keys).
inline double AttentionPairs(int64_t q_begin, int64_t q_len) {
  return static_cast<double>(q_len) * static_cast<double>(q_begin) +
         static_cast<double>(q_len) * static_cast<double>(q_len + 1) / 2;
}

class StepCostModel {
 public:
  static constexpr int kWindow = 32;      // steps kept per window (prefill steps, decode-only steps)
  static constexpr int kWarmupSteps = 8;  // observed steps before the fit is trusted

  void Observe(const StepShape& shape, double seconds);

  // Enough steps seen, with at least two different token counts (else the per-token cost is unknown).
  bool warm() const { return warm_; }
  double Predict(int tokens, double attention) const;
  // The largest p >= 0 such that a step holding `tokens` tokens and `attention` pairs, plus p prefill tokens
  // starting at context `context` (their pairs: AttentionPairs(context, p)), is predicted to take at most
  // target_seconds; capped at `cap`. 0 when even p = 0 is over the target. Requires warm().
  int MaxPrefill(double target_seconds, int tokens, double attention, int64_t context, int cap) const;

  // a (seconds), b (seconds per token), c (seconds per query-key pair): all >= 0.
  const std::array<double, 3>& coefficients() const { return coef_; }
  int64_t observed() const { return observed_; }

 private:
  struct Sample {
    double tokens, attention, seconds;
  };
  void Refit();

  std::deque<Sample> prefill_, decode_;
  std::array<double, 3> coef_{0, 0, 0};
  int64_t observed_ = 0;
  bool warm_ = false;
};

}  // namespace deepinfer
