#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/thread_pool.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm_isa.h"

namespace deepinfer {

void RmsNorm(const float* x, const float* w, float eps, int m, int n, float* y) {
  for (int i = 0; i < m; ++i) {
    const float* xr = x + static_cast<int64_t>(i) * n;
    float* yr = y + static_cast<int64_t>(i) * n;
    double ss = 0;  // double: the sum of squares is the one reduction where f32 drift shows at large n
    for (int j = 0; j < n; ++j) ss += static_cast<double>(xr[j]) * xr[j];
    const float scale = static_cast<float>(1.0 / std::sqrt(ss / n + eps));
    for (int j = 0; j < n; ++j) yr[j] = xr[j] * scale * w[j];
  }
}

RopeTable RopeTable::Make(RopeStyle style, int rot_dim, double theta, const std::vector<float>& freq_factors,
                          const YarnParams& yarn) {
  RopeTable t;
  t.style = style;
  t.rot_dim = rot_dim;
  t.inv_freq.resize(rot_dim / 2);
  double low = 0, high = 0;
  if (yarn.factor > 1) {  // the dims whose wavelength fits beta_fast .. beta_slow rotations in the original context
    auto corr = [&](double rotations) {
      return rot_dim * std::log(yarn.original_ctx / (rotations * 2 * M_PI)) / (2 * std::log(theta));
    };
    low = std::max(0.0, std::floor(corr(yarn.beta_fast)));
    high = std::min(rot_dim - 1.0, std::ceil(corr(yarn.beta_slow)));
    t.mscale = yarn.mscale;
  }
  for (int i = 0; i < rot_dim / 2; ++i) {
    double f = std::pow(theta, -2.0 * i / rot_dim);
    if (!freq_factors.empty()) f /= freq_factors[i];
    if (yarn.factor > 1) {
      const double ramp = 1 - std::clamp((i - low) / std::max(0.001, high - low), 0.0, 1.0);  // 1: keep original
      f = f / yarn.factor * (1 - ramp) + f * ramp;
    }
    t.inv_freq[i] = static_cast<float>(f);
  }
  return t;
}

void ApplyRope(const RopeTable& t, float* x, int m, int n_heads, int head_dim, const int32_t* pos) {
  const int half = t.rot_dim / 2;
  std::vector<float> cs(half), sn(half);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < half; ++j) {
      const double a = static_cast<double>(pos[i]) * t.inv_freq[j];
      cs[j] = static_cast<float>(std::cos(a)) * t.mscale;
      sn[j] = static_cast<float>(std::sin(a)) * t.mscale;
    }
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + (static_cast<int64_t>(i) * n_heads + h) * head_dim;
      for (int j = 0; j < half; ++j) {
        const int a = t.style == RopeStyle::kAdjacentPairs ? 2 * j : j;
        const int b = t.style == RopeStyle::kAdjacentPairs ? 2 * j + 1 : j + half;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * cs[j] - x1 * sn[j];
        v[b] = x0 * sn[j] + x1 * cs[j];
      }
    }
  }
}

void SwiGLU(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.f + std::exp(-gate[i])) * up[i];
}

void Softmax(float* x, int n) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int i = 0; i < n; ++i) x[i] *= inv;
}

void LogSoftmax(const float* x, float* out, int n) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - mx);
  const float lse = mx + static_cast<float>(std::log(sum));
  for (int i = 0; i < n; ++i) out[i] = x[i] - lse;
}


namespace {
using AttendFn = void (*)(const float*, int, const void*, const void*, DType, const int32_t*, int, int64_t, int64_t,
                          int, int, float, float*, float*);
AttendFn ActiveAttend() {
  return ActiveIsa() == Isa::kAvx512 ? isa_avx512::AttendHeads
         : ActiveIsa() == Isa::kAvx2 ? isa_avx2::AttendHeads
                                     : isa_scalar::AttendHeads;
}
}  // namespace

void CausalAttention(const float* q, const float* k_cache, const float* v_cache, int m, int start, int n_heads,
                     int n_kv, int hd, float scale, float* out) {
  std::vector<int32_t> rows(static_cast<size_t>(start + m));
  for (int p = 0; p < start + m; ++p) rows[p] = p;
  const AttnSeq seq{0, m, start, rows.data()};
  const AttnShape shape{n_heads, n_kv, hd, hd, n_kv * hd, n_kv * hd};
  PagedAttention(q, &seq, 1, k_cache, v_cache, DType::kF32, shape, scale, out);
}

