// The same bits on every ISA with FMA units: matrix products of every weight type and paged attention over
// f32/f16/bf16 caches give bit-identical outputs on AVX2 and AVX-512 (each forced through SetIsa on this
// machine), so a model produces the same tokens and log-probs on any x86 CPU from 2013 on. Named exceptions:
//   - the scalar unit (CPUs without AVX2/FMA) takes the same steps with each multiply-add unfused (exact fmaf
//     emulation cost 20x in f32 prefill, docs/benchmarks.md); kernels_test checks it against the references;
//   - bf16 products on AVX512-BF16 (vdpbf16ps sums bf16 pairs in its own order, for bf16 weights and bf16 KV
//     caches) are compared between the other tables only. The AVX-512 table without its BF16 dot
// (what an AVX-512 CPU without BF16 runs, forced with SetBf16Dot(false)) is one more "ISA" here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>

#include "base/thread_pool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/gemm.h"
#include "isa_test_util.h"
#include "quant_test_util.h"
#include "test_util.h"

namespace deepinfer {
namespace {

using testing::AvailableIsas;
using testing::IsaGuard;
using testing::RandomVec;

// The kernel tables to compare: every ISA, and AVX-512 once more without the BF16 dot where the CPU has it.
struct Table {
  Isa isa;
  bool bf16_dot;
};
std::vector<Table> Tables() {
  std::vector<Table> out;
  for (Isa isa : AvailableIsas()) {
    if (isa == Isa::kScalar) continue;  // the named exception (see the file comment)
    out.push_back({isa, false});
    if (isa == Isa::kAvx512 && DetectCpu().avx512_bf16) out.push_back({isa, true});
  }
  return out;
}
// Selects a table; restores the ISA and the BF16 dot when it goes out of scope.
struct TableGuard {
  IsaGuard isa;
  bool bf16 = SetBf16Dot(true);
  ~TableGuard() { SetBf16Dot(bf16); }
};
std::string Use(const Table& t) {
  SetIsa(t.isa);
  SetBf16Dot(t.bf16_dot);
  return Kernels().name;
}

TEST(CrossIsaTest, EveryIsaHasItsTable) {
  // On the CI machines (AVX-512) all three ISAs run here; on an AVX2 machine two do.
  ASSERT_GE(AvailableIsas().size(), DetectCpu().avx512 ? 3u : 2u);
  TableGuard guard;
  if (DetectCpu().avx512_bf16) {
    EXPECT_EQ(Use({Isa::kAvx512, false}), "avx512");
    EXPECT_FALSE(Kernels().bf16_dot);
    EXPECT_EQ(Use({Isa::kAvx512, true}), "avx512+bf16");
    EXPECT_TRUE(Kernels().bf16_dot);
  }
}

// Weight rows of every type, K with and without a partial 16/32-element tail (f32/f16/bf16), x rows 1 (decode
// paths), 3, 4 (four-row tiles) and 9; outputs compared bit for bit with the scalar kernels'.
TEST(CrossIsaTest, MatMulOfEveryWeightTypeIsBitwiseTheSameOnEveryIsa) {
  TableGuard guard;
  SetComputeThreads(2);
  const DType types[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
                         DType::kQ5_0, DType::kQ5_1, DType::kIQ4_NL, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K,
                         DType::kQ5_K, DType::kQ6_K, DType::kIQ4_XS, DType::kMXFP4};
  int compared = 0;
  for (DType t : types) {
    const int blk = GetDTypeInfo(t).block_elems;
    std::vector<int64_t> ks = {blk == 1 ? 64 : blk * (blk == 32 ? 8 : 2)};
    if (blk == 1) ks.push_back(203);  // a tail of 11 past the 32- and 16-element steps
    for (int64_t k : ks)
      for (int m : {1, 3, 4, 9}) {
        const int64_t n = 37;
        const auto wf = RandomVec(static_cast<size_t>(n * k), static_cast<uint32_t>(k * 7 + m + static_cast<int>(t) * 131), 0.5f);
        std::vector<uint8_t> wb(DTypeBytes(t, n * k));
        if (CanQuantizeRow(t))
          for (int64_t r = 0; r < n; ++r) QuantizeRow(t, wf.data() + r * k, wb.data() + r * DTypeBytes(t, k), k);
        else  // iq4_nl / iq4_xs: no quantizer here, random blocks of moderate scale
          wb = testing::RandomBlocks(t, static_cast<size_t>(n * k / blk), static_cast<uint32_t>(k + m), true);
        TensorView w;
        w.dtype = t;
        w.shape = {n, k};
        w.data = wb.data();
        w.nbytes = wb.size();
        const auto x = RandomVec(static_cast<size_t>(m) * k, static_cast<uint32_t>(m * 31 + k));
        std::vector<float> first;
        std::string first_name;
        for (const Table& table : Tables()) {
          if (t == DType::kBF16 && table.bf16_dot) continue;  // the named exception (see the file comment)
          const std::string name = Use(table);
          std::vector<float> y(static_cast<size_t>(m) * n, -7.f);
          MatMul(w, x.data(), m, y.data());
          if (first.empty()) {
            first = y, first_name = name;
            continue;
          }
          ++compared;
          ASSERT_EQ(0, std::memcmp(first.data(), y.data(), y.size() * sizeof(float)))
              << DTypeName(t) << " k=" << k << " m=" << m << ": " << name << " differs from " << first_name;
        }
      }
  }
  if (DetectCpu().avx512) {
    EXPECT_GE(compared, 15 * 4);  // every type compared on at least two tables
  }
}

// A paged cache of `positions` rows (blocks of 16 shuffled), n_kv heads of hd elements, values as stored.
struct PagedCache {
  std::vector<int32_t> rows;
  std::vector<uint8_t> k, v;
  PagedCache(DType t, int n_kv, int hd, int positions, uint32_t seed) {
    const int nblocks = (positions + 15) / 16;
    std::vector<int> perm(nblocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(seed));
    for (int p = 0; p < positions; ++p) rows.push_back(perm[p / 16] * 16 + p % 16);
    const int64_t n = static_cast<int64_t>(nblocks) * 16 * n_kv * hd;
    const size_t es = t == DType::kF32 ? 4 : 2;
    const auto kf = RandomVec(n, seed + 1, 2.f), vf = RandomVec(n, seed + 2);
    k.resize(n * es), v.resize(n * es);
    for (int64_t i = 0; i < n; ++i) {
      if (t == DType::kF32) {
        std::memcpy(&k[i * 4], &kf[i], 4), std::memcpy(&v[i * 4], &vf[i], 4);
      } else {
        const uint16_t kh = t == DType::kBF16 ? F32ToBF16(kf[i]) : F32ToF16(kf[i]);
        const uint16_t vh = t == DType::kBF16 ? F32ToBF16(vf[i]) : F32ToF16(vf[i]);
        std::memcpy(&k[i * 2], &kh, 2), std::memcpy(&v[i * 2], &vh, 2);
      }
    }
  }
};

// Prefill blocks and decode rows over contexts that cross 64-position tiles, GQA ratios 1/4/8 (slot counts on
// both sides of the AVX-512 kernel's by-position limit of 8) and head dims 64/128.
TEST(CrossIsaTest, PagedAttentionIsBitwiseTheSameOnEveryIsa) {
  TableGuard guard;
  SetComputeThreads(2);
  int compared = 0;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16})
    for (int hd : {64, 128})
      for (int ratio : {1, 4, 8})
        for (auto [start, m] : {std::pair{0, 70}, std::pair{130, 1}, std::pair{63, 3}}) {
          const int n_kv = 2, n_heads = n_kv * ratio, positions = start + m;
          const PagedCache c(t, n_kv, hd, positions, static_cast<uint32_t>(hd * 10 + ratio + start));
          const int64_t stride = static_cast<int64_t>(n_heads) * hd;
          const auto q = RandomVec(static_cast<size_t>(m) * stride, static_cast<uint32_t>(start + m + hd));
          const AttnSeq seq{0, m, start, c.rows.data()};
          const AttnShape shape{n_heads, n_kv, hd, hd, n_kv * hd, n_kv * hd};
          std::vector<float> first;
          std::string first_name;
          for (const Table& table : Tables()) {
            if (t == DType::kBF16 && table.bf16_dot) continue;  // the named exception (see the file comment)
            const std::string name = Use(table);
            std::vector<float> out(static_cast<size_t>(m) * stride, -7.f);
            PagedAttention(q.data(), &seq, 1, c.k.data(), c.v.data(), t, shape, 1.f / std::sqrt(static_cast<float>(hd)), out.data());
            if (first.empty()) {
              first = out, first_name = name;
              continue;
            }
            ++compared;
            ASSERT_EQ(0, std::memcmp(first.data(), out.data(), out.size() * sizeof(float)))
                << name << " differs from " << first_name << ": " << (t == DType::kF32 ? "f32" : t == DType::kF16 ? "f16" : "bf16")
                << " hd " << hd << " ratio " << ratio << " start " << start << " m " << m;
          }
        }
  if (DetectCpu().avx512) {
    EXPECT_GE(compared, 3 * 2 * 3 * 3);
  }
}

