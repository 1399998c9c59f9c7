// Sharding a loaded model over the ranks of a job (dist/parallel.h has the layout). Weights stay views into
// the mmapped files wherever the shard is contiguous rows, so a rank only ever reads (and, with the copy
// placement, copies) its own part. The row-parallel matrices (o_proj, down: a rank needs some input columns of
// every row) are the exception: their slices are copied into memory the model owns.
//
// Tensor parallelism (tp > 1), per attention group of T ranks, rank r:
//   GQA       q rows of heads [r H/T, (r+1) H/T) (biases likewise); k/v rows of KV heads split the same way when
//             T divides n_kv, else the one KV head those q heads use (replicated); q/k norms whole; wo columns
//   MLA       q (or q_b) and kv_b (or v_b) rows of the rank's heads, their W_UK^T; q_a, kv_a, norms whole; wo
//             columns. The latent cache row is computed whole on every rank.
//   dense MLP gate/up rows [r F/T, (r+1) F/T), down columns
//   MoE       pure TP (ep == 1, tp == N): every routed expert and the shared expert as the dense MLP; router
//             whole. Otherwise tokens are dispatched (dist/parallel.h): the experts follow the expert-parallel
//             placement over the E groups, and with N / E = M > 1 ranks per group each routed expert is split
//             M ways by moe_tp_rank (gate/up rows, down input columns) like the dense MLP; the shared expert
//             stays whole (each rank runs it over its own rows). Only the held experts' down slices are copied,
//             unless online EPLB (--eplb-interval) may hand this group any expert: then every expert's are.
//   DSV4      q_b rows and sinks of the rank's heads, wo_a rows of its output groups (whole groups: G / T each),
//             wo_b columns of them; the K=V latent, q_a, the compressors, the indexer and the hyper-connections
//             whole (every rank computes and caches the same latent rows).
//   vocab     rows [r ceil(V/T), ...) of tok_embd and lm_head (the last rank's range is shorter when T does not
//             divide V); tied heads share the slice. MTP modules get the same treatment.
#include "model/shard.h"

#include <algorithm>
#include <cstring>

#include "base/logging.h"
#include "base/thread_pool.h"
#include "dist/eplb.h"
#include "model/arch/model_tensors.h"
#include "model/layers/linear.h"

