// Which part of a model one rank of a multi-process job holds (dist/parallel.h describes the rank layout).
#pragma once
#include "deepinfer/status.h"
#include "dist/parallel.h"
#include "model/config.h"
#include "model/model.h"

namespace deepinfer {

// Whether the model can be split as asked (heads, KV heads, experts): checked from the config alone, before any
// weight is read; the errors name the flag and the model's count.
Status CheckModelSplit(const dist::ParallelConfig& pc, const ModelConfig& c);

// The expert groups EPLB keeps together (DeepSeek's routing groups when they divide the experts, else 1).
int EplbGroups(int n_experts, int n_group);

}  // namespace deepinfer
