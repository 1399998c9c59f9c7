// The shared tensor declarations (model/arch/blocks.h). make-tiny's spreads scale weights by 1/sqrt(fan_in)
// (activations stay O(1), logits spread over several nats), each written exactly as make-tiny has always
// computed it (most in double, the experts' in float): its files must not change.
#include "model/arch/blocks.h"

#include <cmath>

#include "model/arch/arch.h"
#include "model/arch/model_tensors.h"
#include "model/arch/tensor_list.h"
#include "model/model.h"

namespace deepinfer {

void EmbeddingTensors(const ModelConfig& c, Model& m, TensorList& t) {
  t.Matrix(TensorId::kTokEmbd, c.vocab_size, c.hidden, &m.tok_embd, 1.0f).ColumnParallel(TpBy::kVocab);
}

void HeadTensors(const ModelConfig& c, Model& m, TensorList& t) {
  const int64_t h = c.hidden;
  if (c.is_dsv4()) Dsv4HeadTensors(c, m, t);
  t.Norm(TensorId::kOutputNorm, h, &m.out_norm);
  TensorDecl& head = t.Matrix(TensorId::kOutput, c.vocab_size, h, &m.lm_head, 3.f / std::sqrt(h)).ColumnParallel(TpBy::kVocab);
  // Tied, the head is the embedding (a checkpoint's own output.weight is then ignored, as llama.cpp does).
  if (c.tie_embeddings) head.NotStored(&m.tok_embd);
  else head.Optional(&m.tok_embd);
}

void GqaTensors(const ModelConfig& c, GqaWeights& w, TensorList& t) {
  const int64_t h = c.hidden, hd = c.head_dim, qd = int64_t{c.n_heads} * hd, kvd = int64_t{c.n_kv_heads} * hd;
  const bool pairs = GetArch(c.arch).gguf_permutes_qk();
  t.Matrix(TensorId::kAttnQ, qd, h, &w.wq, 1.f / std::sqrt(h) * 2).ColumnParallel(TpBy::kHeads, hd).PermuteHeads(pairs ? c.n_heads : 0);
  t.Matrix(TensorId::kAttnK, kvd, h, &w.wk, 1.f / std::sqrt(h) * 2).ColumnParallel(TpBy::kKvHeads, hd).PermuteHeads(pairs ? c.n_kv_heads : 0);
  t.Matrix(TensorId::kAttnV, kvd, h, &w.wv, 1.f / std::sqrt(h)).ColumnParallel(TpBy::kKvHeads, hd);
  // q/k/v biases: required when the configuration has them; otherwise a checkpoint's own are still read.
  auto bias = [&](TensorId id, int64_t n, std::vector<float>* dst, TpBy by, bool follows_q) {
    TensorDecl& d = t.Vector(id, n, dst, 0.1f, 0.f).ColumnParallel(by, hd);
    if (!c.attn_bias) d.IfPresent(follows_q);
  };
  bias(TensorId::kAttnQBias, qd, &w.bq, TpBy::kHeads, false);
  bias(TensorId::kAttnKBias, kvd, &w.bk, TpBy::kKvHeads, true);
  bias(TensorId::kAttnVBias, kvd, &w.bv, TpBy::kKvHeads, true);
  if (c.qk_norm == QkNorm::kPerHead) {  // one head's weights, shared by every head: whole on every rank
    t.Norm(TensorId::kAttnQNorm, hd, &w.q_norm);
    t.Norm(TensorId::kAttnKNorm, hd, &w.k_norm);
  } else if (c.qk_norm == QkNorm::kWhole) {  // one weight per projection row: split with the heads
    t.Norm(TensorId::kAttnQNorm, qd, &w.q_norm).ColumnParallel(TpBy::kHeads, hd);
    t.Norm(TensorId::kAttnKNorm, kvd, &w.k_norm).ColumnParallel(TpBy::kKvHeads, hd);
  }
  t.Matrix(TensorId::kAttnOut, h, qd, &w.wo, 1.f / std::sqrt(qd)).RowParallel(TpBy::kHeads, hd);
  // gpt-oss: the output projection's bias (added once, after a row-parallel sum) and one sink logit per query
  // head, drawn around 1 with a wide spread so a tiny model's sinks take a real share of the softmax.
  if (c.attn_out_bias) t.Vector(TensorId::kAttnOutBias, h, &w.bo, 0.1f, 0.f).RowParallelBias(TpBy::kHeads);
  if (c.attn_sinks) t.Vector(TensorId::kAttnSinks, c.n_heads, &w.sinks, 1.f, 1.f).ColumnParallel(TpBy::kHeads, 1);
}

void MlaTensors(const ModelConfig& c, MlaWeights& w, TensorList& t) {
  const int64_t h = c.hidden, H = c.n_heads, nope = c.qk_nope_dim, qk = nope + c.qk_rope_dim, vd = c.v_head_dim,
                kvl = c.kv_lora_rank;
  if (c.q_lora_rank > 0) {
    t.Matrix(TensorId::kAttnQA, c.q_lora_rank, h, &w.wq_a, 1.f / std::sqrt(h));
    t.Norm(TensorId::kAttnQANorm, c.q_lora_rank, &w.q_a_norm);
    t.Matrix(TensorId::kAttnQB, H * qk, c.q_lora_rank, &w.wq_b, 2.f / std::sqrt(c.q_lora_rank)).ColumnParallel(TpBy::kHeads, qk);
  } else {
    t.Matrix(TensorId::kAttnQ, H * qk, h, &w.wq, 2.f / std::sqrt(h)).ColumnParallel(TpBy::kHeads, qk);
  }
  // The latent (and the shared rope key) is computed whole on every rank.
  t.Matrix(TensorId::kAttnKvA, kvl + c.qk_rope_dim, h, &w.wkv_a, 2.f / std::sqrt(h));
  t.Norm(TensorId::kAttnKvANorm, kvl, &w.kv_a_norm);
  t.Other(TensorId::kAttnKvB, TensorForm::kMlaKvB, {H * (nope + vd), kvl}, &w.wkv_b, nullptr, 1.f / std::sqrt(c.kv_lora_rank))
      .ColumnParallel(TpBy::kHeads, nope + vd);
  t.Other(TensorId::kAttnKB, TensorForm::kMlaKB, {H, kvl, nope}, nullptr, &w.uk_t, 0.f).ColumnParallel(TpBy::kHeads, kvl * nope);
  t.Other(TensorId::kAttnVB, TensorForm::kMlaVB, {H, vd, kvl}, &w.wv_b, nullptr, 0.f).ColumnParallel(TpBy::kHeads, vd);
  t.Matrix(TensorId::kAttnOut, h, H * vd, &w.wo, 1.f / std::sqrt(H * vd)).RowParallel(TpBy::kHeads, vd);
}

namespace {

// A SwiGLU of width ff (the dense MLP, the shared experts): gate and up column-parallel, down row-parallel.
void SwiGluTensors(const ModelConfig& c, const TensorId (&ids)[3], int64_t ff, DenseMlpWeights& w, TpBy by, TensorList& t) {
  const int64_t h = c.hidden;
  t.Matrix(ids[0], ff, h, &w.gate, 1.f / std::sqrt(h)).ColumnParallel(by);
  t.Matrix(ids[1], ff, h, &w.up, 1.f / std::sqrt(h)).ColumnParallel(by);
  t.Matrix(ids[2], h, ff, &w.down, 1.f / std::sqrt(ff)).RowParallel(by);
}

// attn_norm, the attention, ffn_norm, the MLP: every family's decoder layer.
template <class Attention>
void DecoderLayerTensors(const ModelConfig& c, int layer, LayerWeights& w, TensorList& t, Attention attention) {
  t.Norm(TensorId::kAttnNorm, c.hidden, &w.attn_norm);
  attention();
  t.Norm(TensorId::kFfnNorm, c.hidden, &w.ffn_norm);
  FfnTensors(c, layer, w, t);
}

}  // namespace

void FfnTensors(const ModelConfig& c, int layer, LayerWeights& w, TensorList& t) {
  if (!c.IsMoeLayer(layer))
    return SwiGluTensors(c, {TensorId::kFfnGate, TensorId::kFfnUp, TensorId::kFfnDown}, c.intermediate, w.mlp, TpBy::kFfn, t);
  const int64_t h = c.hidden, E = c.n_experts, ff = c.moe_intermediate;
  MoeWeights& m = w.moe;
  // The router (and its selection bias) stays whole, so every rank routes alike.
  t.Matrix(TensorId::kFfnRouter, E, h, &m.router, 2.f / std::sqrt(h));
  // Mostly negative in make-tiny, as trained V3 checkpoints have them: masking must use -inf, not 0.
  if (c.router_bias) t.Vector(TensorId::kFfnExpProbsBias, E, &m.exp_probs_bias, 0.3f, -0.2f);
  if (c.moe_biases) t.Vector(TensorId::kFfnRouterBias, E, &m.router_bias, 0.5f, 0.f);
  t.Experts(TensorId::kFfnGateExps, E, ff, h, &m.gate, 1.f / std::sqrt(static_cast<float>(h))).ColumnParallel(TpBy::kExpertFfn);
  t.Experts(TensorId::kFfnUpExps, E, ff, h, &m.up, 1.f / std::sqrt(static_cast<float>(h))).ColumnParallel(TpBy::kExpertFfn);
  t.Experts(TensorId::kFfnDownExps, E, h, ff, &m.down, 1.f / std::sqrt(static_cast<float>(ff))).RowParallel(TpBy::kExpertFfn);
  if (c.moe_biases) {  // gpt-oss: each expert's projections have biases
    t.ExpertVectors(TensorId::kFfnGateExpsBias, E, ff, &m.gate_bias, 0.2f).ColumnParallel(TpBy::kExpertFfn);
    t.ExpertVectors(TensorId::kFfnUpExpsBias, E, ff, &m.up_bias, 0.2f).ColumnParallel(TpBy::kExpertFfn);
    t.ExpertVectors(TensorId::kFfnDownExpsBias, E, h, &m.down_bias, 0.1f).RowParallelBias(TpBy::kExpertFfn);
  }
  if (c.shared_ffn <= 0) return;
  SwiGluTensors(c, {TensorId::kFfnGateShexp, TensorId::kFfnUpShexp, TensorId::kFfnDownShexp}, c.shared_ffn, m.shared,
                TpBy::kSharedFfn, t);
  if (c.shared_expert_gate)
    t.Other(TensorId::kFfnShexpGate, TensorForm::kGateVector, {1, h}, &m.shared_gate, nullptr, 2.f / std::sqrt(h));
}

void GqaLayerTensors(const ModelConfig& c, int layer, LayerWeights& w, TensorList& t) {
  DecoderLayerTensors(c, layer, w, t, [&] { GqaTensors(c, w.gqa, t); });
}

void MlaLayerTensors(const ModelConfig& c, int layer, LayerWeights& w, TensorList& t) {
  DecoderLayerTensors(c, layer, w, t, [&] { MlaTensors(c, w.mla, t); });
}

void MtpModuleTensors(const ModelConfig& c, MtpWeights& w, const Model& m, TensorList& t) {
  const int64_t h = c.hidden;
  t.Norm(TensorId::kMtpENorm, h, &w.enorm);
  t.Norm(TensorId::kMtpHNorm, h, &w.hnorm);
  t.Matrix(TensorId::kMtpEhProj, h, 2 * h, &w.eh_proj, 1.f / std::sqrt(2.f * h));
  t.Matrix(TensorId::kMtpEmbd, c.vocab_size, h, &w.embed, 1.0f).ColumnParallel(TpBy::kVocab).Optional(&m.tok_embd);
  t.Norm(TensorId::kMtpHeadNorm, h, &w.head_norm).Optional(&m.out_norm);
  t.Matrix(TensorId::kMtpHead, c.vocab_size, h, &w.head, 3.f / std::sqrt(h)).ColumnParallel(TpBy::kVocab).Optional(&m.lm_head);
}

ModelTensors DeclareModelTensors(const ModelConfig& c, Model& m) {
  const ArchSpec& arch = GetArch(c.arch);
  m.layers.resize(c.n_layers);
  m.mtp.resize(c.n_mtp);
  ModelTensors t;
  EmbeddingTensors(c, m, t.embedding);
  HeadTensors(c, m, t.head);
  for (int l = 0; l < c.n_layers; ++l) arch.layer_tensors(c, l, m.layers[l], t.layers.emplace_back(l));
  for (int k = 0; k < c.n_mtp; ++k) {
    const int l = c.n_layers + k;
    ModelTensors::Mtp& p = t.mtp.emplace_back(ModelTensors::Mtp{TensorList(l, k), TensorList(l, k)});
    arch.layer_tensors(c, l, m.mtp[k].layer, p.layer);
    if (arch.mtp_tensors) arch.mtp_tensors(c, m.mtp[k], m, p.own);
  }
  return t;
}

}  // namespace deepinfer
