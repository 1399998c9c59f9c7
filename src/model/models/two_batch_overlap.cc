// Two-batch overlap (SGLang's name and flag; DeepSeek's "dual micro-batch overlap", the design notes outside this repository, ../shared/research/moe_parallel.md section 4):
// under expert parallelism a MoE layer spends part of its time in two exchanges (dispatch, combine) in which a
// rank only waits for the network. Splitting each forward's batch into two micro-batches A and B lets one's
// exchange run on the communication stream (dist/comm_stream.h) while the other computes:
//
//   layer l:  attn(A) begin(A) >dispatch(A)   [end(B) of layer l-1]   attn(B) begin(B) >dispatch(B)
//             experts(A) >combine(A)   experts(B) >combine(B)   end(A)
//
// (">" marks a submission to the stream; each wait sits as late as the data allows). dispatch(A) overlaps attn(B),
// dispatch(B) and combine(A) overlap the experts, and combine(B) overlaps the next layer's attn(A).
//
// Results are bitwise those of one forward over the whole batch: every operation is row-wise or per sequence
// (the engine's batch-invariance contract), a sequence cut by the split is two consecutive chunks of itself (B's
// rows attend to A's K/V, written earlier in the same layer, as chunked prefill does), and the MoE layer picks
// routing ranks and replicas by a row's index in the whole batch. Every rank submits the same exchanges in the
// same order whatever its row count (an empty micro-batch still exchanges), which is what keeps the collectives
// on the stream matched.
#include "model/forward_pass.h"
#include "model/models/forwards.h"

namespace deepinfer {

Status RunLayersOverlapped(ForwardPass& f, const OverlapStages& stages) {
  f.SplitMicroBatches();
  const Rows a = f.micro(0), b = f.micro(1);
  bool b_pending = false;  // B's MoE output of the previous layer is still on its way back
  for (int l = 0; l < f.config().n_layers; ++l) {
    const LayerWeights& L = f.model().layers[static_cast<size_t>(l)];
    if (!L.is_moe() || L.moe.placement.empty()) {
      // A dense layer has no exchange to hide: the whole batch at once, as without overlap.
      if (b_pending) DI_RETURN_IF_ERROR(stages.finish(1, b));
      b_pending = false;
      DI_RETURN_IF_ERROR(stages.whole_layer(L, l));
      continue;
    }
    DI_RETURN_IF_ERROR(stages.attention_and_dispatch(L, l, 0, a));
    if (b_pending) DI_RETURN_IF_ERROR(stages.finish(1, b));
    DI_RETURN_IF_ERROR(stages.attention_and_dispatch(L, l, 1, b));
    DI_RETURN_IF_ERROR(f.MoeExperts(0));
    DI_RETURN_IF_ERROR(f.MoeExperts(1));
    DI_RETURN_IF_ERROR(stages.finish(0, a));
    b_pending = true;
  }
  if (b_pending) DI_RETURN_IF_ERROR(stages.finish(1, b));
  return Status::Ok();
}

Status PreNormLayersOverlapped(ForwardPass& f, PagedKvCache& kv) {
  OverlapStages stages;
  stages.attention_and_dispatch = [&](const LayerWeights& L, int l, int i, Rows r) -> Status {
    f.Norm(L.attn_norm, r);
    DI_RETURN_IF_ERROR(f.Attention(L, l, kv, r));
    f.AddResidual(r);
    f.Norm(L.ffn_norm, r);
    f.MoeBegin(l, i);
    return Status::Ok();
  };
  stages.finish = [&](int i, Rows r) -> Status {
    DI_RETURN_IF_ERROR(f.MoeEnd(i));
    f.AddResidual(r);
    return Status::Ok();
  };
  stages.whole_layer = [&](const LayerWeights& L, int l) { return PreNormLayer(f, L, l, kv, l); };
  return RunLayersOverlapped(f, stages);
}

}  // namespace deepinfer
