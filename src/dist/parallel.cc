#include "dist/parallel.h"


namespace deepinfer::dist {

std::string ParallelConfig::Describe() const {
  return "rank " + std::to_string(rank) + "/" + std::to_string(world) + ": dp " + std::to_string(dp_rank()) + "/" +
         std::to_string(dp) + ", cp " + std::to_string(cp_rank()) + "/" + std::to_string(cp) + ", tp " +
         std::to_string(tp_rank()) + "/" + std::to_string(tp) + ", ep " + std::to_string(ep_rank()) + "/" +
         std::to_string(ep);
}

StatusOr<ParallelConfig> ResolveParallel(int world, int rank, int dp, int tp, int cp, int ep) {
  // (redundant_experts and eplb_interval are set by the caller: they only need the model check.)
  const std::string n = std::to_string(world);
  for (auto [flag, v] : {std::pair{"--dp", dp}, {"--tp", tp}, {"--cp", cp}, {"--ep", ep}})
    if (v < 0) return InvalidArgument(std::string(flag) + " must be >= 1");
  ParallelConfig pc;
  pc.world = world;
  pc.rank = rank;
  pc.dp = dp > 0 ? dp : 1;
  pc.cp = cp > 0 ? cp : 1;
  if (tp > 0) {
    pc.tp = tp;
  } else {
    if (world % (pc.dp * pc.cp) != 0)
      return InvalidArgument("--dp " + std::to_string(pc.dp) + " x --cp " + std::to_string(pc.cp) +
                             " does not divide the job's " + n + " ranks");
    pc.tp = world / (pc.dp * pc.cp);
  }
  if (pc.dp * pc.cp * pc.tp != world)
    return InvalidArgument("--dp " + std::to_string(pc.dp) + " x --cp " + std::to_string(pc.cp) + " x --tp " +
                           std::to_string(pc.tp) + " = " + std::to_string(pc.dp * pc.cp * pc.tp) +
                           " attention ranks, but the job has " + n + " (the product must equal mpirun -np)");
  // Left out: every expert tensor-split when the job is one tensor-parallel group, else whole experts spread
  // over every rank (the two expert layouts the MoE layer implements).
  pc.ep = ep > 0 ? ep : (pc.tp == world ? 1 : world);
  if (pc.ep > world || world % pc.ep != 0)
    return InvalidArgument("--ep " + std::to_string(pc.ep) + " must divide the job's " + n + " ranks");
  return pc;
}

StatusOr<std::unique_ptr<DistContext>> MakeDistContext(Communicator& world, const ParallelConfig& pc) {
  auto d = std::make_unique<DistContext>();
  d->pc = pc;
  DI_ASSIGN_OR_RETURN(d->control, world.Split(0, pc.rank, "control"));
  DI_ASSIGN_OR_RETURN(d->moe, world.Split(0, pc.rank, "moe"));
  DI_ASSIGN_OR_RETURN(d->tp, world.Split(pc.dp_rank() * pc.cp + pc.cp_rank(), pc.tp_rank(), "tp"));
  DI_ASSIGN_OR_RETURN(d->cp, world.Split(pc.dp_rank() * pc.tp + pc.tp_rank(), pc.cp_rank(), "cp"));
  if (pc.two_batch_overlap) d->moe_stream = std::make_unique<CommStream>("moe");
  return d;
}

void DistContext::FailJob(const std::string& why) const {
  if (fail_job) fail_job(why);
  AbortJob(why);  // no policy installed, or one that returned: the job still cannot go on
}

}  // namespace deepinfer::dist

namespace deepinfer::dist {
namespace {
std::unique_ptr<DistContext> g_context;
}
void SetContext(std::unique_ptr<DistContext> ctx) { g_context = std::move(ctx); }
DistContext* Context() { return g_context.get(); }
void ResetContext() { g_context.reset(); }
}  // namespace deepinfer::dist
