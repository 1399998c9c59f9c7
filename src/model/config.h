// One model configuration, filled from HF config.json or GGUF metadata.
#pragma once
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"

namespace deepinfer {

enum class Arch { kLlama, kQwen2, kQwen3, kMistral, kQwen3Moe };
const char* ArchName(Arch a);
bool ArchFromName(const std::string& name, Arch* out);  // accepts HF model_type / GGUF architecture names

struct ModelConfig {
  Arch arch = Arch::kLlama;
  int vocab_size = 0;
  int hidden = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int intermediate = 0;
  int max_ctx = 2048;
  float rms_eps = 1e-5f;
  double rope_theta = 10000.0;
  RopeStyle rope_style = RopeStyle::kHalves;
  std::vector<float> rope_freq_factors;  // llama3-style scaling: inv_freq[i] /= factor[i]; empty = none
  bool tie_embeddings = false;
  bool attn_bias = false;  // q/k/v projection biases (qwen2)
  bool qk_norm = false;    // per-head RMSNorm on q and k before RoPE (qwen3)
  // Mixture of experts (qwen3_moe): layers whose MLP is routed over n_experts, n_experts_used per token.
  int n_experts = 0, n_experts_used = 0, moe_intermediate = 0;
  bool norm_topk_prob = true;
  int decoder_sparse_step = 1;
  std::vector<int> mlp_only_layers;
  bool IsMoeLayer(int l) const {
    for (int d : mlp_only_layers)
      if (d == l) return false;
    return n_experts > 0 && (l + 1) % decoder_sparse_step == 0;
  }

  std::string Summary() const;
};

// llama3 rope_scaling -> per-frequency divisors, as the HF implementation defines them.
std::vector<float> Llama3FreqFactors(int rot_dim, double theta, double factor, double low_freq_factor,
                                     double high_freq_factor, double original_max_pos);

}  // namespace deepinfer
