// Sharding a loaded model over the ranks of a job (dist/parallel.h has the layout). Weights stay views into
// the mmapped files wherever the shard is contiguous rows, so a rank only ever reads (and, with the copy
// placement, copies) its own part.
#include "model/shard.h"

#include "base/logging.h"

namespace deepinfer {

Status CheckModelSplit(const dist::ParallelConfig& pc, const ModelConfig& c) {
  if (pc.tp > 1) {
    const std::string t = std::to_string(pc.tp);
    if (c.n_heads % pc.tp != 0)
      return InvalidArgument("--tp " + t + ": the model's " + std::to_string(c.n_heads) + " attention heads do not split " + t + " ways");
    if (!c.mla && c.n_kv_heads % pc.tp != 0 && pc.tp % c.n_kv_heads != 0)
      return InvalidArgument("--tp " + t + ": the model's " + std::to_string(c.n_kv_heads) +
                             " KV heads neither split " + t + " ways nor divide " + t + " (for replication)");
  }
  if (c.n_experts > 0 && pc.ep > 1 && c.n_experts % pc.ep != 0)
    return InvalidArgument("--ep " + std::to_string(pc.ep) + ": the model's " + std::to_string(c.n_experts) +
                           " routed experts do not split " + std::to_string(pc.ep) + " ways");
  return Status::Ok();
}

namespace {

// Expert parallelism: keep the experts of this rank's slots, drop the views of the others (never touched, so
// never read from the file).
void ShardExperts(MoeWeights& w, const dist::ParallelConfig& pc, int n_experts) {
  w.placement = ExpertPlacement::Contiguous(n_experts, pc.ep);
  std::vector<bool> keep(n_experts, false);
  const int r = pc.ep_rank();
  for (int p = r * w.placement.per_rank; p < (r + 1) * w.placement.per_rank; ++p) keep[w.placement.phy2log[p]] = true;
  for (int e = 0; e < n_experts; ++e)
    if (!keep[e]) w.gate[e] = w.up[e] = w.down[e] = TensorView{};
}

}  // namespace

Status ShardModel(Model& m, const dist::ParallelConfig& pc) {
  DI_RETURN_IF_ERROR(CheckModelSplit(pc, m.config));
  m.parallel = pc;
  if (pc.ep > 1) {
    for (auto& L : m.layers)
      if (L.is_moe()) ShardExperts(L.moe, pc, m.config.n_experts);
    for (auto& P : m.mtp)
      if (P.layer.is_moe()) ShardExperts(P.layer.moe, pc, m.config.n_experts);
  }
  return Status::Ok();
}

}  // namespace deepinfer