// Sliding windows and sinks: windows of 1, 3, one tile, a tile + 1 and 100 positions, with and without sinks (one
// per query head, some dominating), over prefill blocks whose rows start their windows in different tiles, a
// prefill from position 0 and decode rows, GQA ratios 1/4/8 (both sides of the by-position limit), f32, f16 and
// bf16 caches (bf16 not on the vdpbf16ps table, the named exception).
TEST(CrossIsaTest, WindowedAttentionWithSinksIsBitwiseTheSameOnEveryIsa) {
  TableGuard guard;
  SetComputeThreads(2);
  const int hd = 64, n_kv = 2;
  const auto sinks = RandomVec(16, 900, 6.f);
  int compared = 0;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16})
    for (int ratio : {1, 4, 8})
      for (auto [start, m] : {std::pair{150, 70}, std::pair{0, 70}, std::pair{200, 1}, std::pair{127, 3}}) {
        const int n_heads = n_kv * ratio, positions = start + m;
        const PagedCache c(t, n_kv, hd, positions, static_cast<uint32_t>(ratio * 1000 + start));
        const int64_t stride = static_cast<int64_t>(n_heads) * hd;
        const auto q = RandomVec(static_cast<size_t>(m) * stride, static_cast<uint32_t>(start + m + ratio));
        const AttnSeq seq{0, m, start, c.rows.data()};
        for (int window : {1, 3, 64, 65, 100})
          for (const float* sk : {static_cast<const float*>(nullptr), sinks.data()}) {
            AttnShape shape{n_heads, n_kv, hd, hd, n_kv * hd, n_kv * hd};
            shape.window = window;
            shape.sinks = sk;
            std::vector<float> first;
            std::string first_name;
            for (const Table& table : Tables()) {
              if (t == DType::kBF16 && table.bf16_dot) continue;  // the named exception (see the file comment)
              const std::string name = Use(table);
              std::vector<float> out(static_cast<size_t>(m) * stride, -7.f);
              PagedAttention(q.data(), &seq, 1, c.k.data(), c.v.data(), t, shape, 0.125f, out.data());
              if (first.empty()) {
                first = out, first_name = name;
                continue;
              }
              ++compared;
              ASSERT_EQ(0, std::memcmp(first.data(), out.data(), out.size() * sizeof(float)))
                  << name << " differs from " << first_name << ": " << DTypeName(t) << " ratio " << ratio << " start " << start
                  << " m " << m << " window " << window << (sk ? " sinks" : "");
            }
          }
      }
  if (DetectCpu().avx512) {
    EXPECT_GE(compared, 3 * 3 * 4 * 5 * 2);
  }
}

}  // namespace
}  // namespace deepinfer
