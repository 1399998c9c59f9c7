// MatMulHeads (per-head products on strided head slices, split over the pool by heads) against the plain loop it
// replaces: each head's slice copied out, one single-threaded MatMulSlice, the result scattered back. Bitwise,
// on every ISA, for several weight types and thread counts, and nothing outside the heads' slices written.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/cpu/gemm.h"
#include "isa_test_util.h"
#include "test_util.h"

namespace deepinfer {
namespace {

using testing::AvailableIsas;
using testing::IsaGuard;
using testing::RandomVec;

// All heads' weights as one {heads * out_width, in_width} matrix (as MLA's W_UV is stored); head h is its rows
// [h * out_width, (h + 1) * out_width), with scale_row0 set for FP8 block scales as the model's per-head views do.
struct HeadWeights {
  DType dtype;
  int heads, out_width, in_width;
  std::vector<uint8_t> bytes;
  std::vector<float> scales;  // FP8 only
  TensorView Head(int h) const {
    TensorView v;
    v.dtype = dtype;
    v.shape = {out_width, in_width};
    const size_t row_bytes = DTypeBytes(dtype, static_cast<size_t>(in_width));
    v.data = bytes.data() + static_cast<size_t>(h) * out_width * row_bytes;
    v.nbytes = static_cast<size_t>(out_width) * row_bytes;
    if (dtype == DType::kF8E4M3) {
      v.block_scale = scales.data();
      v.scale_cols = (in_width + TensorView::kFp8Block - 1) / TensorView::kFp8Block;
      v.scale_row0 = static_cast<int64_t>(h) * out_width;
    }
    return v;
  }
};

HeadWeights MakeWeights(DType dt, int heads, int out_width, int in_width) {
  HeadWeights w{dt, heads, out_width, in_width, {}, {}};
  const int64_t rows = static_cast<int64_t>(heads) * out_width;
  const size_t row_bytes = DTypeBytes(dt, static_cast<size_t>(in_width));
  w.bytes.resize(rows * row_bytes);
  if (dt == DType::kF8E4M3) {
    std::mt19937 rng(11);
    std::uniform_int_distribution<int> code(0, 255);
    for (auto& b : w.bytes) {
      b = static_cast<uint8_t>(code(rng));
      if ((b & 0x7f) == 0x7f) b ^= 1;  // no NaN codes
    }
    const int64_t scale_rows = (rows + TensorView::kFp8Block - 1) / TensorView::kFp8Block;
    const int64_t scale_cols = (in_width + TensorView::kFp8Block - 1) / TensorView::kFp8Block;
    for (int64_t i = 0; i < scale_rows * scale_cols; ++i) w.scales.push_back(0.001f * (i + 1));
    return w;
  }
  const auto wf = RandomVec(rows * in_width, 77, 0.5f);
  for (int64_t r = 0; r < rows; ++r) QuantizeRow(dt, wf.data() + r * in_width, w.bytes.data() + r * row_bytes, in_width);
  return w;
}

TEST(GemmTest, MatMulHeadsEqualsThePerHeadLoopBitwise) {
  // Each head's input is the first in_width floats of a head_in-float slot (the rest, like MLA's q_pe, is not
  // read); its output fills the first out_width floats of a head_out-float slot (the rest is left alone).
  const int heads = 7, in_width = 64, out_width = 40, head_in = in_width + 8, head_out = out_width + 6;
  IsaGuard guard;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kQ8_0, DType::kF8E4M3}) {
    // 300 weight rows: the FP8 per-head views' scales start inside a 128-row block for most heads.
    const HeadWeights w = MakeWeights(dt, heads, out_width, in_width);
    for (int rows : {1, 5}) {
      const auto x = RandomVec(static_cast<size_t>(rows) * heads * head_in, 90 + rows);
      // The loop MatMulHeads replaces (src/model/transformer.cc's absorbed MLA), on one thread.
      auto plain_loop = [&](std::vector<float>* y) {
        std::vector<float> in(static_cast<size_t>(rows) * in_width), out(static_cast<size_t>(rows) * out_width);
        for (int h = 0; h < heads; ++h) {
          for (int t = 0; t < rows; ++t)
            std::memcpy(&in[t * in_width], &x[(t * heads + h) * head_in], sizeof(float) * in_width);
          MatMulSlice(w.Head(h), in.data(), rows, out.data(), out_width, 0, out_width);
          for (int t = 0; t < rows; ++t)
            std::memcpy(&(*y)[(t * heads + h) * head_out], &out[t * out_width], sizeof(float) * out_width);
        }
      };
      for (Isa isa : AvailableIsas()) {
        SetIsa(isa);
        SetComputeThreads(1);
        std::vector<float> expected(static_cast<size_t>(rows) * heads * head_out, -3.f);
        plain_loop(&expected);
        for (int threads : {1, 2, 3, 8}) {
          SetComputeThreads(threads);
          std::vector<float> got(expected.size(), -3.f);
          HeadsMatMul spec;
          spec.heads = heads;
          spec.rows = rows;
          spec.head_weight = [&](int h) { return w.Head(h); };
          spec.x = x.data();
          spec.x_stride = static_cast<int64_t>(heads) * head_in;
          spec.x_head_offset = head_in;
          spec.in_width = in_width;
          spec.y = got.data();
          spec.y_stride = static_cast<int64_t>(heads) * head_out;
          spec.y_head_offset = head_out;
          spec.out_width = out_width;
          MatMulHeads(spec);
          EXPECT_EQ(got, expected) << DTypeName(dt) << " rows " << rows << " " << IsaName(isa) << " threads " << threads;
        }
      }
    }
  }
  SetComputeThreads(0);
}

}  // namespace
}  // namespace deepinfer
