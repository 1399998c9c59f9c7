#include "engine/step_cost_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace deepinfer {
namespace {

// Solves the k x k system g · x = r in place (Gaussian elimination, partial pivoting). False when a pivot is
// negligible: the chosen features are (nearly) collinear over the window, so this subset has no unique fit.
bool Solve(int k, double g[3][3], double r[3], double x[3], double scale) {
  for (int col = 0; col < k; ++col) {
    int piv = col;
    for (int row = col + 1; row < k; ++row)
      if (std::fabs(g[row][col]) > std::fabs(g[piv][col])) piv = row;
    if (std::fabs(g[piv][col]) <= 1e-9 * scale) return false;
    std::swap(g[piv], g[col]);
    std::swap(r[piv], r[col]);
    for (int row = col + 1; row < k; ++row) {
      const double f = g[row][col] / g[col][col];
      for (int j = col; j < k; ++j) g[row][j] -= f * g[col][j];
      r[row] -= f * r[col];
    }
  }
  for (int row = k - 1; row >= 0; --row) {
    double s = r[row];
    for (int j = row + 1; j < k; ++j) s -= g[row][j] * x[j];
    x[row] = s / g[row][row];
  }
  return true;
}

}  // namespace

void StepCostModel::Observe(const StepShape& shape, double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return;  // a broken clock reading teaches nothing
  std::deque<Sample>& w = shape.prefill_tokens > 0 ? prefill_ : decode_;
  w.push_back({static_cast<double>(shape.tokens), shape.attention, seconds});
  if (static_cast<int>(w.size()) > kWindow) w.pop_front();
  ++observed_;
  Refit();
}

void StepCostModel::Refit() {
  std::vector<Sample> all(prefill_.begin(), prefill_.end());
  all.insert(all.end(), decode_.begin(), decode_.end());
  // Features scaled to [0, 1] so that the normal equations are well conditioned (attention pairs run to
  // millions while the intercept's feature is 1).
  double t_max = 0, t_min = std::numeric_limits<double>::max(), a_max = 0;
  for (const Sample& s : all) t_max = std::max(t_max, s.tokens), t_min = std::min(t_min, s.tokens), a_max = std::max(a_max, s.attention);
  const double scale[3] = {1.0, t_max > 0 ? t_max : 1.0, a_max > 0 ? a_max : 1.0};
  auto feature = [&](const Sample& s, int j) { return j == 0 ? 1.0 : (j == 1 ? s.tokens : s.attention) / scale[j]; };
  // Non-negative least squares by enumeration: the exact NNLS solution is the least-squares fit of some subset of
  // the features with every coefficient >= 0, so the best such subset (7 of them) is it.
  double best_sse = std::numeric_limits<double>::infinity();
  std::array<double, 3> best{0, 0, 0};
  for (int mask = 1; mask < 8; ++mask) {
    int cols[3], k = 0;
    for (int j = 0; j < 3; ++j)
      if (mask & (1 << j)) cols[k++] = j;
    double g[3][3] = {}, r[3] = {}, x[3] = {};
    for (const Sample& s : all)
      for (int i = 0; i < k; ++i) {
        const double fi = feature(s, cols[i]);
        r[i] += fi * s.seconds;
        for (int j = 0; j < k; ++j) g[i][j] += fi * feature(s, cols[j]);
      }
    if (!Solve(k, g, r, x, static_cast<double>(all.size()))) continue;
    bool ok = true;
    for (int i = 0; i < k; ++i) ok = ok && x[i] >= 0;
    if (!ok) continue;
    std::array<double, 3> c{0, 0, 0};
    for (int i = 0; i < k; ++i) c[cols[i]] = x[i];
    double sse = 0;
    for (const Sample& s : all) {
      const double e = c[0] + c[1] * feature(s, 1) + c[2] * feature(s, 2) - s.seconds;
      sse += e * e;
    }
    if (sse < best_sse) best_sse = sse, best = c;
  }
  if (std::isfinite(best_sse)) coef_ = {best[0], best[1] / scale[1], best[2] / scale[2]};
  warm_ = observed_ >= kWarmupSteps && t_max > t_min && std::isfinite(best_sse);
}

double StepCostModel::Predict(int tokens, double attention) const {
  return coef_[0] + coef_[1] * tokens + coef_[2] * attention;
}

int StepCostModel::MaxPrefill(double target_seconds, int tokens, double attention, int64_t context, int cap) const {
  auto fits = [&](int p) { return Predict(tokens + p, attention + AttentionPairs(context, p)) <= target_seconds; };
  if (cap <= 0 || !fits(0)) return 0;
  if (fits(cap)) return cap;
  // The prediction grows with p (coefficients >= 0): the largest p that fits, by bisection.
  int lo = 0, hi = cap;  // fits(lo), !fits(hi)
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace deepinfer
