// Mixtral (HF MixtralForCausalLM; GGUF "llama" with expert_count): Llama's attention (GQA, llama-style RoPE
// rows in GGUF) with every MLP replaced by a sparse MoE block: softmax over num_local_experts router logits,
// top-k (2), the k weights renormalized to sum to 1, no shared expert. HF names the experts' projections w1
// (gate), w3 (up) and w2 (down) under block_sparse_moe; GGUF stacks them as ffn_{gate,up,down}_exps. The expert
// FFN size is GGUF feed_forward_length (llama.cpp's converter writes no expert length for Mixtral).
#include <nlohmann/json.hpp>

#include "format/gguf.h"
#include "model/arch/arch.h"
#include "model/arch/blocks.h"
#include "model/make_tiny.h"

namespace deepinfer {
namespace {

Status MixtralHfConfig(const HfConfigReader& j, ModelConfig* c) {
  DI_ASSIGN_OR_RETURN(int64_t experts, j.Int("num_local_experts", -1));
  DI_ASSIGN_OR_RETURN(int64_t used, j.Int("num_experts_per_tok", -1));
  if (experts <= 0 || experts > 4096 || used <= 0 || used > experts)
    return j.Invalid("num_local_experts / num_experts_per_tok out of range");
  c->n_experts = static_cast<int>(experts);
  c->n_experts_used = static_cast<int>(used);
  c->moe_intermediate = c->intermediate;  // every expert is an intermediate_size SwiGLU
  c->norm_topk_prob = true;
  return Status::Ok();
}

Status MixtralGgufConfig(const GgufConfigReader& g, ModelConfig* c) {
  if (!g.Has("expert_feed_forward_length")) c->moe_intermediate = c->intermediate;
  c->norm_topk_prob = true;  // llama.cpp's llama MoE renormalizes the top-k weights
  return Status::Ok();
}

}  // namespace

const ArchSpec& MixtralArch() {
  static const ArchSpec kSpec{
      .arch = Arch::kMixtral,
      .name = "mixtral",
      .hf_names = {"mixtral", "MixtralForCausalLM"},
      .hf_class = "MixtralForCausalLM",
      .gguf_arch = "llama",
      .gguf_arch_with_experts = "llama",
      .moe = true,
      .adds_bos = true,
      .gguf_rope = RopeStyle::kAdjacentPairs,
      .hf_config = MixtralHfConfig,
      .gguf_config = MixtralGgufConfig,
      .gguf_convertible = [](const ModelConfig& c) {
        if (c.moe_intermediate != c.intermediate) return Unimplemented("llama.cpp's Mixtral experts are feed_forward_length wide");
        return Status::Ok();
      },
      .gguf_metadata = [](const ModelConfig& c, const std::string& p, GgufWriter& w) {
        w.SetU32(p + "expert_count", c.n_experts);
        w.SetU32(p + "expert_used_count", c.n_experts_used);
      },
      .tiny_adjust = [](TinySpec* s) { s->intermediate = s->moe_intermediate; },  // no dense MLP: experts are the FFN
      .tiny_hf_config = [](const TinySpec& s, nlohmann::json* cfg) {
        (*cfg)["num_local_experts"] = s.experts;
        (*cfg)["num_experts_per_tok"] = s.experts_used;
        (*cfg)["router_aux_loss_coef"] = 0.02;
        (*cfg)["sliding_window"] = nullptr;
      },
      .tiny_gguf_metadata = [](const TinySpec& s, const std::string& p, GgufWriter& w) {
        w.SetU32(p + "expert_count", s.experts);
        w.SetU32(p + "expert_used_count", s.experts_used);
      },
      .tensor_names = {
          {TensorId::kFfnRouter, WeightFormat::kHf, "block_sparse_moe.gate.weight"},
          {TensorId::kFfnGateExps, WeightFormat::kHf, "block_sparse_moe.experts.{e}.w1.weight"},
          {TensorId::kFfnUpExps, WeightFormat::kHf, "block_sparse_moe.experts.{e}.w3.weight"},
          {TensorId::kFfnDownExps, WeightFormat::kHf, "block_sparse_moe.experts.{e}.w2.weight"},
      },
      // GQA attention (GGUF q/k rows in adjacent-pair order); router and routed experts.
      .layer_tensors = GqaLayerTensors,
  };
  return kSpec;
}

}  // namespace deepinfer
