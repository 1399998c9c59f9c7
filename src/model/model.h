// A loaded model: configuration, weight views into the mmapped files, and its tokenizer.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/host_buffer.h"
#include "dist/parallel.h"
#include "deepinfer/model.h"
#include "deepinfer/status.h"
#include "model/config.h"
#include "model/layers/attention_gqa.h"
#include "model/layers/attention_dsv4.h"
#include "model/layers/attention_mla.h"
#include "model/layers/hyper_connection.h"
#include "model/layers/mlp_dense.h"
#include "model/layers/mlp_moe.h"
#include "tensor/tensor.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {

class GgufFile;
class SafetensorsModel;

// One decoder layer's weights: the two norms and the weights of the attention and MLP it composes (each owned
// by its layer in model/layers/). Which attention and which MLP a layer has follows from the configuration
// (config.mla, config.IsMoeLayer(l)); the other structs stay empty.
struct LayerWeights {
  std::vector<float> attn_norm, ffn_norm;  // small vectors are kept in f32
  // Norms of the attention and MLP outputs before they join the residual (OLMo 2's post-norm layer).
  std::vector<float> attn_post_norm, ffn_post_norm;
  GqaWeights gqa;
  MlaWeights mla;
  Dsv4AttnWeights dsv4;       // DeepSeek-V4's attention
  HcWeights hc_attn, hc_ffn;  // DeepSeek-V4: the hyper-connections around the attention and the MLP
  DenseMlpWeights mlp;
  MoeWeights moe;
  bool is_moe() const { return !moe.gate.empty(); }
  // Every weight matrix the layer holds except the routed experts (moe.gate/up/down), set or not.
  std::vector<const TensorView*> Matrices() const;
  std::vector<TensorView*> MutableMatrices();
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
  HcWeights hc_head;       // DeepSeek-V4: the block's collapse of the streams (HF has its own; GGUF: the model's)
};

// What one tensor-parallel rank holds (model/shard.cc). With tp == 1 (one process, or expert parallelism
// alone) the whole model and the fields stay 0; RankConfig/RankKvLayout read it.
struct ModelShard {
  int tp = 1, tp_rank = 0;
  int n_heads = 0, head0 = 0;        // attention heads [head0, head0 + n_heads) of the model's
  int n_kv_heads = 0, kv_head0 = 0;  // GQA KV heads the rank holds (one replicated head when tp > n_kv)
  int intermediate = 0;              // dense MLP slice (columns of gate/up rows, of down's inputs)
  int moe_intermediate = 0;          // per routed expert (whole under expert parallelism with E = N)
  int expert_tp = 1;                 // ways each routed expert is split (pure TP: tp; dispatch: N / E)
  int shared_ffn = 0;                // shared expert slice (whole under expert parallelism)
  int vocab_begin = 0, vocab_rows = 0;  // rows [vocab_begin, vocab_begin + vocab_rows) of tok_embd and lm_head
  int vocab_stride = 0;                 // ceil(vocab / tp): rank q's rows start at q * vocab_stride
  bool split() const { return tp > 1; }
};

struct Model {
  ModelConfig config;
  TensorView tok_embd;  // {vocab, hidden}
  TensorView lm_head;   // {vocab, hidden}; tok_embd when tied
  std::vector<float> out_norm;
  HcWeights hc_head;  // DeepSeek-V4: the head's collapse of the residual streams
  std::vector<LayerWeights> layers;
  std::vector<MtpWeights> mtp;  // config.n_mtp modules (empty when the checkpoint has none)
  std::unique_ptr<Tokenizer> tokenizer;
  std::string source;  // path it was loaded from
  std::string format;  // "gguf" or "hf"
  // The shard of the weights this process holds (model/shard.cc): one process holds everything.
  dist::ParallelConfig parallel;
  ModelShard shard;

  ~Model();
  std::shared_ptr<GgufFile> gguf;
  std::shared_ptr<GgufFile> mtp_gguf;  // a DeepSeek-V4 MTP GGUF the MTP block was read from (LoadOptions::mtp_model)
  std::shared_ptr<SafetensorsModel> safetensors;
  std::unique_ptr<HostBuffer> weights;  // set when the matrices were copied out of the mmapped files
  // Tensor parallelism: the row-parallel slices (input columns of o_proj/down), which are not contiguous in
  // the file, copied out (released once CopyWeights has copied them again), and FP8 block scales of them.
  std::vector<std::unique_ptr<HostBuffer>> shard_buffers;
  std::vector<std::vector<float>> shard_scales;
  // FP8 block scales the loader converted (DeepSeek-V4's E8M0 `.scale` bytes as the f32 multipliers views read).
  std::vector<std::vector<float>> loaded_scales;
  // Weights the loader builds rather than points at (HF gpt-oss's experts, repacked from the file's layout): a
  // view with no data yet and the function that writes its nbytes. CopyWeights runs them straight into `weights`,
  // so the model is held once while loading; where the weights stay mmapped or are sharded they are built into a
  // buffer of their own first (in shard_buffers). Empty once LoadModelFromPath returns.
  struct PendingWeight {
    TensorView* view;
    std::function<void(uint8_t* dst)> fill;
  };
  std::vector<PendingWeight> pending_weights;
};

// The configuration this rank's layers run with: model.config with the rank's heads, KV heads and FFN widths
// under tensor parallelism (vocab_size and everything else unchanged), else model.config itself.
ModelConfig RankConfig(const Model& m);
// The KV cache shape of this rank (its KV heads; MLA's latent is whole on every rank).
KvLayout RankKvLayout(const Model& m);

// Where the weight matrices live while the model runs.
using WeightPlacement = api::WeightPlacement;  // the public enum is the loader's own

// How to load: the public ModelOptions (placement, progress) plus what only the top level knows.
struct LoadOptions : api::ModelOptions {
  // The process's parallel plan under mpirun (from the top level: apps, the public API); nullptr or a single
  // rank: the whole model. The split is checked against the configuration before any weight is read, and the
  // model keeps only this rank's shard (ShardModel).
  const dist::ParallelConfig* split = nullptr;

  LoadOptions() = default;
  explicit LoadOptions(const api::ModelOptions& o) : api::ModelOptions(o) {}
};

// The configuration an HF config.json describes (architecture, shapes, MoE/MLA/YaRN settings), validated;
// cfg_path names the file in errors (hf_config.cc). LoadModelFromPath uses it for HF directories.
StatusOr<ModelConfig> ParseHfConfig(const std::string& json_text, const std::string& cfg_path);
// The same from a GGUF file's metadata (gguf_config.cc).
StatusOr<ModelConfig> ParseGgufConfig(const GgufFile& g);

// Loads a GGUF file or an HF directory (config.json + safetensors + tokenizer.json). Every problem is reported
// with the file and tensor it concerns.
// Under mpirun (opts.split) the model keeps only this rank's shard.
StatusOr<std::unique_ptr<Model>> LoadModelFromPath(const std::string& path, const LoadOptions& opts = {});

// Narrows a fully loaded (still mmapped) model to one rank's shard: expert parallelism keeps only the experts of
// the rank's slots; tensor parallelism keeps the rank's heads, FFN columns and vocabulary rows (model/shard.cc).
Status ShardModel(Model& m, const dist::ParallelConfig& pc);

}  // namespace deepinfer
