#include "model/config.h"

#include <cmath>
#include <cstdio>

namespace deepinfer {

const char* ArchName(Arch a) {
  switch (a) {
    case Arch::kLlama: return "llama";
    case Arch::kQwen2: return "qwen2";
    case Arch::kQwen3: return "qwen3";
    case Arch::kMistral: return "mistral";
    case Arch::kQwen3Moe: return "qwen3_moe";
    case Arch::kDeepseekV3: return "deepseek_v3";
  }
  return "?";
}

bool ArchFromName(const std::string& n, Arch* out) {
  if (n == "llama" || n == "LlamaForCausalLM") *out = Arch::kLlama;
  else if (n == "qwen2" || n == "Qwen2ForCausalLM") *out = Arch::kQwen2;
  else if (n == "qwen3" || n == "Qwen3ForCausalLM") *out = Arch::kQwen3;
  else if (n == "mistral" || n == "MistralForCausalLM") *out = Arch::kMistral;
  else if (n == "qwen3_moe" || n == "qwen3moe" || n == "Qwen3MoeForCausalLM") *out = Arch::kQwen3Moe;
  else if (n == "deepseek_v3" || n == "deepseek_v2" || n == "deepseek2" || n == "DeepseekV3ForCausalLM" ||
           n == "DeepseekV2ForCausalLM")
    *out = Arch::kDeepseekV3;
  else return false;
  return true;
}

std::string ModelConfig::Summary() const {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "arch=%s vocab=%d hidden=%d layers=%d heads=%d kv_heads=%d head_dim=%d ffn=%d ctx=%d rope_theta=%g%s%s%s%s",
                ArchName(arch), vocab_size, hidden, n_layers, n_heads, n_kv_heads, head_dim, intermediate, max_ctx,
                rope_theta, rope_freq_factors.empty() ? "" : " rope_scaling=llama3", tie_embeddings ? " tied" : "",
                attn_bias ? " qkv_bias" : "", qk_norm ? " qk_norm" : "");
  std::string out = buf;
  if (n_experts > 0)
    out += " experts=" + std::to_string(n_experts) + " used=" + std::to_string(n_experts_used) +
           " expert_ffn=" + std::to_string(moe_intermediate) + (norm_topk_prob ? " norm_topk" : "") +
           (n_shared_experts ? " shared=" + std::to_string(n_shared_experts) : "") +
           (first_k_dense ? " dense_first=" + std::to_string(first_k_dense) : "") + (router_sigmoid ? " sigmoid" : "") +
           (n_group > 1 ? " groups=" + std::to_string(topk_group) + "/" + std::to_string(n_group) : "");
  if (mla)
    out += " mla(q_lora=" + std::to_string(q_lora_rank) + " kv_lora=" + std::to_string(kv_lora_rank) +
           " nope=" + std::to_string(qk_nope_dim) + " rope=" + std::to_string(qk_rope_dim) + " v=" + std::to_string(v_head_dim) + ")";
  return out;
}

std::vector<float> Llama3FreqFactors(int rot_dim, double theta, double factor, double low_freq_factor,
                                     double high_freq_factor, double original_max_pos) {
  std::vector<float> out(rot_dim / 2);
  const double low_wavelen = original_max_pos / low_freq_factor, high_wavelen = original_max_pos / high_freq_factor;
  for (int i = 0; i < rot_dim / 2; ++i) {
    const double freq = std::pow(theta, -2.0 * i / rot_dim);
    const double wavelen = 2 * M_PI / freq;
    double f;
    if (wavelen < high_wavelen) {
      f = 1.0;
    } else if (wavelen > low_wavelen) {
      f = factor;
    } else {
      const double smooth = (original_max_pos / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      f = 1.0 / ((1 - smooth) / factor + smooth);
    }
    out[i] = static_cast<float>(f);
  }
  return out;
}

}  // namespace deepinfer
