// A loaded model: configuration, weight views into the mmapped files, and its tokenizer.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "base/host_buffer.h"
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
  // MoE layers: router {n_experts, hidden}; per expert gate/up {moe_ff, hidden} and down {hidden, moe_ff}.
  TensorView router;
  std::vector<TensorView> exp_gate, exp_up, exp_down;
  std::vector<float> exp_bias;                // deepseek-v3 e_score_correction_bias (selection only)
  TensorView sh_gate, sh_up, sh_down;         // deepseek shared experts (one SwiGLU)
  // MLA (deepseek): wq or wq_a/q_a_norm/wq_b; kv_a {kv_lora + rope, hidden}; kv_b {H * (nope + v), kv_lora}.
  TensorView wq_a, wq_b, wkv_a, wkv_b;
  std::vector<float> q_a_norm, kv_a_norm;
  // GGUFs in llama.cpp's current layout split kv_b: W_UV as {H * v, kv_lora} (wv_b; wkv_b is then empty).
  TensorView wv_b;
  // Per head h: W_UK[h]^T {kv_lora, nope} (absorbs the key up-projection into the query), as f32.
  std::vector<float> uk_t;
  bool moe() const { return !exp_gate.empty(); }
};

// DeepSeek-V3 multi-token prediction (MTP, "next-n") module: from the main model's final-normed hidden state h_i
// at position i and the embedding of token i+1, one more decoder layer predicts token i+2:
//   x = eh_proj [enorm(embed(t_{i+1})), hnorm(h_i)];  x = layer(x);  logits = head(head_norm(x))
// Checkpoints store it as layer num_hidden_layers (HF model.layers.{L}.*, GGUF blk.{L}.* and blk.{L}.nextn.*).
struct MtpWeights {
  LayerWeights layer;
  std::vector<float> enorm, hnorm, head_norm;
  TensorView eh_proj;      // {hidden, 2 * hidden}
  TensorView embed, head;  // the module's own copies when the checkpoint has them, else the model's
};

struct Model {
  ModelConfig config;
  TensorView tok_embd;  // {vocab, hidden}
  TensorView lm_head;   // {vocab, hidden}; tok_embd when tied
  std::vector<float> out_norm;
  std::vector<LayerWeights> layers;
  std::vector<MtpWeights> mtp;  // config.n_mtp modules (empty when the checkpoint has none)
  std::unique_ptr<Tokenizer> tokenizer;
  std::string source;  // path it was loaded from
  std::string format;  // "gguf" or "hf"

  ~Model();
  std::shared_ptr<GgufFile> gguf;
  std::shared_ptr<SafetensorsModel> safetensors;
  std::unique_ptr<HostBuffer> weights;  // set when the matrices were copied out of the mmapped files
};

// Where the weight matrices live while the model runs.
enum class WeightPlacement {
  kAuto,  // copy into huge-page memory when it fits comfortably in available RAM, else keep the mmap
  kMmap,  // read straight from the mmapped files (no copy; page cache shared between processes)
  kCopy,  // always copy into anonymous huge-page memory
};

struct LoadOptions {
  WeightPlacement placement = WeightPlacement::kAuto;
  bool progress = true;
};

// Loads a GGUF file or an HF directory (config.json + safetensors + tokenizer.json). Every problem is reported
// with the file and tensor it concerns.
// The configuration an HF config.json describes (architecture, shapes, MoE/MLA/YaRN settings), validated;
// cfg_path names the file in errors. LoadModelFromPath uses it for HF directories.
StatusOr<ModelConfig> ParseHfConfig(const std::string& json_text, const std::string& cfg_path);

StatusOr<std::unique_ptr<Model>> LoadModelFromPath(const std::string& path, const LoadOptions& opts = {});

}  // namespace deepinfer
