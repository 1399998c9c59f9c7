#include "model/arch/tensor_names.h"

#include <cstdlib>

#include "model/arch/arch.h"

namespace deepinfer {
namespace {

struct SharedName {
  const char* gguf;
  const char* hf;
};

// The shared spellings, indexed by TensorId. Per-layer entries are relative to the layer prefix.
constexpr SharedName kShared[] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
    {"rope_freqs.weight", ""},  // GGUF only: llama3 scaling factors (HF derives them from rope_scaling)
    // DeepSeek-V4 (HF: the names of DeepSeek's own checkpoint)
    {"output_hc_fn.weight", "hc_head_fn"},
    {"output_hc_base.weight", "hc_head_base"},
    {"output_hc_scale.weight", "hc_head_scale"},
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"post_attention_norm.weight", "post_attention_layernorm.weight"},  // OLMo 2 and Gemma 3 spell it so
    {"attn_output.bias", "self_attn.o_proj.bias"},
    {"attn_sinks.weight", "self_attn.sinks"},
    {"attn_q_a.weight", "self_attn.q_a_proj.weight"},
    {"attn_q_a_norm.weight", "self_attn.q_a_layernorm.weight"},
    {"attn_q_b.weight", "self_attn.q_b_proj.weight"},
    {"attn_kv_a_mqa.weight", "self_attn.kv_a_proj_with_mqa.weight"},
    {"attn_kv_a_norm.weight", "self_attn.kv_a_layernorm.weight"},
    {"attn_kv_b.weight", "self_attn.kv_b_proj.weight"},
    {"attn_k_b.weight", "self_attn.k_b_proj.weight"},
    {"attn_v_b.weight", "self_attn.v_b_proj.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
    {"ffn_gate_inp.weight", "mlp.gate.weight"},
    {"exp_probs_b.bias", "mlp.gate.e_score_correction_bias"},
    {"ffn_gate_exps.weight", "mlp.experts.{e}.gate_proj.weight"},
    {"ffn_up_exps.weight", "mlp.experts.{e}.up_proj.weight"},
    {"ffn_down_exps.weight", "mlp.experts.{e}.down_proj.weight"},
    {"ffn_gate_shexp.weight", "mlp.shared_experts.gate_proj.weight"},
    {"ffn_up_shexp.weight", "mlp.shared_experts.up_proj.weight"},
    {"ffn_down_shexp.weight", "mlp.shared_experts.down_proj.weight"},
    {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight"},
    {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"},
    {"ffn_gate_inp.bias", "mlp.gate.bias"},
    {"ffn_gate_exps.bias", "mlp.experts.gate_bias"},
    {"ffn_up_exps.bias", "mlp.experts.up_bias"},
    {"ffn_down_exps.bias", "mlp.experts.down_bias"},
    {"nextn.enorm.weight", "enorm.weight"},
    {"nextn.hnorm.weight", "hnorm.weight"},
    {"nextn.eh_proj.weight", "eh_proj.weight"},
    {"nextn.embed_tokens.weight", "embed_tokens.weight"},
    {"nextn.shared_head_norm.weight", "shared_head.norm.weight"},
    {"nextn.shared_head_head.weight", "shared_head.head.weight"},
    {"hc_attn_fn.weight", "hc_attn_fn"},
    {"hc_attn_base.weight", "hc_attn_base"},
    {"hc_attn_scale.weight", "hc_attn_scale"},
    {"hc_ffn_fn.weight", "hc_ffn_fn"},
    {"hc_ffn_base.weight", "hc_ffn_base"},
    {"hc_ffn_scale.weight", "hc_ffn_scale"},
    {"attn_kv.weight", "attn.wkv.weight"},
    {"attn_output_a.weight", "attn.wo_a.weight"},
    {"attn_output_b.weight", "attn.wo_b.weight"},
    {"attn_compressor_kv.weight", "attn.compressor.wkv.weight"},
    {"attn_compressor_gate.weight", "attn.compressor.wgate.weight"},
    {"attn_compressor_ape.weight", "attn.compressor.ape"},
    {"attn_compressor_norm.weight", "attn.compressor.norm.weight"},
    {"indexer.proj.weight", "attn.indexer.weights_proj.weight"},
    {"indexer.attn_q_b.weight", "attn.indexer.wq_b.weight"},
    {"indexer_compressor_kv.weight", "attn.indexer.compressor.wkv.weight"},
    {"indexer_compressor_gate.weight", "attn.indexer.compressor.wgate.weight"},
    {"indexer_compressor_ape.weight", "attn.indexer.compressor.ape"},
    {"indexer_compressor_norm.weight", "attn.indexer.compressor.norm.weight"},
    {"ffn_gate_tid2eid.weight", "ffn.gate.tid2eid"},
    {"", "e_proj.weight"},
    {"", "h_proj.weight"},
    {"", "hc_head_fn"},
    {"", "hc_head_base"},
    {"", "hc_head_scale"},
};
static_assert(sizeof(kShared) / sizeof(kShared[0]) == static_cast<size_t>(TensorId::kCount),
              "one shared name per TensorId");

}  // namespace

bool IsLayerTensor(TensorId id) { return static_cast<int>(id) >= static_cast<int>(TensorId::kAttnNorm); }

namespace {

std::string Spell(std::string pattern, TensorId id, const std::string& layer_prefix, int expert) {
  if (pattern.empty()) return pattern;
  if (const size_t at = pattern.find("{e}"); at != std::string::npos) pattern.replace(at, 3, std::to_string(expert));
  return IsLayerTensor(id) ? layer_prefix + pattern : pattern;
}

}  // namespace

std::string TensorName(const ArchSpec& arch, WeightFormat format, TensorId id, int layer, int expert, int mtp) {
  const SharedName& s = kShared[static_cast<int>(id)];
  std::string pattern = format == WeightFormat::kGguf ? s.gguf : s.hf;
  for (const TensorNameOverride& o : arch.tensor_names)
    if (o.id == id && o.format == format) pattern = o.pattern;
  std::string prefix;
  if (format == WeightFormat::kGguf) prefix = "blk." + std::to_string(layer) + ".";
  else if (mtp >= 0 && arch.hf_mtp_prefix) prefix = arch.hf_mtp_prefix + std::to_string(mtp) + ".";
  else prefix = arch.hf_layer_prefix + std::to_string(layer) + ".";
  return Spell(pattern, id, prefix, expert);
}

std::string SharedTensorName(WeightFormat format, TensorId id, int layer, int expert) {
  const SharedName& s = kShared[static_cast<int>(id)];
  const bool gguf = format == WeightFormat::kGguf;
  return Spell(gguf ? s.gguf : s.hf, id, (gguf ? "blk." : "model.layers.") + std::to_string(layer) + ".", expert);
}

}  // namespace deepinfer
