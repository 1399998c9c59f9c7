// A non-owning view of a weight tensor in memory (usually mmapped). Shape is outermost-first (PyTorch
// order): a linear layer's weight is {out_features, in_features}, rows contiguous.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/device.h"
#include "tensor/dtype.h"

namespace deepinfer {

struct TensorView {
  DType dtype = DType::kInvalid;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t nbytes = 0;
  // FP8 weights with 128x128 block scales (DeepSeek's weight_scale_inv): element (r, c) is
  // fp8(r, c) * block_scale[(r / 128) * scale_cols + c / 128]. Null for every other tensor.
  const float* block_scale = nullptr;
  int64_t scale_cols = 0;
  int64_t scale_row0 = 0;  // a row slice's first row in the scaled matrix (scales are indexed by that matrix's rows)
  static constexpr int kFp8Block = 128;
  Device device = Device::kCpu;  // where `data` lives (the ops of that device read it)

  int64_t numel() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
  int64_t rows() const { return shape.size() < 2 ? 1 : numel() / shape.back(); }
  int64_t cols() const { return shape.empty() ? 1 : shape.back(); }
  size_t row_bytes() const { return DTypeBytes(dtype, static_cast<size_t>(cols())); }
  const uint8_t* row(int64_t r) const { return static_cast<const uint8_t*>(data) + r * row_bytes(); }
  std::string ShapeString() const;
  // Row r as f32, FP8 block scales applied.
  void RowToF32(int64_t r, float* out) const;
};

}  // namespace deepinfer
