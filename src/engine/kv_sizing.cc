#include "engine/kv_sizing.h"

#include <algorithm>
#include <string>

#include "base/host_buffer.h"

namespace deepinfer {

StatusOr<int> KvPoolBlocks(const EngineOptions& opt, size_t block_bytes, size_t most, dist::Communicator* control) {
  int blocks = opt.num_kv_blocks;
  if (blocks <= 0) {
    size_t bytes = opt.kv_cache_bytes;
    if (bytes == 0) {
      bytes = static_cast<size_t>(static_cast<double>(AvailableMemoryBytes()) * opt.kv_cache_fraction);
      if (bytes == 0 || bytes > most) bytes = most;
    }
    blocks = static_cast<int>(std::min<size_t>(bytes / block_bytes, 1u << 30));
    if (blocks < 1)
      return InvalidArgument("the KV cache budget (" + std::to_string(bytes) + " bytes) holds no block of " +
                             std::to_string(opt.block_size) + " tokens");
  }
  if (control) {
    int64_t neg = -static_cast<int64_t>(blocks);
    DI_RETURN_IF_ERROR(control->AllReduceMax(&neg, 1));
    blocks = static_cast<int>(-neg);
  }
  return blocks;
}

}  // namespace deepinfer
