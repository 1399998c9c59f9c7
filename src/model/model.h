// A loaded model: configuration, weight views into the mmapped files, and its tokenizer.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "deepinfer/status.h"
#include "model/config.h"
#include "tensor/tensor.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {

class GgufFile;
class SafetensorsModel;

struct LayerWeights {
  std::vector<float> attn_norm, ffn_norm;  // small vectors are kept in f32
  std::vector<float> q_norm, k_norm;       // qwen3
  std::vector<float> bq, bk, bv;           // qwen2
  TensorView wq, wk, wv, wo, w_gate, w_up, w_down;
};

struct Model {
  ModelConfig config;
  TensorView tok_embd;  // {vocab, hidden}
  TensorView lm_head;   // {vocab, hidden}; tok_embd when tied
  std::vector<float> out_norm;
  std::vector<LayerWeights> layers;
  std::unique_ptr<Tokenizer> tokenizer;
  std::string source;  // path it was loaded from
  std::string format;  // "gguf" or "hf"

  ~Model();
  std::shared_ptr<GgufFile> gguf;
  std::shared_ptr<SafetensorsModel> safetensors;
};

// Loads a GGUF file or an HF directory (config.json + safetensors + tokenizer.json). Every problem is reported
// with the file and tensor it concerns.
StatusOr<std::unique_ptr<Model>> LoadModelFromPath(const std::string& path);

}  // namespace deepinfer
