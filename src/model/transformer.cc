#include "model/transformer.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "base/logging.h"
#include "model/arch/arch.h"
#include "model/shard.h"

namespace deepinfer {

Transformer::Transformer(const Model& model, int max_batch_tokens, const dist::DistContext* dist)
    : model_(model), c_(model.config), lc_(RankConfig(model)), max_tokens_(max_batch_tokens),
      forward_(GetArch(model.config.arch).forward ? GetArch(model.config.arch).forward : LlamaForward),
      mtp_forward_(GetArch(model.config.arch).mtp_forward ? GetArch(model.config.arch).mtp_forward : DeepseekMtpForward),
      pass_(model, lc_, max_batch_tokens, dist) {}

Status Transformer::Forward(const int32_t* tokens, int n, int start, SequenceKvCache& kv, float* logits, bool all_logits,
                            float* hidden) {
  if (n <= 0) return InvalidArgument("forward: no tokens");
  if (start < 0 || start + n > kv.capacity())
    return OutOfRange("forward: positions [" + std::to_string(start) + ", " + std::to_string(start + n) +
                      ") exceed the KV cache capacity " + std::to_string(kv.capacity()));
  const int nb = static_cast<int>(kv.block_table().size());
  if (all_logits) {
    // One run per chunk with a logit row per token (row-wise invariance: the same rows as a decode would give).
    for (int done = 0; done < n; done += max_tokens_) {
      const int len = std::min(max_tokens_, n - done);
      SeqForward s{tokens + done, len, start + done, kv.block_table().data(), nb, true, true};
      DI_RETURN_IF_ERROR(ForwardBatch(&s, 1, kv.paged(), logits + static_cast<size_t>(done) * c_.vocab_size,
                                      hidden ? hidden + static_cast<size_t>(done) * c_.mtp_hidden() : nullptr));
    }
    return Status::Ok();
  }
  for (int done = 0; done < n; done += max_tokens_) {
    const int len = std::min(max_tokens_, n - done);
    SeqForward s{tokens + done, len, start + done, kv.block_table().data(), nb, done + len == n};
    DI_RETURN_IF_ERROR(ForwardBatch(&s, 1, kv.paged(), logits, hidden ? hidden + static_cast<size_t>(done) * c_.mtp_hidden() : nullptr));
  }
  return Status::Ok();
}

Status Transformer::ForwardBatch(const SeqForward* seqs, int num_seqs, PagedKvCache& kv, float* logits, float* hidden) {
  int total = 0;
  DI_RETURN_IF_ERROR(pass_.Plan(seqs, num_seqs, kv, &total));
  DI_RETURN_IF_ERROR(forward_(pass_, kv));
  if (hidden) DI_RETURN_IF_ERROR(pass_.FinalHidden(total, hidden));
  if (pass_.has_logits()) DI_RETURN_IF_ERROR(pass_.Logits(model_.out_norm, model_.lm_head, logits));
  return Status::Ok();
}

KvLayout Transformer::MtpKvLayout() const {
  KvLayout layout = lc_.kv_layout();
  layout.num_layers = std::max(1, c_.n_mtp);
  layout.layer_ratio.clear();  // MTP layers keep a row per position (window-only)
  layout.layer_elems.clear();
  return layout;
}

Status Transformer::ForwardMtp(int k, const SeqForward* seqs, int num_seqs, const float* hidden, PagedKvCache& mtp_kv,
                               float* logits, float* out_hidden) {
  if (k < 0 || k >= static_cast<int>(model_.mtp.size()))
    return InvalidArgument("forward: the model has no MTP module " + std::to_string(k));
  if (out_hidden && pass_.context_parallel())
    return InvalidArgument("forward: MTP output hidden states are not gathered under context parallelism");
  int total = 0;
  DI_RETURN_IF_ERROR(pass_.Plan(seqs, num_seqs, mtp_kv, &total));
  const MtpWeights& P = model_.mtp[k];
  DI_RETURN_IF_ERROR(mtp_forward_(pass_, P, k, hidden, mtp_kv, out_hidden));
  if (pass_.has_logits()) DI_RETURN_IF_ERROR(pass_.Logits(P.head_norm, P.head, logits));
  return Status::Ok();
}

Status Transformer::BenchAttention(int l, const SeqForward* seqs, int num_seqs, PagedKvCache& kv) {
  if (l < 0 || l >= c_.n_layers) return InvalidArgument("bench: no layer " + std::to_string(l));
  int total = 0;
  DI_RETURN_IF_ERROR(pass_.Plan(seqs, num_seqs, kv, &total));
  DI_RETURN_IF_ERROR(pass_.Embed(model_.tok_embd));
  const LayerWeights& L = model_.layers[l];
  pass_.Norm(L.attn_norm, pass_.all());
  DI_RETURN_IF_ERROR(pass_.Attention(L, l, kv, pass_.all()));
  pass_.AddResidual(pass_.all());
  return Status::Ok();
}

StatusOr<int> Transformer::BenchMoe(int l, const float* xn, int n) {
  if (l < 0 || l >= c_.n_layers || !model_.layers[l].is_moe()) return InvalidArgument("bench: layer " + std::to_string(l) + " is not a MoE layer");
  if (n <= 0 || n > max_tokens_) return OutOfRange("bench: batch outside [1, max_batch_tokens]");
  DI_RETURN_IF_ERROR(pass_.moe()->Forward(model_.layers[l], l, xn, n, pass_.y()));
  return pass_.moe()->DistinctExperts(n);
}

StatusOr<Transformer::EplbReport> Transformer::RebalanceExperts() {
  if (!expert_parallel()) return EplbReport{};
  return pass_.moe()->Rebalance();
}

bool Transformer::expert_parallel() const { return pass_.moe() && pass_.moe()->expert_parallel(); }

}  // namespace deepinfer
