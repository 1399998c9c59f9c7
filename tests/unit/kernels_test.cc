// Every CPU kernel against a plain reference on random inputs (never zeros), at odd sizes, on every ISA (scalar,
// AVX2, AVX-512; one the CPU lacks fails unless declared, isa_test_util.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/ops.h"
#include "isa_test_util.h"
#include "test_util.h"

namespace deepinfer {
namespace {

using testing::AvailableIsas;
using testing::IsaGuard;
using testing::RandomVec;

// Reference: the documented semantics of MatMul, written independently. x is first converted to the weight's
// dot type (bf16/f16 rounding, or q8_0 blocks), then products are summed in double.
std::vector<float> RefMatMul(DType t, const std::vector<uint8_t>& wbytes, int64_t n, int64_t k, const std::vector<float>& x, int m) {
  std::vector<float> w(n * k), xr(x);
  for (int64_t r = 0; r < n; ++r)
    DequantizeRow(t, wbytes.data() + r * DTypeBytes(t, k), w.data() + r * k, k);
  for (auto& v : xr) {
    if (t == DType::kBF16) v = BF16ToF32(F32ToBF16(v));
    if (t == DType::kF16) v = F16ToF32(F32ToF16(v));
  }
  if (t == DType::kQ8_0 || t == DType::kQ4_0) {  // blocks of 32: scale amax/127 (stored as f16), round half even
    for (size_t b = 0; b < x.size(); b += 32) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b + j]));
      const float d = F16ToF32(F32ToF16(amax / 127.f)), id = amax ? 127.f / amax : 0.f;
      for (int j = 0; j < 32; ++j) xr[b + j] = std::nearbyint(x[b + j] * id) * d;
    }
  }
  std::vector<float> y(static_cast<size_t>(m) * n);
  for (int i = 0; i < m; ++i)
    for (int64_t r = 0; r < n; ++r) {
      double s = 0;
      for (int64_t j = 0; j < k; ++j) s += static_cast<double>(xr[i * k + j]) * w[r * k + j];
      y[i * n + r] = static_cast<float>(s);
    }
  return y;
}

struct GemmCase {
  DType dtype;
  int64_t n, k;
  int m;
};

class GemmTest : public ::testing::TestWithParam<GemmCase> {};

TEST_P(GemmTest, MatchesReferenceOnEveryIsa) {
  const GemmCase c = GetParam();
  IsaGuard guard;
  const auto wf = RandomVec(c.n * c.k, 1234 + c.n, 0.5f);
  std::vector<uint8_t> wb(DTypeBytes(c.dtype, c.n * c.k));
  for (int64_t r = 0; r < c.n; ++r) QuantizeRow(c.dtype, wf.data() + r * c.k, wb.data() + r * DTypeBytes(c.dtype, c.k), c.k);
  TensorView w;
  w.dtype = c.dtype;
  w.shape = {c.n, c.k};
  w.data = wb.data();
  w.nbytes = wb.size();
  const auto x = RandomVec(static_cast<size_t>(c.m) * c.k, 99 + c.m);
  const auto ref = RefMatMul(c.dtype, wb, c.n, c.k, x, c.m);
  for (Isa isa : AvailableIsas()) {
    SetIsa(isa);
    std::vector<float> y(static_cast<size_t>(c.m) * c.n, -7.f);
    MatMul(w, x.data(), c.m, y.data());
    double max_err = 0, max_ref = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      max_err = std::max(max_err, std::fabs(static_cast<double>(y[i]) - ref[i]));
      max_ref = std::max(max_ref, std::fabs(static_cast<double>(ref[i])));
    }
    // f32 accumulation over k terms of magnitude <= 0.5: relative error bound ~ k * 2^-24, with margin.
    EXPECT_LE(max_err, 1e-5 * std::max(1.0, max_ref) * std::sqrt(static_cast<double>(c.k)))
        << DTypeName(c.dtype) << " n=" << c.n << " k=" << c.k << " m=" << c.m << " isa=" << IsaName(isa);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GemmTest,
    ::testing::Values(GemmCase{DType::kF32, 37, 53, 1}, GemmCase{DType::kF32, 129, 211, 7}, GemmCase{DType::kF32, 64, 1024, 13},
                      GemmCase{DType::kF16, 37, 53, 1}, GemmCase{DType::kF16, 131, 200, 5},
                      GemmCase{DType::kBF16, 37, 53, 1}, GemmCase{DType::kBF16, 131, 77, 9}, GemmCase{DType::kBF16, 96, 2048, 6},
                      GemmCase{DType::kQ8_0, 37, 64, 1}, GemmCase{DType::kQ8_0, 133, 320, 11},
                      GemmCase{DType::kQ4_0, 37, 64, 1}, GemmCase{DType::kQ4_0, 133, 320, 11}),
    [](const auto& info) {
      return std::string(DTypeName(info.param.dtype)) + "_" + std::to_string(info.param.n) + "x" + std::to_string(info.param.k) +
             "_m" + std::to_string(info.param.m);
    });

TEST(GemmTest, ThreadCountDoesNotChangeResults) {
  const int64_t n = 101, k = 96;
  auto wf = RandomVec(n * k, 5);
  TensorView w{DType::kF32, {n, k}, wf.data(), wf.size() * 4};
  auto x = RandomVec(3 * k, 6);
  std::vector<float> y1(3 * n), y2(3 * n);
  SetComputeThreads(1);
  MatMul(w, x.data(), 3, y1.data());
  SetComputeThreads(3);
  MatMul(w, x.data(), 3, y2.data());
  SetComputeThreads(0);
  EXPECT_EQ(y1, y2);
}

