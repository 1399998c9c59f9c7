// deepinfer/parallel.h over src/dist: the process's world communicator and its distributed context, which
// Model::Load (each rank's shard) and Engine::Create (the communicators) read at the top level.
#include "deepinfer/parallel.h"

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "base/logging.h"
#include "dist/communicator.h"
#include "dist/parallel.h"
#include "routing/routing_policy.h"

namespace deepinfer::api {

void InitProcess(int* argc, char*** argv) { dist::InitWorld(argc, argv); }

void FinalizeProcess() {
  dist::ResetContext();
  dist::FinalizeWorld();
}

int WorldRank() { return dist::World().rank(); }
int WorldSize() { return dist::World().size(); }

Status SetupParallel(const ParallelOptions& options) {
  dist::Communicator& world = dist::World();
  DI_ASSIGN_OR_RETURN(dist::ParallelConfig pc,
                      dist::ResolveParallel(world.size(), world.rank(), options.dp, options.tp, options.cp, options.ep));
  pc.redundant_experts = options.redundant_experts;
  pc.eplb_interval = options.eplb_interval;
  if (!options.dp_policy.empty()) {
    pc.dp_policy = options.dp_policy;
    // The same names and check as `deepinfer route --policy` (one implementation, two transports).
    if (!router::MakePolicy(pc.dp_policy, 1).ok())
      return InvalidArgument("--dp-policy must be cache_aware, least_load or round_robin, not '" + pc.dp_policy + "'");
    if (pc.dp_policy == "cache_aware" && !options.prefix_caching)
      return InvalidArgument("--dp-policy cache_aware routes by the groups' prefix caches, which --no-prefix-cache "
                             "turns off: use --dp-policy least_load");
  } else if (!options.prefix_caching) {
    // No prefix cache, no KV events: cache_aware would route every prompt as a miss, by predicted footprint
    // rather than by load.
    pc.dp_policy = "least_load";
  }
  if (pc.redundant_experts < 0) return InvalidArgument("--ep-redundant-experts must be >= 0");
  if (pc.eplb_interval < 0) return InvalidArgument("--eplb-interval must be >= 0");
  if (!options.cp_split.empty()) {
    if (options.cp_split != "balanced" && options.cp_split != "contiguous")
      return InvalidArgument("--cp-split must be balanced or contiguous, not '" + options.cp_split + "'");
    pc.cp_contiguous = options.cp_split == "contiguous";
  }
  if (options.two_batch_overlap) {
    if (pc.single())
      return InvalidArgument("--enable-two-batch-overlap needs a multi-process expert-parallel job (mpirun -np N, N > 1)");
    if (!pc.expert_dispatch())
      return InvalidArgument("--enable-two-batch-overlap needs expert parallelism (--ep > 1): with --tp " +
                             std::to_string(pc.tp) + " = N the MoE layers have no dispatch or combine to overlap");
    if (pc.cp > 1) return InvalidArgument("--enable-two-batch-overlap does not combine with --cp > 1");
    pc.two_batch_overlap = true;
  }
  dist::Options o;
  o.timeout_seconds = options.timeout_seconds;
  if (!(o.timeout_seconds > 0)) return InvalidArgument("--dist-timeout must be > 0 seconds");
  dist::SetOptions(o);
  if (pc.single()) return Status::Ok();
  DI_ASSIGN_OR_RETURN(auto ctx, dist::MakeDistContext(world, pc));
  DI_LOG_INFO("parallel: %s", pc.Describe().c_str());
  dist::SetContext(std::move(ctx));
  return Status::Ok();
}

Status CheckSameModelEverywhere(const std::string& model) {
  dist::DistContext* d = dist::Context();
  if (!d) return Status::Ok();
  // A fingerprint of what the rank loaded: the file's size and its first 64 KiB (GGUF header and metadata, or
  // an HF directory's config.json), hashed.
  std::string probe = model;
  std::error_code ec;
  if (std::filesystem::is_directory(model, ec)) probe = (std::filesystem::path(model) / "config.json").string();
  uint64_t fp[2] = {0, 1469598103934665603ull};
  if (FILE* f = std::fopen(probe.c_str(), "rb")) {
    std::fseek(f, 0, SEEK_END);
    fp[0] = static_cast<uint64_t>(std::ftell(f));
    std::fseek(f, 0, SEEK_SET);
    std::vector<unsigned char> buf(65536);
    const size_t n = std::fread(buf.data(), 1, buf.size(), f);
    std::fclose(f);
    for (size_t i = 0; i < n; ++i) fp[1] = (fp[1] ^ buf[i]) * 1099511628211ull;
  }
  std::vector<uint64_t> all(2 * d->pc.world);
  DI_RETURN_IF_ERROR(d->control->AllGather(fp, sizeof(fp), all.data()));
  for (int r = 1; r < d->pc.world; ++r)
    if (all[2 * r] != all[0] || all[2 * r + 1] != all[1])
      return InvalidArgument("rank " + std::to_string(r) + " loaded a different model file than rank 0 (size " +
                             std::to_string(all[2 * r]) + " vs " + std::to_string(all[0]) +
                             " bytes, or different metadata): every rank must load the same model");
  return Status::Ok();
}

}  // namespace deepinfer::api
