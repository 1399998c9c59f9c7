// Qwen2-MoE / Qwen1.5-MoE (HF Qwen2MoeForCausalLM; GGUF qwen2moe): Qwen2's attention (q/k/v biases, NeoX RoPE)
// with routed experts (softmax over num_experts, top-k, renormalized only when norm_topk_prob - false in the
// released checkpoints and always in llama.cpp) plus one shared expert every token takes, whose output is scaled
// by a per-token sigmoid gate: out = routed + sigmoid(x . w_gate) * shared(x).
#include <nlohmann/json.hpp>

#include "format/gguf.h"
#include "model/arch/arch.h"
#include "model/arch/blocks.h"
#include "model/make_tiny.h"

namespace deepinfer {
namespace {

Status Qwen2MoeHfConfig(const HfConfigReader& j, ModelConfig* c) {
  DI_RETURN_IF_ERROR(ReadQwenMoeHfConfig(j, false, c));
  DI_ASSIGN_OR_RETURN(int64_t shared, j.Int("shared_expert_intermediate_size", 0));
  if (shared < 0 || shared > (int64_t{1} << 30)) return j.Invalid("shared_expert_intermediate_size out of range");
  c->shared_ffn = static_cast<int>(shared);
  c->shared_expert_gate = shared > 0;
  return Status::Ok();
}

Status Qwen2MoeGgufConfig(const GgufConfigReader& g, ModelConfig* c) {
  DI_ASSIGN_OR_RETURN(int64_t shared, g.Int("expert_shared_feed_forward_length", 0, false));
  if (shared < 0 || shared > (int64_t{1} << 30)) return g.Invalid("expert_shared_feed_forward_length out of range");
  c->shared_ffn = static_cast<int>(shared);
  c->shared_expert_gate = shared > 0;
  c->norm_topk_prob = false;  // llama.cpp's qwen2moe never renormalizes
  return Status::Ok();
}

}  // namespace

const ArchSpec& Qwen2MoeArch() {
  static const ArchSpec kSpec{
      .arch = Arch::kQwen2Moe,
      .name = "qwen2_moe",
      .hf_names = {"qwen2_moe", "Qwen2MoeForCausalLM"},
      .hf_class = "Qwen2MoeForCausalLM",
      .gguf_arch = "qwen2moe",
      .attn_bias = true,
      .moe = true,
      .shared_expert_gate = true,
      .hf_config = Qwen2MoeHfConfig,
      .gguf_config = Qwen2MoeGgufConfig,
      .gguf_convertible = [](const ModelConfig& c) { return QwenMoeGgufConvertible(c, false); },
      .gguf_metadata = [](const ModelConfig& c, const std::string& p, GgufWriter& w) {
        WriteGgufExpertCounts(p, c.n_experts, c.n_experts_used, c.moe_intermediate, w);
        if (c.shared_ffn > 0) w.SetU32(p + "expert_shared_feed_forward_length", c.shared_ffn);
      },
      .tiny_hf_config = [](const TinySpec& s, nlohmann::json* cfg) {
        (*cfg)["num_experts"] = s.experts;
        (*cfg)["num_experts_per_tok"] = s.experts_used;
        (*cfg)["moe_intermediate_size"] = s.moe_intermediate;
        (*cfg)["shared_expert_intermediate_size"] = s.moe_intermediate * s.shared_experts;
        (*cfg)["norm_topk_prob"] = false;
        (*cfg)["decoder_sparse_step"] = 1;
        (*cfg)["mlp_only_layers"] = nlohmann::json::array();
      },
      .tiny_gguf_metadata = [](const TinySpec& s, const std::string& p, GgufWriter& w) {
        WriteGgufExpertCounts(p, s.experts, s.experts_used, s.moe_intermediate, w);
        w.SetU32(p + "expert_shared_feed_forward_length", s.moe_intermediate * s.shared_experts);
      },
      .tensor_names = {
          {TensorId::kFfnGateShexp, WeightFormat::kHf, "mlp.shared_expert.gate_proj.weight"},
          {TensorId::kFfnUpShexp, WeightFormat::kHf, "mlp.shared_expert.up_proj.weight"},
          {TensorId::kFfnDownShexp, WeightFormat::kHf, "mlp.shared_expert.down_proj.weight"},
      },
      // GQA attention with q/k/v biases; router, routed experts, the shared expert and its sigmoid gate.
      .layer_tensors = GqaLayerTensors,
  };
  return kSpec;
}

}  // namespace deepinfer
