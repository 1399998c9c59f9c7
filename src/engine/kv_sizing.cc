#include "engine/kv_sizing.h"

#include <algorithm>
#include <string>

#include "base/host_buffer.h"

namespace deepinfer {

StatusOr<int> KvPoolBlocks(const EngineOptions& opt, size_t bytes_per_token, int max_len, dist::Communicator* control) {
  int blocks = opt.num_kv_blocks;
  if (blocks <= 0) {
    size_t bytes = opt.kv_cache_bytes;
    if (bytes == 0) {
      bytes = static_cast<size_t>(static_cast<double>(AvailableMemoryBytes()) * opt.kv_cache_fraction);
      // No point holding more than every slot at full length needs.
      const size_t most = bytes_per_token * opt.max_num_seqs * (static_cast<size_t>(max_len) + opt.block_size);
      if (bytes == 0 || bytes > most) bytes = most;
    }
    blocks = static_cast<int>(std::min<size_t>(bytes / (bytes_per_token * opt.block_size), 1u << 30));
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