namespace deepinfer {

namespace {

bool AnyDenseLayer(const ModelConfig& c) {
  for (int l = 0; l < c.n_layers + c.n_mtp; ++l)
    if (!c.IsMoeLayer(l)) return true;
  return false;
}

}  // namespace

int EplbGroups(int n_experts, int n_group) { return n_group > 1 && n_experts % n_group == 0 ? n_group : 1; }

Status CheckModelSplit(const dist::ParallelConfig& pc, const ModelConfig& c) {
  // DeepSeek-V4 splits its heads (whole output groups per rank) and keeps the single K=V latent, the
  // compressors, the indexer and the hyper-connections whole on every rank; its rows (--cp) are not split.
  if (c.is_dsv4() && pc.cp > 1)
    return Unimplemented("deepseek_v4 with --cp is not implemented yet (its window and compressed rows are not split "
                         "across ranks); use --tp, --dp with --ep, or one process");
  if (c.is_dsv4() && pc.tp > 1 && c.dsv4.o_groups % pc.tp != 0)
    return InvalidArgument("--tp " + std::to_string(pc.tp) + ": deepseek_v4's " + std::to_string(c.dsv4.o_groups) +
                           " output groups do not split " + std::to_string(pc.tp) + " ways (each rank holds whole groups of heads)");
  if (pc.tp > 1) {
    const std::string t = std::to_string(pc.tp);
    if (c.n_heads % pc.tp != 0)
      return InvalidArgument("--tp " + t + ": the model's " + std::to_string(c.n_heads) + " attention heads do not split " + t + " ways");
    if (!c.mla && c.n_kv_heads % pc.tp != 0 && pc.tp % c.n_kv_heads != 0)
      return InvalidArgument("--tp " + t + ": the model's " + std::to_string(c.n_kv_heads) +
                             " KV heads neither split " + t + " ways nor divide " + t + " (for replication)");
    if (AnyDenseLayer(c) && c.intermediate % pc.tp != 0)
      return InvalidArgument("--tp " + t + ": the model's MLP width " + std::to_string(c.intermediate) + " does not split " + t + " ways");
    if (c.n_experts > 0 && !pc.expert_dispatch()) {  // pure tensor parallelism splits every expert
      if (c.moe_intermediate % pc.tp != 0)
        return InvalidArgument("--tp " + t + ": the model's expert width " + std::to_string(c.moe_intermediate) +
                               " does not split " + t + " ways (expert parallelism, --ep, keeps experts whole)");
      if (c.shared_ffn % pc.tp != 0)
        return InvalidArgument("--tp " + t + ": the model's shared expert width " + std::to_string(c.shared_ffn) +
                               " does not split " + t + " ways");
    }
  }
  if (c.n_experts > 0 && pc.expert_dispatch() && pc.moe_tp() > 1 && c.moe_intermediate % pc.moe_tp() != 0)
    return InvalidArgument("--ep " + std::to_string(pc.ep) + " over " + std::to_string(pc.world) + " ranks splits each expert " +
                           std::to_string(pc.moe_tp()) + " ways, but the model's expert width " +
                           std::to_string(c.moe_intermediate) + " does not split " + std::to_string(pc.moe_tp()) + " ways");
  if (c.n_experts > 0 && pc.ep > 1 && (c.n_experts + pc.redundant_experts) % pc.ep != 0)
    return InvalidArgument("--ep " + std::to_string(pc.ep) + ": the model's " + std::to_string(c.n_experts) +
                           " routed experts" +
                           (pc.redundant_experts ? " + " + std::to_string(pc.redundant_experts) + " redundant" : std::string()) +
                           " do not split " + std::to_string(pc.ep) + " ways");
  if ((pc.redundant_experts > 0 || pc.eplb_interval > 0) && (c.n_experts == 0 || pc.ep == 1))
    return InvalidArgument("--ep-redundant-experts / --eplb-interval need a MoE model under expert parallelism (--ep > 1)");
  return Status::Ok();
}

ModelConfig RankConfig(const Model& m) {
  ModelConfig c = m.config;
  if (m.shard.expert_tp > 1) c.moe_intermediate = m.shard.moe_intermediate;
  if (!m.shard.split()) return c;
  c.n_heads = m.shard.n_heads;
  if (!c.mla && !c.is_dsv4()) c.n_kv_heads = m.shard.n_kv_heads;  // V4: the one latent, whole on every rank
  if (c.is_dsv4()) c.dsv4.o_groups /= m.shard.tp;
  c.intermediate = m.shard.intermediate;
  c.moe_intermediate = m.shard.moe_intermediate;
  c.shared_ffn = m.shard.shared_ffn;
  return c;
}

KvLayout RankKvLayout(const Model& m) { return RankConfig(m).kv_layout(); }

namespace {

// Expert parallelism: the initial placement. Without redundant slots, experts in order over the ranks; with
// them, EPLB over a uniform load (which replicates experts in index order until real loads are counted). The
// views of every expert stay (a rebalance may hand any expert to this rank), but only the held experts are ever
// read: with mmap the others are never touched, and the copy placement copies only the held ones.
Status ShardExperts(MoeWeights& w, const dist::ParallelConfig& pc, int n_experts, int n_group) {
  if (pc.redundant_experts == 0) {
    w.placement = ExpertPlacement::Contiguous(n_experts, pc.ep);
    return Status::Ok();
  }
  const std::vector<std::vector<double>> uniform(1, std::vector<double>(n_experts, 1.0));
  DI_ASSIGN_OR_RETURN(dist::EplbPlacement p, dist::RebalanceExperts(uniform, n_experts + pc.redundant_experts,
                                                                     EplbGroups(n_experts, n_group), 1, pc.ep));
  w.placement = ExpertPlacement::FromPhy2Log(std::move(p.phy2log[0]), n_experts, pc.ep);
  return Status::Ok();
}

std::vector<float> VecSlice(const std::vector<float>& v, size_t first, size_t n) {
  if (v.empty()) return v;
  return std::vector<float>(v.begin() + first, v.begin() + first + n);
}

// How errors name a row-parallel matrix.
const char* RowParallelName(TensorId id) {
  switch (id) {
    case TensorId::kAttnOut: return "attention output";
    case TensorId::kFfnDown: return "MLP down";
    case TensorId::kFfnDownShexp: return "shared expert down";
    default: return "row-parallel matrix";
  }
}

// Tensor parallelism over one attention group, by the split each tensor's declaration gives (model/arch/):
// column-parallel tensors become row views, row-parallel ones are collected (ColumnSlice) and copied out
// together at the end (Finish).
class TpSharder {
 public:
  TpSharder(Model& m, const dist::ParallelConfig& pc)
      : m_(m), c_(m.config), pc_(pc), T_(pc.tp), r_(pc.tp_rank()),
        expert_ways_(m.config.n_experts == 0 ? 1 : pc.expert_dispatch() ? pc.moe_tp() : pc.tp),
        expert_rank_(pc.expert_dispatch() ? pc.moe_tp_rank() : pc.tp_rank()),
        split_shared_(m.config.n_experts > 0 && !pc.expert_dispatch()) {}

