// Qwen3-MoE: Qwen3's attention (q/k norm, NeoX RoPE) with every MLP (bar mlp_only_layers, and subject to
// decoder_sparse_step) routed over num_experts SwiGLU experts: softmax over all experts, top-k, renormalized
// when norm_topk_prob. No shared expert.
#include <nlohmann/json.hpp>

#include "format/gguf.h"
#include "model/arch/arch.h"
#include "model/arch/blocks.h"
#include "model/make_tiny.h"

namespace deepinfer {

Status ReadQwenMoeHfConfig(const HfConfigReader& j, bool norm_topk_default, ModelConfig* c) {
  DI_ASSIGN_OR_RETURN(int64_t n_expert, j.Int("num_experts", 0));
  if (n_expert <= 0) return Status::Ok();  // a dense checkpoint of the family
  DI_ASSIGN_OR_RETURN(int64_t moe_ff, j.Int("moe_intermediate_size", 0));
  DI_ASSIGN_OR_RETURN(int64_t used, j.Int("num_experts_per_tok", -1));
  DI_ASSIGN_OR_RETURN(int64_t step, j.Int("decoder_sparse_step", 1));
  if (n_expert > 4096 || used <= 0 || used > n_expert || moe_ff <= 0 || moe_ff > (int64_t{1} << 30) || step <= 0 || step > 4096)
    return j.Invalid("num_experts / num_experts_per_tok / moe_intermediate_size out of range");
  c->n_experts = static_cast<int>(n_expert);
  c->n_experts_used = static_cast<int>(used);
  c->moe_intermediate = static_cast<int>(moe_ff);
  c->decoder_sparse_step = static_cast<int>(step);
  c->norm_topk_prob = j.BoolOr("norm_topk_prob", norm_topk_default);
  c->mlp_only_layers = j.IntList("mlp_only_layers");
  return Status::Ok();
}

Status QwenMoeGgufConvertible(const ModelConfig& c, bool norm_topk) {
  const std::string ga = GetArch(c.arch).gguf_arch;
  if (c.decoder_sparse_step != 1 || !c.mlp_only_layers.empty())
    return Unimplemented("llama.cpp's " + ga + " routes every layer (decoder_sparse_step 1, no mlp_only_layers)");
  if (c.norm_topk_prob != norm_topk)
    return Unimplemented("llama.cpp's " + ga + (norm_topk ? " always renormalizes" : " never renormalizes") +
                         " the top-k weights (norm_topk_prob " + (c.norm_topk_prob ? "true" : "false") + ")");
  return Status::Ok();
}

const ArchSpec& Qwen3MoeArch() {
  static const ArchSpec kSpec{
      .arch = Arch::kQwen3Moe,
      .name = "qwen3_moe",
      .hf_names = {"qwen3_moe", "Qwen3MoeForCausalLM"},
      .hf_class = "Qwen3MoeForCausalLM",
      .gguf_arch = "qwen3moe",
      .qk_norm = QkNorm::kPerHead,
      .moe = true,
      .hf_config = [](const HfConfigReader& j, ModelConfig* c) { return ReadQwenMoeHfConfig(j, true, c); },
      // llama.cpp's qwen3moe always renormalizes the top-k weights (the shared GGUF reader's default).
      .gguf_config = nullptr,
      .gguf_convertible = [](const ModelConfig& c) { return QwenMoeGgufConvertible(c, true); },
      .gguf_metadata = [](const ModelConfig& c, const std::string& p, GgufWriter& w) {
        WriteGgufExpertCounts(p, c.n_experts, c.n_experts_used, c.moe_intermediate, w);
      },
      .tiny_hf_config = [](const TinySpec& s, nlohmann::json* cfg) {
        (*cfg)["num_experts"] = s.experts;
        (*cfg)["num_experts_per_tok"] = s.experts_used;
        (*cfg)["moe_intermediate_size"] = s.moe_intermediate;
        (*cfg)["norm_topk_prob"] = true;
        (*cfg)["decoder_sparse_step"] = 1;
        (*cfg)["mlp_only_layers"] = nlohmann::json::array();
      },
      .tiny_gguf_metadata = [](const TinySpec& s, const std::string& p, GgufWriter& w) {
        WriteGgufExpertCounts(p, s.experts, s.experts_used, s.moe_intermediate, w);
      },
      // GQA attention with per-head q/k norms; router and routed experts (a dense SwiGLU in mlp_only_layers).
      .layer_tensors = GqaLayerTensors,
  };
  return kSpec;
}

}  // namespace deepinfer
