#include "kv/sequence_kv_cache.h"

#include <algorithm>
#include <cstdlib>

#include "base/logging.h"

namespace deepinfer {

SequenceKvCache::SequenceKvCache(const KvLayout& layout, int capacity, DType dtype) : capacity_(capacity) {
  constexpr int kBlock = 16;
  const int blocks = std::max(1, (capacity + kBlock - 1) / kBlock);
  auto kv = PagedKvCache::Create(layout, blocks, kBlock, dtype);
  if (!kv.ok()) {  // only an allocation failure can get here (the arguments are valid by construction)
    DI_LOG_ERROR("KV cache: %s", kv.status().ToString().c_str());
    std::abort();
  }
  paged_ = std::move(*kv);
  for (int b = 0; b < blocks; ++b) table_.push_back(b);
}

}  // namespace deepinfer
