// One model configuration, filled from HF config.json or GGUF metadata.
#pragma once
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"

namespace deepinfer {

enum class Arch { kLlama, kQwen2, kQwen3, kMistral };
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

  std::string Summary() const;
};

// llama3 rope_scaling -> per-frequency divisors, as the HF implementation defines them.
std::vector<float> Llama3FreqFactors(int rot_dim, double theta, double factor, double low_freq_factor,
                                     double high_freq_factor, double original_max_pos);

}  // namespace deepinfer
