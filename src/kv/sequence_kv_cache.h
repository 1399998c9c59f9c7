// A single sequence's cache, for the tools that run one sequence (logprobs, the decode benchmark, tests): a paged
// cache whose block table is simply 0, 1, 2, ... covering `capacity` positions.
#pragma once
#include <memory>
#include <vector>

#include "kv/kv_layout.h"
#include "kv/paged_kv_cache.h"
#include "tensor/dtype.h"

namespace deepinfer {

class SequenceKvCache {
 public:
  // layout: the model's (or this rank's, under tensor parallelism: RankKvLayout) K/V shape.
  SequenceKvCache(const KvLayout& layout, int capacity, DType dtype = DType::kF32);
  int capacity() const { return capacity_; }
  PagedKvCache& paged() { return *paged_; }
  const std::vector<int32_t>& block_table() const { return table_; }
  size_t bytes() const { return paged_->bytes(); }

 private:
  int capacity_;
  std::unique_ptr<PagedKvCache> paged_;
  std::vector<int32_t> table_;
};

}  // namespace deepinfer