TEST(OpsTest, RmsNormMatchesFormula) {
  const int m = 3, n = 67;
  auto x = RandomVec(m * n, 1), w = RandomVec(n, 2);
  std::vector<float> y(m * n);
  RmsNorm(x.data(), w.data(), 1e-5f, m, n, y.data());
  for (int i = 0; i < m; ++i) {
    double ss = 0;
    for (int j = 0; j < n; ++j) ss += x[i * n + j] * x[i * n + j];
    const double inv = 1 / std::sqrt(ss / n + 1e-5);
    for (int j = 0; j < n; ++j) EXPECT_NEAR(y[i * n + j], x[i * n + j] * inv * w[j], 1e-5);
  }
}

// Rows go through RmsNorm eight at a time (independent sum chains): every row's result is bitwise what it gives
// alone, whatever its place in a block, in place too. The reference is the plain one-row loop (double sum of
// squares in element order), written out here.
TEST(OpsTest, RmsNormRowsAreBitwiseTheOneRowLoop) {
  for (const int m : {1, 7, 8, 13, 24}) {
    const int n = 1000 + m;
    auto x = RandomVec(m * n, 40 + m), w = RandomVec(n, 41 + m);
    for (float& v : x) v *= 37.f;  // magnitudes where a different summation order would round differently
    std::vector<float> y(m * n), ref(m * n);
    for (int i = 0; i < m; ++i) {
      double ss = 0;
      for (int j = 0; j < n; ++j) ss += static_cast<double>(x[i * n + j]) * x[i * n + j];
      const float scale = static_cast<float>(1.0 / std::sqrt(ss / n + 1e-6f));
      for (int j = 0; j < n; ++j) ref[i * n + j] = x[i * n + j] * scale * w[j];
    }
    RmsNorm(x.data(), w.data(), 1e-6f, m, n, y.data());
    EXPECT_EQ(std::memcmp(y.data(), ref.data(), sizeof(float) * y.size()), 0) << "m = " << m;
    RmsNorm(x.data(), w.data(), 1e-6f, m, n, x.data());
    EXPECT_EQ(std::memcmp(x.data(), ref.data(), sizeof(float) * x.size()), 0) << "m = " << m << ", in place";
  }
}

TEST(OpsTest, RopeBothStylesRotateTheRightPairs) {
  const int hd = 10, heads = 3, m = 2;
  const int32_t pos[m] = {5, 17};
  for (RopeStyle style : {RopeStyle::kAdjacentPairs, RopeStyle::kHalves}) {
    auto x = RandomVec(m * heads * hd, 3);
    auto y = x;
    RopeTable t = RopeTable::Make(style, hd, 10000.0, {});
    ApplyRope(t, y.data(), m, heads, hd, pos);
    for (int i = 0; i < m; ++i)
      for (int h = 0; h < heads; ++h)
        for (int j = 0; j < hd / 2; ++j) {
          const double theta = pos[i] * std::pow(10000.0, -2.0 * j / hd);
          const int a = style == RopeStyle::kAdjacentPairs ? 2 * j : j, b = style == RopeStyle::kAdjacentPairs ? 2 * j + 1 : j + hd / 2;
          const float* xv = &x[(i * heads + h) * hd];
          const float* yv = &y[(i * heads + h) * hd];
          EXPECT_NEAR(yv[a], xv[a] * std::cos(theta) - xv[b] * std::sin(theta), 1e-5);
          EXPECT_NEAR(yv[b], xv[a] * std::sin(theta) + xv[b] * std::cos(theta), 1e-5);
        }
  }
}

TEST(OpsTest, RopeFreqFactorsDivideFrequencies) {
  RopeTable plain = RopeTable::Make(RopeStyle::kHalves, 8, 500000.0, {});
  RopeTable scaled = RopeTable::Make(RopeStyle::kHalves, 8, 500000.0, {1.f, 2.f, 4.f, 8.f});
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(scaled.inv_freq[i] * (1 << i), plain.inv_freq[i], 1e-9);
}

// gpt-oss's clamped SwiGLU against its definition in double (transformers' GptOssExperts): inputs spread over
// +-12 so the gate's upper clamp and both of up's are crossed.
TEST(OpsTest, SwiGluOaiClampsAsGptOss) {
  const int n = 257;
  auto g = RandomVec(n, 14, 12.f), u = RandomVec(n, 15, 12.f);
  std::vector<float> o(n);
  SwiGluOai(g.data(), u.data(), o.data(), n);
  int clamped_gate = 0, clamped_up = 0;
  for (int i = 0; i < n; ++i) {
    const double x = std::min<double>(g[i], 7.0), y = std::clamp<double>(u[i], -7.0, 7.0);
    clamped_gate += g[i] > 7;
    clamped_up += u[i] > 7 || u[i] < -7;
    const double want = x / (1 + std::exp(-1.702 * x)) * (y + 1);
    EXPECT_NEAR(o[i], want, 1e-5 * std::max(1.0, std::fabs(want))) << i;
  }
  EXPECT_GT(clamped_gate, 10);
  EXPECT_GT(clamped_up, 10);
}