void PagedAttention(const float* q, const AttnSeq* seqs, int num_seqs, const void* k_base, const void* v_base,
                    DType kv_type, const AttnShape& sh, float scale, float* out) {
  const int group = sh.n_heads / sh.n_kv;
  const int64_t q_stride = static_cast<int64_t>(sh.n_heads) * sh.hd_k, o_stride = static_cast<int64_t>(sh.n_heads) * sh.hd_v;
  const size_t esize = GetDTypeInfo(kv_type).block_bytes;
  const int64_t k_row_bytes = static_cast<int64_t>(sh.k_row_elems) * static_cast<int64_t>(esize);
  const int64_t v_row_bytes = static_cast<int64_t>(sh.v_row_elems) * static_cast<int64_t>(esize);
  // Tasks are (query row, K/V head, block of the heads sharing it) over all sequences. A task's heads read each
  // cached row once (see AttendHeads); blocks are made smaller only when there are fewer tasks than threads.
  // Each output element is computed by one task in one fixed order that does not depend on the blocking, so
  // results do not depend on the partition, the thread count or what else is in the batch.
  const int nt_pool = ComputePool().size();
  int64_t total_rows = 0;
  int max_len = 0;
  for (int s = 0; s < num_seqs; ++s) {
    total_rows += seqs[s].m;
    max_len = std::max(max_len, seqs[s].start + seqs[s].m);
  }
  int hb = std::min(group, kMaxAttendHeads);
  while (hb > 1 && total_rows * sh.n_kv * ((group + hb - 1) / hb) < nt_pool) hb = (hb + 1) / 2;
  const int blocks = (group + hb - 1) / hb, per_row = sh.n_kv * blocks;
  std::vector<int64_t> first_task(static_cast<size_t>(num_seqs) + 1, 0);
  for (int s = 0; s < num_seqs; ++s) first_task[s + 1] = first_task[s] + static_cast<int64_t>(seqs[s].m) * per_row;
  const AttendFn attend = ActiveAttend();
  // A bf16 cache is dotted with q rounded to bf16, the dot-type rule MatMul applies to bf16 weights: the same
  // inputs on every ISA, and AVX512-BF16 multiplies the stored rows directly with vdpbf16ps.
  thread_local std::vector<float> q_bf16;
  if (kv_type == DType::kBF16) {
    int64_t q_rows = 0;
    for (int s = 0; s < num_seqs; ++s) q_rows = std::max(q_rows, seqs[s].q_row + seqs[s].m);
    q_bf16.resize(static_cast<size_t>(q_rows * q_stride));
    for (size_t i = 0; i < q_bf16.size(); ++i) q_bf16[i] = BF16ToF32(F32ToBF16(q[i]));
    q = q_bf16.data();
  }
  ComputePool().Run([&](int tid, int nt) {
    auto [t0, t1] = ThreadPool::Range(static_cast<size_t>(first_task[num_seqs]), tid, nt);
    if (t0 >= t1) return;
    std::vector<float> scores(static_cast<size_t>(max_len) * hb);
    int s = static_cast<int>(std::upper_bound(first_task.begin(), first_task.end(), static_cast<int64_t>(t0)) -
                             first_task.begin()) - 1;
    for (size_t t = t0; t < t1; ++t) {
      while (static_cast<int64_t>(t) >= first_task[s + 1]) ++s;
      const AttnSeq& sq = seqs[s];
      const int64_t local = static_cast<int64_t>(t) - first_task[s];
      const int i = static_cast<int>(local / per_row), kvh = static_cast<int>(local % per_row) / blocks;
      const int h = kvh * group + static_cast<int>(local % blocks) * hb, nh = std::min(hb, (kvh + 1) * group - h);
      const int64_t row = sq.q_row + i;
      attend(q + row * q_stride + static_cast<int64_t>(h) * sh.hd_k, nh,
             static_cast<const uint8_t*>(k_base) + static_cast<size_t>(kvh) * sh.hd_k * esize,
             static_cast<const uint8_t*>(v_base) + static_cast<size_t>(kvh) * sh.hd_v * esize, kv_type, sq.rows,
             sq.start + i + 1, k_row_bytes, v_row_bytes, sh.hd_k, sh.hd_v, scale, scores.data(),
             out + row * o_stride + static_cast<int64_t>(h) * sh.hd_v);
    }
  });
}

}  // namespace deepinfer
