// The decoder-only transformer forward pass shared by llama, qwen2, qwen3 and mistral: RMSNorm, GQA attention
// with RoPE (and optional q/k norm and qkv bias), SwiGLU MLP, tied or untied lm_head.
#pragma once
#include <cstdint>
#include <vector>

#include "deepinfer/status.h"
#include "model/model.h"

namespace deepinfer {

// K and V for one sequence, f32, contiguous by position: layer -> [capacity][n_kv * head_dim].
class KvCache {
 public:
  KvCache(const ModelConfig& c, int capacity);
  int capacity() const { return capacity_; }
  float* k(int layer) { return k_.data() + static_cast<size_t>(layer) * layer_stride_; }
  float* v(int layer) { return v_.data() + static_cast<size_t>(layer) * layer_stride_; }
  size_t bytes() const { return (k_.size() + v_.size()) * sizeof(float); }

 private:
  int capacity_;
  size_t layer_stride_;
  std::vector<float> k_, v_;
};

class Transformer {
 public:
  // max_chunk: tokens per forward chunk (bounds activation buffers; longer prompts are chunked).
  Transformer(const Model& model, int max_chunk = 512);

  // Runs tokens at positions [start, start + n) of the sequence whose cache is `kv`. Writes vocab-size logits:
  // for every token when all_logits (n rows), else for the last token only (1 row).
  Status Forward(const int32_t* tokens, int n, int start, KvCache& kv, float* logits, bool all_logits);

  const Model& model() const { return model_; }

 private:
  void ForwardChunk(const int32_t* tokens, int n, int start, KvCache& kv, float* logits, bool all_logits);
  void Layer(int l, int n, int start, KvCache& kv);

  const Model& model_;
  const ModelConfig& c_;
  int max_chunk_;
  RopeTable rope_;
  std::vector<float> x_, xn_, q_, k_, v_, attn_, gate_, up_;
  std::vector<int32_t> pos_;
};

}  // namespace deepinfer