TEST(OpsTest, SwiGLUAndSoftmax) {
  auto g = RandomVec(33, 4, 4.f), u = RandomVec(33, 5);
  std::vector<float> o(33);
  SwiGLU(g.data(), u.data(), o.data(), 33);
  for (int i = 0; i < 33; ++i) EXPECT_NEAR(o[i], g[i] / (1 + std::exp(-g[i])) * u[i], 1e-6);
  auto s = RandomVec(29, 6, 10.f);
  auto p = s;
  Softmax(p.data(), 29);
  std::vector<float> lp(29);
  LogSoftmax(s.data(), lp.data(), 29);
  double sum = 0, mx = *std::max_element(s.begin(), s.end()), z = 0;
  for (float v : s) z += std::exp(v - mx);
  for (int i = 0; i < 29; ++i) {
    sum += p[i];
    EXPECT_NEAR(p[i], std::exp(s[i] - mx) / z, 1e-6);
    EXPECT_NEAR(lp[i], s[i] - mx - std::log(z), 1e-5);
  }
  EXPECT_NEAR(sum, 1.0, 1e-5);
}

// Causal attention for the m query rows of one sequence over contiguous f32 K/V: row i sits at absolute position
// start + i and sees keys [0, start + i]; k_cache/v_cache hold rows of n_kv * hd floats for positions
// 0 .. start + m - 1. PagedAttention with every position in its own row.
void CausalAttention(const float* q, const float* k_cache, const float* v_cache, int m, int start, int n_heads,
                     int n_kv, int hd, float scale, float* out) {
  std::vector<int32_t> rows(static_cast<size_t>(start + m));
  for (int p = 0; p < start + m; ++p) rows[p] = p;
  const AttnSeq seq{0, m, start, rows.data()};
  const AttnShape shape{n_heads, n_kv, hd, hd, n_kv * hd, n_kv * hd};
  PagedAttention(q, &seq, 1, k_cache, v_cache, DType::kF32, shape, scale, out);
}

TEST(OpsTest, CausalAttentionMatchesNaive) {
  const int n_heads = 6, n_kv = 2, hd = 20, start = 5, m = 4, total = start + m;  // hd 20: a masked tail
  auto q = RandomVec(m * n_heads * hd, 7), k = RandomVec(total * n_kv * hd, 8), v = RandomVec(total * n_kv * hd, 9);
  std::vector<float> out(m * n_heads * hd);
  const float scale = 0.3f;
  IsaGuard guard;
  for (Isa isa : AvailableIsas()) {
  SetIsa(isa);
  CausalAttention(q.data(), k.data(), v.data(), m, start, n_heads, n_kv, hd, scale, out.data());
  for (int i = 0; i < m; ++i)
    for (int h = 0; h < n_heads; ++h) {
      const int kvh = h / (n_heads / n_kv), len = start + i + 1;
      std::vector<double> s(len);
      double mx = -1e30, z = 0;
      for (int p = 0; p < len; ++p) {
        double d = 0;
        for (int e = 0; e < hd; ++e) d += q[(i * n_heads + h) * hd + e] * k[(p * n_kv + kvh) * hd + e];
        s[p] = d * scale;
        mx = std::max(mx, s[p]);
      }
      for (auto& e : s) z += (e = std::exp(e - mx));
      for (int e = 0; e < hd; ++e) {
        double acc = 0;
        for (int p = 0; p < len; ++p) acc += s[p] / z * v[(p * n_kv + kvh) * hd + e];
        EXPECT_NEAR(out[(i * n_heads + h) * hd + e], acc, 1e-5) << IsaName(isa);
      }
    }
  }
}

}  // namespace
}  // namespace deepinfer