  // Whether this rank splits anything: attention TP, or experts split inside their groups.
  bool needed() const { return T_ > 1 || expert_ways_ > 1; }

  Status Run() {
    ModelShard& s = m_.shard;
    s.expert_tp = expert_ways_;
    s.moe_intermediate = c_.moe_intermediate / expert_ways_;
    if (T_ > 1) {  // else experts only: attention, dense layers and the vocabulary stay whole
      s.tp = T_;
      s.tp_rank = r_;
      s.n_heads = c_.n_heads / T_;
      s.head0 = r_ * s.n_heads;
      if (!c_.mla) {
        if (c_.n_kv_heads % T_ == 0) {
          s.n_kv_heads = c_.n_kv_heads / T_;
          s.kv_head0 = r_ * s.n_kv_heads;
        } else {  // T = n_kv * g: ranks r with the same r / g share the KV head their q heads read
          s.n_kv_heads = 1;
          s.kv_head0 = r_ / (T_ / c_.n_kv_heads);
        }
      }
      s.intermediate = c_.intermediate / T_;
      s.shared_ffn = split_shared_ ? c_.shared_ffn / T_ : c_.shared_ffn;
      s.vocab_stride = (c_.vocab_size + T_ - 1) / T_;
      s.vocab_begin = std::min(c_.vocab_size, r_ * s.vocab_stride);
      s.vocab_rows = std::min(s.vocab_stride, c_.vocab_size - s.vocab_begin);
    }
    // Views that share a tensor (a tied head, an MTP module's borrowed embedding and head) are equal, so their
    // row slices are equal too.
    const ModelTensors t = DeclareModelTensors(c_, m_);
    DI_RETURN_IF_ERROR(Split(t.embedding, "model"));
    DI_RETURN_IF_ERROR(Split(t.head, "model"));
    for (size_t l = 0; l < t.layers.size(); ++l) DI_RETURN_IF_ERROR(Split(t.layers[l], "layer " + std::to_string(l)));
    for (size_t k = 0; k < t.mtp.size(); ++k) {
      DI_RETURN_IF_ERROR(Split(t.mtp[k].layer, "MTP module " + std::to_string(k)));
      DI_RETURN_IF_ERROR(Split(t.mtp[k].own, "MTP module " + std::to_string(k)));
    }
    return Finish();
  }

 private:
  struct Cut {
    TensorView* t;
    int64_t c0, n;
  };
  // This rank's part of a dimension split `ways` ways, in declaration units: [first, first + count).
  struct Part {
    int64_t first = 0, count = 0;
    int ways = 1;  // 1: whole
  };

  static Part Even(int64_t n, int ways, int rank) { return {rank * (n / ways), n / ways, ways}; }

