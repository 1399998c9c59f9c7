// Linear layers as the model holds them: a weight {out_features, in_features} in its stored type (rows
// contiguous) and an optional f32 bias. How each one may be split over tensor-parallel ranks is part of its
// role, declared with the tensor (model/arch/tensor_decl.h) and applied by model/shard.cc:
//   column-parallel  output rows split across ranks, no reduction (q/k/v, gate/up, router): RowSlice(w, r0, n)
//   row-parallel     input columns split across ranks, partial sums all-reduced (o_proj, down)
//   row-parallel bias  the bias of a row-parallel product: whole on the rank holding the first part, zeros on the
//                    others, so the all-reduce adds it once (gpt-oss's o_proj and expert down biases)
// Routed experts are one TensorView per expert, so an expert placement is a choice of which views a rank holds.
#pragma once
#include <cstdint>

#include "tensor/tensor.h"

namespace deepinfer {

enum class TpSplit { kReplicated, kColumn, kRow, kRowBias };

// Rows [r0, r0 + rows) of a weight matrix as a view (a column-parallel shard, a per-head slice). FP8 block
// scales stay indexed by the parent's rows.
inline TensorView RowSlice(const TensorView& w, int64_t r0, int64_t rows) {
  TensorView v;
  v.dtype = w.dtype;
  v.shape = {rows, w.cols()};
  v.data = w.row(r0);
  v.nbytes = static_cast<size_t>(rows) * w.row_bytes();
  v.block_scale = w.block_scale;
  v.scale_cols = w.scale_cols;
  v.scale_row0 = w.scale_row0 + r0;
  return v;
}

}  // namespace deepinfer
