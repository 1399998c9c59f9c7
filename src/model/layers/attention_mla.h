// Multi-head latent attention (DeepSeek-V2/V3). Queries through an optional low-rank q_lora (q_a, its RMSNorm,
// q_b) or a plain q projection; K/V through one normalized latent of kv_lora_rank plus a rope key of
// qk_rope_dim shared by all heads - the only thing cached per token. Attention is computed "absorbed": W_UK
// folded into each head's query and W_UV applied after attention, so scores and values read the latent
// directly (MQA over the latent). The decompressed form (K/V up-projected per head, ordinary multi-head
// attention) is the same math in another order, kept to check the absorbed one against.
#pragma once
#include <vector>

#include "kv/paged_kv_cache.h"
#include "model/config.h"
#include "model/layers/batch.h"
#include "tensor/tensor.h"

namespace deepinfer {

struct MlaWeights {
  TensorView wq;                  // {H * (nope + rope), hidden} when there is no q_lora
  TensorView wq_a, wq_b;          // q_lora: {q_lora, hidden} and {H * (nope + rope), q_lora}
  std::vector<float> q_a_norm;    // {q_lora}
  TensorView wkv_a;               // {kv_lora + rope, hidden}: the cache row before its norm and RoPE
  std::vector<float> kv_a_norm;   // {kv_lora}
  TensorView wkv_b;               // {H * (nope + v), kv_lora}: W_UK and W_UV interleaved per head (HF layout)
  TensorView wv_b;                // GGUFs in llama.cpp's split layout: W_UV as {H * v, kv_lora} (wkv_b empty)
  std::vector<float> uk_t;        // per head h: W_UK[h]^T {kv_lora, nope}, f32 (absorbs the key up-projection)
  TensorView wo;                  // {hidden, H * v}, row-parallel
};

class MlaAttention {
 public:
  MlaAttention(const Ops& ops, const ModelConfig& c, int max_tokens);
  // out (n rows of hidden) = wo(attention(xn)); the batch's latent rows go to layer kv_layer of kv.
  Status Forward(const MlaWeights& w, const BatchView& b, int kv_layer, PagedKvCache& kv, const float* xn, float* out);
  // false: the decompressed form (for checking; the engine always runs absorbed - see docs/architecture.md).
  void set_absorb(bool absorb) { absorb_ = absorb; }

 private:
  const Ops& ops_;
  void Absorbed(const MlaWeights& w, const BatchView& b, int kv_layer, PagedKvCache& kv);
  void Decompressed(const MlaWeights& w, const BatchView& b, int kv_layer, PagedKvCache& kv);

  int H_, nope_, rope_dim_, kvl_, vd_, q_lora_;
  float eps_, attn_scale_mult_;
  bool absorb_ = true;
  RopeTable rope_;
  std::vector<float> qa_, q_, krow_, qabs_, olat_, attn_;
};

}  // namespace deepinfer