  Part PartOf(TpBy by) const {
    const ModelShard& s = m_.shard;
    switch (by) {
      case TpBy::kHeads: return {s.head0, s.n_heads, T_};
      case TpBy::kOutGroups: return Even(c_.dsv4.o_groups, T_, r_);
      case TpBy::kKvHeads: return {s.kv_head0, s.n_kv_heads, T_};
      case TpBy::kFfn: return Even(c_.intermediate, T_, r_);
      // Under expert parallelism the shared expert stays whole: each rank runs it over its own rows.
      case TpBy::kSharedFfn: return split_shared_ ? Even(c_.shared_ffn, T_, r_) : Part{};
      // Pure TP: by tp_rank; dispatch: by moe_tp_rank inside the group.
      case TpBy::kExpertFfn: return Even(c_.moe_intermediate, expert_ways_, expert_rank_);
      case TpBy::kVocab: return {s.vocab_begin, s.vocab_rows, T_};
    }
    return {};
  }

  // The flag that asked for a split, for errors.
  std::string SplitFlag(TpBy by) const {
    if (by == TpBy::kExpertFfn && pc_.expert_dispatch())
      return "--ep " + std::to_string(pc_.ep) + " (experts split " + std::to_string(expert_ways_) + " ways)";
    return "--tp " + std::to_string(T_);
  }

  // Every tensor of one list to this rank's part of it.
  Status Split(const TensorList& list, const std::string& where) {
    for (const TensorDecl& d : list) {
      if (d.tp_split == TpSplit::kReplicated) continue;
      const Part p = PartOf(d.tp_by);
      if (p.ways == 1) continue;
      const int64_t first = p.first * d.tp_unit, n = p.count * d.tp_unit;
      const bool rows = d.tp_split == TpSplit::kColumn;
      if (d.tp_split == TpSplit::kRowBias) {  // added once by the all-reduce: part 0 keeps it, the others add zeros
        if (p.first != 0) std::fill(d.vector->begin(), d.vector->end(), 0.f);
      } else if (d.vector && d.form == TensorForm::kExpertVectors) {  // {E, n}: each expert's elements
        const size_t width = static_cast<size_t>(d.shape[1]), E = d.vector->size() / width;
        std::vector<float> part(E * static_cast<size_t>(n));
        for (size_t e = 0; e < E; ++e)
          std::copy_n(d.vector->begin() + static_cast<std::ptrdiff_t>(e * width + first), n, part.begin() + static_cast<std::ptrdiff_t>(e * n));
        *d.vector = std::move(part);
      } else if (d.vector) {  // biases, W_UK^T: the rank's elements
        *d.vector = VecSlice(*d.vector, static_cast<size_t>(first), static_cast<size_t>(n));
      } else if (d.experts) {
        for (size_t e = 0; e < d.experts->size(); ++e) {
          TensorView& t = (*d.experts)[e];
          if (!t.data) continue;  // an expert another group holds (ShardModel dropped it)
          if (rows) t = RowSlice(t, first, n);
          else DI_RETURN_IF_ERROR(ColumnSlice(t, first, n, where + " expert " + std::to_string(e) + " down", SplitFlag(d.tp_by)));
        }
      } else if (d.matrix->data) {  // (MLA holds one of kv_b and v_b)
        if (rows) *d.matrix = RowSlice(*d.matrix, first, n);
        else DI_RETURN_IF_ERROR(ColumnSlice(*d.matrix, first, n, where + " " + RowParallelName(d.id), SplitFlag(d.tp_by)));
      }
    }
    return Status::Ok();
  }

  // Queues input columns [c0, c0 + n) of every row of t for copying (row-parallel weights). split: the flag
  // that asked for the split, for errors.
  Status ColumnSlice(TensorView& t, int64_t c0, int64_t n, const std::string& what, const std::string& split) {
    const DTypeInfo& info = GetDTypeInfo(t.dtype);
    if (c0 % info.block_elems != 0 || n % info.block_elems != 0)
      return InvalidArgument(split + ": " + what + " (" + DTypeName(t.dtype) + " " + t.ShapeString() +
                             ") would split inside its " + std::to_string(info.block_elems) + "-element quantization blocks (" +
                             std::to_string(n) + " input columns per rank)");
    if (t.block_scale && c0 % TensorView::kFp8Block != 0)
      return Unimplemented(split + ": " + what + " (FP8 " + t.ShapeString() +
                           ") would split inside its 128-column scale blocks (" + std::to_string(n) + " input columns per rank)");
    cuts_.push_back({&t, c0, n});
    return Status::Ok();
  }

