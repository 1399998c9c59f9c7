#include "engine/kv_sizing.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "base/host_buffer.h"

namespace deepinfer {

uint64_t HostId() {
  // The kernel's boot id: the same for every process on one machine, containers included (they share its RAM),
  // different across machines. The host name where it cannot be read.
  std::string id;
  if (std::FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char buf[64] = {};
    if (std::fgets(buf, sizeof buf, f)) id = buf;
    std::fclose(f);
  }
  if (id.empty()) {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    id = host;
  }
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : id) h = (h ^ c) * 1099511628211ull;
  return h;
}

StatusOr<int> KvPoolBlocks(const EngineOptions& opt, size_t block_bytes, size_t most, dist::Communicator* control) {
  // Ranks sharing this machine's RAM (this one included): a fraction of the available memory is split between
  // them, or each would take it all for itself (four --dp ranks at the default 0.25 would claim everything).
  int local_ranks = 1;
  if (control && control->size() > 1) {
    const uint64_t mine = HostId();
    std::vector<uint64_t> ids(static_cast<size_t>(control->size()));
    DI_RETURN_IF_ERROR(control->AllGather(&mine, sizeof mine, ids.data()));
    local_ranks = static_cast<int>(std::count(ids.begin(), ids.end(), mine));
  }
  int blocks = opt.num_kv_blocks;
  if (blocks <= 0) {
    size_t bytes = opt.kv_cache_bytes;
    if (bytes == 0) {
      bytes = static_cast<size_t>(static_cast<double>(AvailableMemoryBytes()) * opt.kv_cache_fraction / local_ranks);
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