namespace deepinfer {
namespace {

// Paged attention over scattered rows in f32, bf16 and f16 caches matches a double-precision reference computed
// on the values as stored (so the only error is summation order, not the storage rounding). A bf16 cache is
// dotted with q rounded to bf16 (the dot-type rule, as for bf16 weights); f16 and f32 caches use q as it is.
TEST(OpsTest, PagedAttentionOverScatteredRowsAndHalfCaches) {
  const int n_heads = 4, n_kv = 2, hd = 24, kvdim = n_kv * hd;
  const int total_rows = 40;
  // Two sequences: A has 7 cached positions + 2 queries, B has 0 cached + 3 queries; rows scattered.
  std::vector<int32_t> rows_a = {5, 9, 1, 30, 31, 32, 2, 17, 18}, rows_b = {39, 0, 20};
  const AttnSeq seqs[2] = {{0, 2, 7, rows_a.data()}, {2, 3, 0, rows_b.data()}};
  auto q = RandomVec(5 * n_heads * hd, 21), kf = RandomVec(total_rows * kvdim, 22), vf = RandomVec(total_rows * kvdim, 23);
  IsaGuard guard;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    std::vector<uint8_t> kb(total_rows * kvdim * 4), vb(total_rows * kvdim * 4);
    std::vector<double> ks(total_rows * kvdim), vs(total_rows * kvdim);  // values as stored
    for (int i = 0; i < total_rows * kvdim; ++i) {
      if (dt == DType::kF32) {
        std::memcpy(&kb[i * 4], &kf[i], 4), std::memcpy(&vb[i * 4], &vf[i], 4);
        ks[i] = kf[i], vs[i] = vf[i];
      } else {
        const uint16_t hk = dt == DType::kBF16 ? F32ToBF16(kf[i]) : F32ToF16(kf[i]);
        const uint16_t hv = dt == DType::kBF16 ? F32ToBF16(vf[i]) : F32ToF16(vf[i]);
        std::memcpy(&kb[i * 2], &hk, 2), std::memcpy(&vb[i * 2], &hv, 2);
        ks[i] = dt == DType::kBF16 ? BF16ToF32(hk) : F16ToF32(hk);
        vs[i] = dt == DType::kBF16 ? BF16ToF32(hv) : F16ToF32(hv);
      }
    }
    for (Isa isa : AvailableIsas()) {
      SetIsa(isa);
      std::vector<float> out(5 * n_heads * hd, -1.f);
      PagedAttention(q.data(), seqs, 2, kb.data(), vb.data(), dt, AttnShape{n_heads, n_kv, hd, hd, kvdim, kvdim}, 0.25f, out.data());
      for (const AttnSeq& sq : seqs)
        for (int i = 0; i < sq.m; ++i)
          for (int h = 0; h < n_heads; ++h) {
            const int kvh = h / (n_heads / n_kv), len = sq.start + i + 1;
            const float* qr = &q[((sq.q_row + i) * n_heads + h) * hd];
            std::vector<double> s(len);
            double mx = -1e30, z = 0;
            for (int p = 0; p < len; ++p) {
              double d = 0;
              for (int e = 0; e < hd; ++e) {
                const double qe = dt == DType::kBF16 ? BF16ToF32(F32ToBF16(qr[e])) : qr[e];
                d += qe * ks[sq.rows[p] * kvdim + kvh * hd + e];
              }
              mx = std::max(mx, s[p] = d * 0.25);
            }
            for (auto& e : s) z += (e = std::exp(e - mx));
            for (int e = 0; e < hd; ++e) {
              double acc = 0;
              for (int p = 0; p < len; ++p) acc += s[p] / z * vs[sq.rows[p] * kvdim + kvh * hd + e];
              EXPECT_NEAR(out[((sq.q_row + i) * n_heads + h) * hd + e], acc, 2e-5) << IsaName(isa) << " " << DTypeName(dt);
            }
          }
    }
  }
}

}  // namespace
}  // namespace deepinfer

namespace deepinfer {
namespace {

// FP8 e4m3 weights with 128x128 block scales: MatMul equals a double-precision product with the dequantized
// weights (fp8 x block scale), on every ISA, for a matrix with partial blocks and for a row slice whose scales
// start inside a block row (scale_row0), as MLA's per-head W_UV views are.
TEST(GemmTest, Fp8BlockScaledWeights) {
  const int64_t N = 300, K = 200;  // 3 x 2 blocks, the last ones partial
  const int m = 5;
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> code(0, 255);
  std::vector<uint8_t> w(N * K);
  for (auto& b : w) {
    b = static_cast<uint8_t>(code(rng));
    if ((b & 0x7f) == 0x7f) b ^= 1;  // no NaN codes
  }
  std::vector<float> scales(3 * 2);
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = 0.001f * (i + 1);
  auto x = RandomVec(m * K, 5);
  TensorView t;
  t.dtype = DType::kF8E4M3;
  t.shape = {N, K};
  t.data = w.data();
  t.nbytes = w.size();
  t.block_scale = scales.data();
  t.scale_cols = 2;
  auto check = [&](const TensorView& v, int64_t row0, int64_t rows, const char* what) {
    std::vector<float> y(m * rows);
    MatMul(v, x.data(), m, y.data());
    for (int i = 0; i < m; ++i)
      for (int64_t n = 0; n < rows; ++n) {
        double ref = 0;
        for (int64_t k = 0; k < K; ++k)
          ref += static_cast<double>(x[i * K + k]) * Fp8E4M3ToF32(w[(row0 + n) * K + k]) * scales[((row0 + n) / 128) * 2 + k / 128];
        ASSERT_NEAR(y[i * rows + n], ref, 1e-4 * std::max(1.0, std::fabs(ref))) << what << " row " << n;
      }
  };
  IsaGuard guard;
  for (Isa isa : AvailableIsas()) {
    SetIsa(isa);
    check(t, 0, N, IsaName(isa));
    TensorView slice = t;  // rows [100, 260): crosses the block-row boundary at 128 and 256
    slice.shape = {160, K};
    slice.data = w.data() + 100 * K;
    slice.nbytes = 160 * K;
    slice.scale_row0 = 100;
    check(slice, 100, 160, "slice");
  }
  // Known e4m3 values: 448 max, smallest subnormal 2^-9, NaN code, round-trip of every finite code.
  EXPECT_EQ(Fp8E4M3ToF32(0x7e), 448.f);
  EXPECT_EQ(Fp8E4M3ToF32(0x01), std::ldexp(1.f, -9));
  EXPECT_TRUE(std::isnan(Fp8E4M3ToF32(0x7f)));
  EXPECT_EQ(F32ToFp8E4M3(1e6f), 0x7e);  // saturates
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;  // NaN codes
    const float v = Fp8E4M3ToF32(static_cast<uint8_t>(c));
    EXPECT_EQ(Fp8E4M3ToF32(F32ToFp8E4M3(v)), v) << "code " << c;
  }
}

}  // namespace
}  // namespace deepinfer