  // Copies every queued column slice into one buffer the model owns and points the views there.
  Status Finish() {
    if (cuts_.empty()) return Status::Ok();
    constexpr size_t kAlign = 64;
    std::vector<size_t> offsets;
    size_t total = 0;
    for (const Cut& k : cuts_) {
      offsets.push_back(total);
      total += (static_cast<size_t>(k.t->rows()) * DTypeBytes(k.t->dtype, k.n) + kAlign - 1) / kAlign * kAlign;
    }
    DI_ASSIGN_OR_RETURN(std::unique_ptr<HostBuffer> buf, HostBuffer::Allocate(total));
    uint8_t* base = buf->data();
    ComputePool().Run([&](int tid, int nt) {
      for (size_t i = tid; i < cuts_.size(); i += nt) {
        const TensorView& t = *cuts_[i].t;
        const size_t skip = DTypeBytes(t.dtype, cuts_[i].c0), bytes = DTypeBytes(t.dtype, cuts_[i].n);
        for (int64_t row = 0; row < t.rows(); ++row) std::memcpy(base + offsets[i] + row * bytes, t.row(row) + skip, bytes);
      }
    });
    for (size_t i = 0; i < cuts_.size(); ++i) {
      TensorView& t = *cuts_[i].t;
      const int64_t rows = t.rows(), n = cuts_[i].n;
      if (t.block_scale) {  // scales of the kept column blocks, for every block row the view spans
        const int64_t B = TensorView::kFp8Block, brows = (t.scale_row0 + rows + B - 1) / B, bc0 = cuts_[i].c0 / B,
                      bcols = (n + B - 1) / B;
        std::vector<float> sc(static_cast<size_t>(brows * bcols));
        for (int64_t br = 0; br < brows; ++br)
          for (int64_t bc = 0; bc < bcols; ++bc) sc[br * bcols + bc] = t.block_scale[br * t.scale_cols + bc0 + bc];
        m_.shard_scales.push_back(std::move(sc));
        t.block_scale = m_.shard_scales.back().data();
        t.scale_cols = bcols;
      }
      t.data = base + offsets[i];
      t.shape = {rows, n};
      t.nbytes = static_cast<size_t>(rows) * DTypeBytes(t.dtype, n);
    }
    m_.shard_buffers.push_back(std::move(buf));
    return Status::Ok();
  }

  Model& m_;
  const ModelConfig& c_;
  const dist::ParallelConfig& pc_;
  const int T_, r_, expert_ways_, expert_rank_;
  const bool split_shared_;  // pure tensor parallelism over a MoE model: the shared expert splits as the dense MLP
  std::vector<Cut> cuts_;
};

}  // namespace

Status ShardModel(Model& m, const dist::ParallelConfig& pc) {
  DI_RETURN_IF_ERROR(CheckModelSplit(pc, m.config));
  m.parallel = pc;
  if (pc.expert_dispatch() && m.config.n_experts > 0) {
    std::vector<MoeWeights*> moes;
    for (auto& L : m.layers)
      if (L.is_moe()) moes.push_back(&L.moe);
    for (auto& P : m.mtp)
      if (P.layer.is_moe()) moes.push_back(&P.layer.moe);
    for (MoeWeights* w : moes) {
      DI_RETURN_IF_ERROR(ShardExperts(*w, pc, m.config.n_experts, m.config.n_group));
      // A rank keeps only the experts its group holds: the others are never read here, and an expert handed over
      // by online EPLB arrives from the rank that held it (Transformer::RebalanceExperts), not from this file.
      for (size_t e = 0; e < w->gate.size(); ++e) {
        if (pc.eplb_interval > 0 && w->gate[e].block_scale)
          return InvalidArgument("--eplb-interval: moving FP8 block-scaled experts between ranks is not implemented "
                                 "(convert the model to bf16, or run without online EPLB)");
        if (w->placement.Holds(static_cast<int>(e), pc.ep_rank())) continue;
        w->gate[e] = w->up[e] = w->down[e] = TensorView{};
      }
    }
  }
  TpSharder sharder(m, pc);
  if (sharder.needed()) DI_RETURN_IF_ERROR(sharder.Run());
  return Status::Ok();
}

}  // namespace deepinfer
