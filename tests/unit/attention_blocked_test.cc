// The query-row-blocked attention kernel (AttendRows through PagedAttention) on every ISA (isa_test_util.h):
// against a double-precision reference at sizes that are not multiples of the K/V tile (64 positions), the
// AVX2 slot vectors (8) or the row blocks, for GQA ratios 1/4/8, head dims 64/128 and f32/bf16/f16 caches in
// paged blocks out of order; and bitwise invariance of every row to how rows are blocked (chunked prefill,
// decode one row at a time, other sequences in the batch), to the head grouping and to the thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "base/thread_pool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_features.h"
#include "tensor/dtype.h"
#include "isa_test_util.h"
#include "test_util.h"

namespace deepinfer {
namespace {

using testing::AvailableIsas;
using testing::IsaGuard;
using testing::RandomVec;

constexpr int kBlock = 16;  // positions per paged block

// A paged K/V cache: position p of the sequence lives in row rows[p], blocks of 16 positions shuffled.
struct Cache {
  DType dt;
  int n_kv, hd;
  std::vector<int32_t> rows;
  std::vector<uint8_t> k, v;
  std::vector<double> ks, vs;  // the values as stored, by row
  Cache(DType t, int n_kv_heads, int head_dim, int positions, uint32_t seed) : dt(t), n_kv(n_kv_heads), hd(head_dim) {
    const int nblocks = (positions + kBlock - 1) / kBlock;
    std::vector<int> perm(nblocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(seed));
    for (int p = 0; p < positions; ++p) rows.push_back(perm[p / kBlock] * kBlock + p % kBlock);
    const int64_t n = static_cast<int64_t>(nblocks) * kBlock * n_kv * hd;
    const size_t es = t == DType::kF32 ? 4 : 2;
    const auto kf = RandomVec(n, seed + 1), vf = RandomVec(n, seed + 2);
    k.resize(n * es), v.resize(n * es), ks.resize(n), vs.resize(n);
    for (int64_t i = 0; i < n; ++i) {
      Store(kf[i], &k[i * es], &ks[i]);
      Store(vf[i], &v[i * es], &vs[i]);
    }
  }
  void Store(float x, uint8_t* dst, double* stored) const {
    if (dt == DType::kF32) {
      std::memcpy(dst, &x, 4);
      *stored = x;
      return;
    }
    const uint16_t h = dt == DType::kBF16 ? F32ToBF16(x) : F32ToF16(x);
    std::memcpy(dst, &h, 2);
    *stored = dt == DType::kBF16 ? BF16ToF32(h) : F16ToF32(h);
  }
  int64_t kv_dim() const { return static_cast<int64_t>(n_kv) * hd; }
};

// Double-precision causal attention for query row q (n_heads * hd, at absolute position pos): out[h * hd + d].
// A bf16 cache is dotted with q rounded to bf16 (PagedAttention's dot-type rule), f16/f32 with q as given.
std::vector<double> Reference(const Cache& c, int n_heads, const float* q, int pos, float scale) {
  std::vector<double> out(static_cast<size_t>(n_heads) * c.hd);
  const int group = n_heads / c.n_kv, len = pos + 1;
  std::vector<double> s(len);
  for (int h = 0; h < n_heads; ++h) {
    const int kvh = h / group;
    double mx = -1e300, z = 0;
    for (int p = 0; p < len; ++p) {
      const double* kr = &c.ks[c.rows[p] * c.kv_dim() + static_cast<int64_t>(kvh) * c.hd];
      double d = 0;
      for (int e = 0; e < c.hd; ++e) {
        const float qe = q[h * c.hd + e];
        d += (c.dt == DType::kBF16 ? BF16ToF32(F32ToBF16(qe)) : qe) * kr[e];
      }
      mx = std::max(mx, s[p] = d * scale);
    }
    for (double& e : s) z += (e = std::exp(e - mx));
    for (int p = 0; p < len; ++p) {
      const double* vr = &c.vs[c.rows[p] * c.kv_dim() + static_cast<int64_t>(kvh) * c.hd];
      for (int e = 0; e < c.hd; ++e) out[h * c.hd + e] += s[p] / z * vr[e];
    }
  }
  return out;
}

// The shape of n_heads query heads over the cache's K/V heads, with a sliding window and sinks (0 / nullptr: none).
AttnShape Shape(const Cache& c, int n_heads, int n_kv, int window, const float* sinks) {
  AttnShape shape{n_heads, n_kv, c.hd, c.hd, static_cast<int>(c.kv_dim()), static_cast<int>(c.kv_dim())};
  shape.window = window;
  shape.sinks = sinks;
  return shape;
}

// PagedAttention for the sequence's rows [r0, r0 + m) (absolute positions start + r0 ...), q rows of n_heads * hd.
std::vector<float> Attend(const Cache& c, int n_heads, const std::vector<float>& q, int start, int r0, int m, float scale,
                          int window = 0, const float* sinks = nullptr) {
  const int64_t stride = static_cast<int64_t>(n_heads) * c.hd;
  std::vector<float> out(m * stride, -7.f);
  const AttnSeq seq{0, m, start + r0, c.rows.data()};
  PagedAttention(q.data() + r0 * stride, &seq, 1, c.k.data(), c.v.data(), c.dt, Shape(c, n_heads, c.n_kv, window, sinks), scale,
                 out.data());
  return out;
}

const char* Name(DType t) { return t == DType::kF32 ? "f32" : t == DType::kBF16 ? "bf16" : "f16"; }

// 37 cached positions + 75 query rows: 112 positions, crossing a 64-position tile boundary mid-block, with row
// blocks (32 slots / group heads) that do not divide 75.
TEST(AttentionBlockedTest, MatchesDoubleReferenceAtOddSizes) {
  const int n_kv = 2, start = 37, m = 75;
  IsaGuard guard;
  SetComputeThreads(2);
  for (int hd : {64, 128})
    for (int ratio : {1, 4, 8})
      for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
        const int n_heads = n_kv * ratio;
        const float scale = 1.f / std::sqrt(static_cast<float>(hd));
        const Cache c(dt, n_kv, hd, start + m, 100 + hd + ratio);
        const auto q = RandomVec(static_cast<size_t>(m) * n_heads * hd, 7 + ratio);
        std::vector<std::vector<double>> ref(m);
        for (int i = 0; i < m; ++i) ref[i] = Reference(c, n_heads, &q[static_cast<size_t>(i) * n_heads * hd], start + i, scale);
        for (Isa isa : AvailableIsas()) {
          SetIsa(isa);
          const auto out = Attend(c, n_heads, q, start, 0, m, scale);
          double worst = 0;
          for (int i = 0; i < m; ++i)
            for (int e = 0; e < n_heads * hd; ++e)
              worst = std::max(worst, std::abs(out[static_cast<size_t>(i) * n_heads * hd + e] - ref[i][e]));
          // f32 sums of <= 128 products and <= 112 weighted values of magnitude <= 1: a few 1e-7 per term.
          EXPECT_LT(worst, 1e-5) << IsaName(isa) << " hd " << hd << " ratio " << ratio << " " << Name(dt);
        }
      }
}

// Every output row is bitwise the same however the rows are blocked and whatever runs beside it: the whole
// prompt in one call, chunked prefill (chunks of 1, 5, 64), each row alone (decode), one head alone, at 1, 2, 3
// and 7 threads, and next to another sequence in the same batch; with a sliding window and sinks (0 / nullptr:
// none) as given.
void ExpectRowsBitwiseInvariant(int start, int m, int window, const float* sinks) {
  const int n_kv = 2, ratio = 4, n_heads = n_kv * ratio, hd = 64;
  const float scale = 0.125f;
  SCOPED_TRACE(::testing::Message() << "start " << start << " m " << m << " window " << window << (sinks ? " sinks" : ""));
  IsaGuard guard;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    const Cache c(dt, n_kv, hd, start + m, 300);
    const int64_t stride = static_cast<int64_t>(n_heads) * hd;
    const auto q = RandomVec(static_cast<size_t>(m) * stride, 301);
    for (Isa isa : AvailableIsas()) {
      SetIsa(isa);
      SetComputeThreads(2);
      const auto whole = Attend(c, n_heads, q, start, 0, m, scale, window, sinks);
      auto expect_same = [&](const std::vector<float>& got, int r0, const char* what, int arg) {
        ASSERT_EQ(0, std::memcmp(got.data(), whole.data() + r0 * stride, got.size() * sizeof(float)))
            << what << " " << arg << " rows from " << r0 << " " << IsaName(isa) << " " << Name(dt);
      };
      for (int chunk : {1, 5, 64})
        for (int r0 = 0; r0 < m; r0 += chunk)
          expect_same(Attend(c, n_heads, q, start, r0, std::min(chunk, m - r0), scale, window, sinks), r0, "chunk", chunk);
      for (int threads : {1, 3, 7}) {
        SetComputeThreads(threads);
        expect_same(Attend(c, n_heads, q, start, 0, m, scale, window, sinks), 0, "threads", threads);
      }
      SetComputeThreads(2);
      // Another sequence (3 rows over its own 9 positions of the same storage) in the same call.
      {
        std::vector<int32_t> other_rows(c.rows.rbegin(), c.rows.rbegin() + 9);
        std::vector<float> qq(q.begin(), q.end());
        const auto q_other = RandomVec(3 * stride, 302);
        qq.insert(qq.end(), q_other.begin(), q_other.end());
        const AttnSeq seqs[2] = {{0, m, start, c.rows.data()}, {m, 3, 6, other_rows.data()}};
        std::vector<float> out((m + 3) * stride);
        PagedAttention(qq.data(), seqs, 2, c.k.data(), c.v.data(), dt, Shape(c, n_heads, n_kv, window, sinks), scale, out.data());
        out.resize(m * stride);
        expect_same(out, 0, "batched with another sequence", 2);
      }
      // Head 5 alone (K/V head 1), as a one-head call on that K/V head's slice of the rows.
      {
        const int h = 5, kvh = h / ratio;
        const size_t es = dt == DType::kF32 ? 4 : 2;
        std::vector<float> qh(static_cast<size_t>(m) * hd), oh(static_cast<size_t>(m) * hd);
        for (int i = 0; i < m; ++i) std::memcpy(&qh[i * hd], &q[i * stride + h * hd], hd * sizeof(float));
        const AttnSeq seq{0, m, start, c.rows.data()};
        PagedAttention(qh.data(), &seq, 1, c.k.data() + kvh * hd * es, c.v.data() + kvh * hd * es, dt,
                       Shape(c, 1, 1, window, sinks ? sinks + h : nullptr), scale, oh.data());
        for (int i = 0; i < m; ++i)
          ASSERT_EQ(0, std::memcmp(&oh[i * hd], &whole[i * stride + h * hd], hd * sizeof(float)))
              << "head alone, row " << i << " " << IsaName(isa) << " " << Name(dt);
      }
    }
  }
}

TEST(AttentionBlockedTest, RowsAreBitwiseInvariantToBlockingHeadsAndThreads) { ExpectRowsBitwiseInvariant(21, 70, 0, nullptr); }

// The same with sliding windows and sinks over 190 positions (three 64-position tiles): windows of one position,
// 5, one tile, a tile + 1 and 100, so rows of one task start their windows in different tiles (and chunks of rows
// start past the first rows' windows); each row alone (chunks of 1) is the decode step at its position.
TEST(AttentionBlockedTest, WindowedRowsWithSinksAreBitwiseInvariantToBlockingHeadsAndThreads) {
  const auto sinks = RandomVec(8, 303, 4.f);  // one per query head, some above every score
  for (int window : {1, 5, 64, 65, 100}) {
    ExpectRowsBitwiseInvariant(100, 90, window, nullptr);
    ExpectRowsBitwiseInvariant(100, 90, window, sinks.data());
  }
  ExpectRowsBitwiseInvariant(21, 70, 0, sinks.data());
}

}  // namespace
}  // namespace deepinfer
