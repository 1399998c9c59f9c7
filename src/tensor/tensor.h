// A non-owning view of a weight tensor in memory (usually mmapped). Shape is outermost-first (PyTorch
// order): a linear layer's weight is {out_features, in_features}, rows contiguous.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace deepinfer {

struct TensorView {
  DType dtype = DType::kInvalid;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t nbytes = 0;

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
};

}  // namespace deepinfer
