// How many KV blocks an engine's pool gets: --num-kv-blocks when given, else the --kv-cache budget in bytes
// (or --kv-cache-fraction of the available memory, capped by what max_num_seqs sequences at full length hold),
// divided by the bytes one block takes in every cache that shares the block tables (the model's, a draft
// model's, the MTP modules'). Under mpirun the fraction of available memory is split between the ranks on one
// machine (same kernel boot id), and every rank takes the smallest count of the job (control: the control
// communicator), since a group's tensor-parallel ranks must schedule identically and rank 0 validates every
// request against its own pool.
#pragma once
#include <cstddef>
#include <cstdint>

#include "deepinfer/status.h"
#include "dist/communicator.h"
#include "engine/engine_options.h"

namespace deepinfer {

// block_bytes: one block in every cache that shares the block tables; most_bytes: what max_num_seqs sequences at
// full length can hold at once (the cap on a budget taken from --kv-cache-fraction).
// This machine's identity for KvPoolBlocks (a hash of the kernel's boot id).
uint64_t HostId();

StatusOr<int> KvPoolBlocks(const EngineOptions& opt, size_t block_bytes, size_t most_bytes, dist::Communicator* control);

}  // namespace deepinfer