namespace deepinfer {
namespace {

// Many query heads on one K/V head (absorbed MLA: K row = [latent, rope key], V = the latent inside it) are
// computed in blocks of heads that share each row read. Checks, on every ISA and thread count: the result
// matches a double reference, and each head is bitwise what it is when attended alone (so the blocking, which
// depends on the head count and the thread count, never changes a number).
TEST(OpsTest, GroupedHeadsMatchSingleHeadBitwise) {
  const int n_heads = 19, hd_k = 36, hd_v = 20;  // 19 = 8 + 8 + 3 heads per block; hd 36/20: masked tails
  const int cached = 23, m = 2, len_max = cached + m;
  std::vector<int32_t> rows(len_max);
  for (int p = 0; p < len_max; ++p) rows[p] = (p * 7 + 3) % len_max;  // scattered slots
  const AttnSeq seq{0, m, cached, rows.data()};
  const auto q = RandomVec(m * n_heads * hd_k, 41), kv = RandomVec(len_max * hd_k, 42);
  // The cache in f32 and in bf16 (which also dots with q rounded to bf16, and uses vdpbf16ps where present).
  std::vector<uint16_t> kv_bf16(kv.size());
  for (size_t i = 0; i < kv.size(); ++i) kv_bf16[i] = F32ToBF16(kv[i]);
  IsaGuard guard;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const void* cache = dt == DType::kF32 ? static_cast<const void*>(kv.data()) : static_cast<const void*>(kv_bf16.data());
    auto stored = [&](int idx) { return dt == DType::kF32 ? static_cast<double>(kv[idx]) : BF16ToF32(kv_bf16[idx]); };
    auto q_used = [&](int idx) { return dt == DType::kF32 ? static_cast<double>(q[idx]) : BF16ToF32(F32ToBF16(q[idx])); };
    for (Isa isa : AvailableIsas()) {
      SetIsa(isa);
      for (int threads : {1, 2, 5}) {
        SetComputeThreads(threads);
        std::vector<float> all(m * n_heads * hd_v, -1.f);
        PagedAttention(q.data(), &seq, 1, cache, cache, dt, AttnShape{n_heads, 1, hd_k, hd_v, hd_k, hd_k}, 0.2f, all.data());
        for (int h = 0; h < n_heads; ++h) {
          // The same head alone: its query rows copied out, one head per call.
          std::vector<float> qh(m * hd_k), oh(m * hd_v, -2.f);
          for (int i = 0; i < m; ++i) std::memcpy(&qh[i * hd_k], &q[(i * n_heads + h) * hd_k], hd_k * sizeof(float));
          PagedAttention(qh.data(), &seq, 1, cache, cache, dt, AttnShape{1, 1, hd_k, hd_v, hd_k, hd_k}, 0.2f, oh.data());
          for (int i = 0; i < m; ++i) {
            const int len = cached + i + 1;
            std::vector<double> s(len);
            double mx = -1e30, z = 0;
            for (int p = 0; p < len; ++p) {
              double d = 0;
              for (int e = 0; e < hd_k; ++e) d += q_used((i * n_heads + h) * hd_k + e) * stored(rows[p] * hd_k + e);
              mx = std::max(mx, s[p] = d * 0.2);
            }
            for (auto& e : s) z += (e = std::exp(e - mx));
            for (int e = 0; e < hd_v; ++e) {
              double ref = 0;
              for (int p = 0; p < len; ++p) ref += s[p] / z * stored(rows[p] * hd_k + e);
              const float got = all[(i * n_heads + h) * hd_v + e];
              EXPECT_NEAR(got, ref, 2e-5) << IsaName(isa) << " " << DTypeName(dt) << " head " << h;
              EXPECT_EQ(got, oh[i * hd_v + e]) << IsaName(isa) << " " << DTypeName(dt) << " threads " << threads << " head " << h;
            }
          }
        }
      }
    }
  }
  SetComputeThreads(0);
}

// MatMulMany runs several products in one dispatch; each output must be bitwise MatMul's (the engine relies on it
// for batch invariance), for mixed types, row counts that are not multiples of the 16-row slices, and thread counts.
TEST(GemmTest, MatMulManyEqualsSeparateMatMuls) {
  struct Spec {
    DType dtype;
    int64_t n, k;
    int m;
  };
  const Spec specs[] = {{DType::kBF16, 37, 64, 3}, {DType::kF32, 5, 32, 1}, {DType::kQ8_0, 70, 96, 2}, {DType::kBF16, 16, 64, 4}};
  std::vector<std::vector<uint8_t>> wbytes;
  std::vector<TensorView> ws;
  std::vector<std::vector<float>> xs;
  for (size_t j = 0; j < std::size(specs); ++j) {
    const Spec& s = specs[j];
    const auto wf = RandomVec(s.n * s.k, 300 + j, 0.5f);
    wbytes.emplace_back(DTypeBytes(s.dtype, s.n * s.k));
    for (int64_t r = 0; r < s.n; ++r)
      QuantizeRow(s.dtype, wf.data() + r * s.k, wbytes.back().data() + r * DTypeBytes(s.dtype, s.k), s.k);
    xs.push_back(RandomVec(s.m * s.k, 400 + j));
  }
  for (size_t j = 0; j < std::size(specs); ++j) {
    TensorView w;
    w.dtype = specs[j].dtype;
    w.shape = {specs[j].n, specs[j].k};
    w.data = wbytes[j].data();
    w.nbytes = wbytes[j].size();
    ws.push_back(w);
  }
  IsaGuard guard;
  for (Isa isa : AvailableIsas()) {
    SetIsa(isa);
    for (int threads : {1, 2, 3, 7}) {
      SetComputeThreads(threads);
      std::vector<std::vector<float>> many, single;
      std::vector<MatMulJob> jobs;
      for (size_t j = 0; j < std::size(specs); ++j) {
        many.emplace_back(specs[j].m * specs[j].n, -5.f);
        single.emplace_back(specs[j].m * specs[j].n, -6.f);
      }
      for (size_t j = 0; j < std::size(specs); ++j) jobs.push_back({&ws[j], xs[j].data(), specs[j].m, many[j].data()});
      MatMulMany(jobs.data(), static_cast<int>(jobs.size()));
      for (size_t j = 0; j < std::size(specs); ++j) {
        MatMul(ws[j], xs[j].data(), specs[j].m, single[j].data());
        EXPECT_EQ(many[j], single[j]) << IsaName(isa) << " threads " << threads << " job " << j;
      }
    }
  }
  SetComputeThreads(0);
}

}  // namespace
}  // namespace deepinfer

namespace deepinfer {
namespace {

// q8_0/q4_0 on AVX-512: the VNNI tiles (x offset to unsigned, vpdpbusd) must give bitwise the results of the
// sign/maddubs/madd tiles, for one x row (decode tiles) and several (prefill tiles, with a partial x tile).
TEST(GemmTest, VnniQuantizedTilesMatchTheGenericAvx512TilesBitwise) {
  DEEPINFER_REQUIRE_CPU(testing::CpuFeature::kAvx512Vnni, "comparing the VNNI q8_0/q4_0 tiles with the generic AVX-512 ones");
  IsaGuard guard;
  SetIsa(Isa::kAvx512);
  const int64_t n = 70, k = 256;
  for (DType dt : {DType::kQ8_0, DType::kQ4_0}) {
    const auto wf = RandomVec(n * k, 500, 0.5f);
    std::vector<uint8_t> wb(DTypeBytes(dt, n * k));
    for (int64_t r = 0; r < n; ++r) QuantizeRow(dt, wf.data() + r * k, wb.data() + r * DTypeBytes(dt, k), k);
    TensorView w;
    w.dtype = dt;
    w.shape = {n, k};
    w.data = wb.data();
    w.nbytes = wb.size();
    for (int m : {1, 7}) {
      auto x = RandomVec(m * k, 600 + m);
      x[3] = -x[3] * 40.f;  // one large value per block row: quantized x reaches -127/127
      std::vector<float> generic(m * n), vnni(m * n);
      const bool was = SetVnni(false);
      MatMul(w, x.data(), m, generic.data());
      SetVnni(true);
      MatMul(w, x.data(), m, vnni.data());
      SetVnni(was);
      EXPECT_EQ(generic, vnni) << DTypeName(dt) << " m=" << m;
    }
  }
}

}  // namespace
}  // namespace deepinfer

namespace deepinfer {
namespace {

// A declaration that this machine lacks a CPU feature (DEEPINFER_TEST_CPU_LACKS, isa_test_util.h) turns the
// cases that need it from failures into named skips, so it must be true: every name known and absent here.
TEST(TestMachine, DeclaredCpuLimitationsAreTrue) {
  using testing::CpuFeature;
  for (const std::string& name : testing::DeclaredCpuLacks()) {
    bool known = false;
    for (CpuFeature f : {CpuFeature::kAvx2, CpuFeature::kAvx512, CpuFeature::kAvx512Vnni, CpuFeature::kAvx512Bf16}) {
      if (name != testing::CpuFeatureName(f)) continue;
      known = true;
      EXPECT_FALSE(testing::CpuHas(f)) << "DEEPINFER_TEST_CPU_LACKS declares " << name << " missing, but this CPU has it";
    }
    EXPECT_TRUE(known) << "DEEPINFER_TEST_CPU_LACKS names '" << name << "': not one of avx2, avx512, avx512_vnni, avx512_bf16";
  }
}

// SetIsa re-resolves the kernel table: the active table is the chosen ISA's, under the name IsaName reports.
TEST(DispatchTest, SetIsaSwitchesTheKernelTable) {
  IsaGuard guard;
  for (Isa isa : AvailableIsas()) {
    SetIsa(isa);
    EXPECT_EQ(ActiveIsa(), isa);
    EXPECT_EQ(Kernels().isa, isa);
    EXPECT_STREQ(Kernels().name, IsaName(isa));
    EXPECT_EQ(Kernels().bf16_dot, isa == Isa::kAvx512 && DetectCpu().avx512_bf16) << IsaName(isa);
  }
  SetIsa(Isa::kScalar);
  EXPECT_EQ(Kernels().gemm_slice, &isa_scalar::GemmSlice);
  EXPECT_EQ(Kernels().attend_rows, &isa_scalar::AttendRows);
  SetIsa(Isa::kAvx512);  // clamped to what the CPU has
  EXPECT_EQ(ActiveIsa(), BestIsa());
}

}  // namespace
}  // namespace deepinfer

namespace deepinfer {
namespace {

// A paged cache for the window tests: position p in row rows[p], blocks of 16 rows shuffled, n_kv heads of hd
// elements per row; ks/vs the values as stored. kGuardRows rows of NaN sit in front of row 0 (k() and v() point
// past them): a kernel that reads a row index below 0 then turns its output into NaN instead of reading nothing.
struct WindowCache {
  static constexpr int kGuardRows = 8;
  DType dt;
  int n_kv, hd, kvdim;
  size_t es;
  std::vector<int32_t> rows;
  std::vector<uint8_t> kb, vb;
  std::vector<double> ks, vs;
  WindowCache(DType t, int n_kv_heads, int head_dim, int positions, uint32_t seed)
      : dt(t), n_kv(n_kv_heads), hd(head_dim), kvdim(n_kv_heads * head_dim), es(t == DType::kF32 ? 4 : 2) {
    const int nblocks = (positions + 15) / 16;
    std::vector<int> perm(nblocks);
    for (int b = 0; b < nblocks; ++b) perm[b] = b;
    std::shuffle(perm.begin(), perm.end(), std::mt19937(seed));
    for (int p = 0; p < positions; ++p) rows.push_back(perm[p / 16] * 16 + p % 16);
    const int64_t n = static_cast<int64_t>(nblocks) * 16 * kvdim, guard = static_cast<int64_t>(kGuardRows) * kvdim;
    const auto kf = RandomVec(n, seed + 1), vf = RandomVec(n, seed + 2);
    kb.resize((guard + n) * es), vb.resize((guard + n) * es), ks.resize(n), vs.resize(n);
    for (int64_t i = 0; i < guard; ++i) {
      Store(std::nanf(""), &kb[i * es], nullptr);
      Store(std::nanf(""), &vb[i * es], nullptr);
    }
    for (int64_t i = 0; i < n; ++i) {
      Store(kf[i], &kb[(guard + i) * es], &ks[i]);
      Store(vf[i], &vb[(guard + i) * es], &vs[i]);
    }
  }
  void Store(float x, uint8_t* dst, double* stored) const {
    if (dt == DType::kF32) {
      std::memcpy(dst, &x, 4);
      if (stored) *stored = x;
      return;
    }
    const uint16_t h = dt == DType::kBF16 ? F32ToBF16(x) : F32ToF16(x);
    std::memcpy(dst, &h, 2);
    if (stored) *stored = dt == DType::kBF16 ? BF16ToF32(h) : F16ToF32(h);
  }
  const uint8_t* k() const { return kb.data() + static_cast<size_t>(kGuardRows) * kvdim * es; }
  const uint8_t* v() const { return vb.data() + static_cast<size_t>(kGuardRows) * kvdim * es; }
};

// Double-precision attention of query row q (n_heads * hd) at position pos over positions
// [max(0, pos + 1 - window), pos] (all of [0, pos] for window 0), with sinks[h] as one more logit of the softmax's
// denominator when sinks is given. A bf16 cache is dotted with q rounded to bf16 (PagedAttention's dot-type rule).
std::vector<double> WindowReference(const WindowCache& c, int n_heads, const float* q, int pos, int window,
                                    const float* sinks, double scale) {
  std::vector<double> out(static_cast<size_t>(n_heads) * c.hd);
  const int group = n_heads / c.n_kv, lo = window > 0 ? std::max(0, pos + 1 - window) : 0;
  std::vector<double> s(pos + 1 - lo);
  for (int h = 0; h < n_heads; ++h) {
    const int kvh = h / group;
    double mx = sinks ? sinks[h] : -1e300, z = 0;
    for (int p = lo; p <= pos; ++p) {
      double d = 0;
      for (int e = 0; e < c.hd; ++e) {
        const float qe = q[h * c.hd + e];
        const double k = c.ks[static_cast<int64_t>(c.rows[p]) * c.kvdim + kvh * c.hd + e];
        d += (c.dt == DType::kBF16 ? BF16ToF32(F32ToBF16(qe)) : qe) * k;
      }
      mx = std::max(mx, s[p - lo] = d * scale);
    }
    for (double& e : s) z += (e = std::exp(e - mx));
    if (sinks) z += std::exp(sinks[h] - mx);
    for (int p = lo; p <= pos; ++p)
      for (int e = 0; e < c.hd; ++e)
        out[h * c.hd + e] += s[p - lo] / z * c.vs[static_cast<int64_t>(c.rows[p]) * c.kvdim + kvh * c.hd + e];
  }
  return out;
}

// PagedAttention of m query rows at positions start .. start + m - 1 of one sequence whose positions live in rows.
// rows[0] holds position rows_first's row.
std::vector<float> AttendWindow(const WindowCache& c, const int32_t* rows, int n_heads, const std::vector<float>& q, int start,
                                int m, int window, const float* sinks, float scale, int rows_first = 0) {
  std::vector<float> out(static_cast<size_t>(m) * n_heads * c.hd, -7.f);
  const AttnSeq seq{0, m, start, rows, rows_first};
  AttnShape shape{n_heads, c.n_kv, c.hd, c.hd, c.kvdim, c.kvdim};
  shape.window = window;
  shape.sinks = sinks;
  PagedAttention(q.data(), &seq, 1, c.k(), c.v(), c.dt, shape, scale, out.data());
  return out;
}

// Sliding windows (1, 3, one tile, a tile + 1, 100, longer than the context) and sinks (per head: dominating +8,
// moderate, negative and negligible), alone and together, against a double-precision reference on every ISA and
// cache type: prefill rows late in a context that crosses four 64-position tiles (rows whose windows start in
// different tiles share the task), prefill rows from position 0 (windows cut at 0) and a decode row; GQA 4.
// A window at least as long as the context gives bitwise the output of no window.
TEST(OpsTest, SlidingWindowAndSinksMatchDoubleReference) {
  const int n_kv = 2, n_heads = 8, hd = 40, positions = 260;  // hd 40: masked tails of the 16/64-element steps
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  const float sinks[n_heads] = {8.f, -3.f, 0.5f, -20.f, 8.f, 1.5f, -1.f, 4.f};
  const std::pair<int, int> row_sets[] = {{150, 110}, {0, 70}, {259, 1}};  // (start, m)
  IsaGuard guard;
  SetComputeThreads(2);
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    const WindowCache c(dt, n_kv, hd, positions, 500 + static_cast<uint32_t>(dt));
    for (auto [start, m] : row_sets) {
      const auto q = RandomVec(static_cast<size_t>(m) * n_heads * hd, 510 + start);
      for (int window : {1, 3, 64, 65, 100, 1000})
        for (const float* sk : {static_cast<const float*>(nullptr), sinks}) {
          std::vector<std::vector<double>> ref(m);
          for (int i = 0; i < m; ++i)
            ref[i] = WindowReference(c, n_heads, &q[static_cast<size_t>(i) * n_heads * hd], start + i, window, sk, scale);
          for (Isa isa : AvailableIsas()) {
            SetIsa(isa);
            const auto out = AttendWindow(c, c.rows.data(), n_heads, q, start, m, window, sk, scale);
            double worst = 0;
            for (int i = 0; i < m; ++i)
              for (int e = 0; e < n_heads * hd; ++e)
                worst = std::max(worst, std::abs(out[static_cast<size_t>(i) * n_heads * hd + e] - ref[i][e]));
            EXPECT_LT(worst, 2e-5) << IsaName(isa) << " " << DTypeName(dt) << " start " << start << " m " << m << " window "
                                   << window << (sk ? " sinks" : "");
            if (window == 1000) {
              const auto full = AttendWindow(c, c.rows.data(), n_heads, q, start, m, 0, sk, scale);
              EXPECT_EQ(0, std::memcmp(full.data(), out.data(), out.size() * sizeof(float)))
                  << "window past the context differs from none: " << IsaName(isa) << " " << DTypeName(dt) << " start " << start;
            }
          }
        }
    }
  }
  SetComputeThreads(0);
}

// rows[p] of positions below the first query row's window are never read (a later change frees those KV blocks):
// set to -1 (a row of NaN in front of the cache, which would poison the output) or to INT32_MIN / 2 (far outside
// any mapping, which would crash), the output is bitwise what valid rows give. Windows whose first row starts
// inside a tile (3, 65, 100), on a tile boundary (64) or that hold one position, at 1 and 3 threads (which block
// the rows differently), prefill and decode, with sinks.
TEST(OpsTest, RowsBelowTheWindowAreNeverRead) {
  const int n_kv = 2, n_heads = 8, hd = 32, positions = 260;
  const float sinks[n_heads] = {0.5f, -2.f, 3.f, 0.f, 1.f, -1.f, 2.f, -4.f};
  IsaGuard guard;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    const WindowCache c(dt, n_kv, hd, positions, 600 + static_cast<uint32_t>(dt));
    for (auto [start, m] : {std::pair{150, 110}, std::pair{259, 1}, std::pair{200, 5}}) {
      const auto q = RandomVec(static_cast<size_t>(m) * n_heads * hd, 610 + m);
      for (int window : {1, 3, 64, 65, 100})
        for (int32_t garbage : {-1, INT32_MIN / 2}) {
          std::vector<int32_t> rows = c.rows;
          for (int p = 0; p < start + 1 - window; ++p) rows[p] = garbage;
          for (Isa isa : AvailableIsas()) {
            SetIsa(isa);
            for (int threads : {1, 3}) {
              SetComputeThreads(threads);
              const auto valid = AttendWindow(c, c.rows.data(), n_heads, q, start, m, window, sinks, 0.2f);
              const auto got = AttendWindow(c, rows.data(), n_heads, q, start, m, window, sinks, 0.2f);
              ASSERT_EQ(0, std::memcmp(valid.data(), got.data(), got.size() * sizeof(float)))
                  << IsaName(isa) << " " << DTypeName(dt) << " start " << start << " m " << m << " window " << window
                  << " rows below it " << garbage << " threads " << threads;
              // The same rows from the window start on only (AttnSeq::rows_first, what a windowed KV group
              // passes), behind 64 garbage entries that any read below the window would hit.
              const int lo = std::max(0, start + 1 - window);
              std::vector<int32_t> from_lo(64, garbage);
              from_lo.insert(from_lo.end(), c.rows.begin() + lo, c.rows.begin() + start + m);
              const auto cut = AttendWindow(c, from_lo.data() + 64, n_heads, q, start, m, window, sinks, 0.2f, lo);
              ASSERT_EQ(0, std::memcmp(valid.data(), cut.data(), cut.size() * sizeof(float)))
                  << IsaName(isa) << " " << DTypeName(dt) << " rows from " << lo << " start " << start << " m " << m
                  << " window " << window << " threads " << threads;
            }
          }
        }
    }
  }
  SetComputeThreads(0);
}

}  // namespace
}  // namespace deepinfer
