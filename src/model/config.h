// One model configuration, filled from HF config.json or GGUF metadata.
#pragma once
#include <string>
#include <vector>

#include "deepinfer/status.h"
#include "kernels/ops.h"
#include "kv/kv_layout.h"

namespace deepinfer {

// Model families; each is declared once in model/arch/ (names, config rules, tensor spellings).
enum class Arch { kLlama, kQwen2, kQwen3, kMistral, kQwen3Moe, kDeepseekV3, kMixtral, kQwen2Moe, kOlmo2, kSmolLM3, kGemma3, kGptOss,
                 kDeepseekV4 };
const char* ArchName(Arch a);
bool ArchFromName(const std::string& name, Arch* out);  // deepinfer, HF model_type/class or GGUF architecture names

// RMSNorm of q and k after their projections, before RoPE: none, per head (Qwen3: one head_dim weight shared by
// every head) or over the whole projection (OLMo 2: heads * head_dim weights, the statistic over all heads).
enum class QkNorm { kNone, kPerHead, kWhole };

// The gated MLP's activation: act(gate(x)) * up(x). SiLU (SwiGLU: Llama and most families) or GELU's tanh
// approximation (GeGLU: Gemma), or gpt-oss's clamped form (kSwigluOai: the gate clamped above and the up
// projection on both sides at 7, then gate * sigmoid(1.702 gate) * (up + 1); kernels/ops.h).
enum class FfnAct { kSilu, kGeluTanh, kSwigluOai };

// DeepSeek-V4 (model/arch/deepseek_v4.cc, model/models/deepseek_v4.cc): the settings of its attention (one K=V
// latent per token, a raw window on every layer, compressed rows on most), its hyper-connections and routing.
struct Dsv4Params {
  int hc = 0;  // residual streams (hyper_connection.count; 0: not a V4 model)
  int hc_iters = 0;
  float hc_eps = 0;
  std::vector<int> compress_ratio;  // per layer, then per MTP module (always 0): 0 (window only), 4 (CSA + indexer), 128 (HCA)
  double compress_rope_theta = 0;   // the compressed layers' (and their compressors' and indexer's) RoPE base
  int o_groups = 0, o_lora_rank = 0;
  int index_heads = 0, index_head_dim = 0, index_topk = 0;
  int hash_layers = 0;  // layers l < hash_layers route by token id (tid2eid)
  std::vector<float> swiglu_limit, swiglu_limit_shared;  // per layer, then per MTP module: the experts' clamp (0: none)
};

// Where a DeepSeek-V4 layer keeps its per-token state in the paged KV cache. Every entry is a cache "layer" (a
// plane of rows of head_dim elements): the raw K=V row (windowed: W), the compressor's per-token inputs (their
// projections and scores, a window of 2 x ratio for CSA's overlapping blocks, ratio for HCA: what llama.cpp
// keeps in its F32 rings), and the compressed rows (full attention: a block's row is stored in the slot of the
// token that closes the block, so it lives and is shared, cached and evicted with that position like any K/V).
struct Dsv4KvLayer {
  int raw = -1;
  int ring = -1, ring_planes = 0, ring_window = 0;  // ring_planes consecutive cache layers from `ring`
  int comp = -1;       // the compressed K=V row (ratio != 0)
  int index_key = -1;  // the indexer's compressed key (ratio 4)
};

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
  bool attn_out_bias = false;  // a bias on the attention's output projection (gpt-oss)
  bool attn_sinks = false;     // a learned softmax sink logit per query head (gpt-oss; kernels/ops.h AttnShape)
  QkNorm qk_norm = QkNorm::kNone;  // RMSNorm of q and k before RoPE
  // Layers that skip RoPE (SmolLM3's every fourth: no positional signal but the causal mask); empty: none.
  std::vector<int> nope_layers;
  bool LayerUsesRope(int l) const {
    for (int n : nope_layers)
      if (n == l) return false;
    return true;
  }
  // Sliding-window attention: a windowed layer's row at position q attends to [q + 1 - sliding_window, q].
  // swa_layers[l] says which layers are windowed (Gemma 3: five of every six); empty with a window: all of them
  // (Mistral 7B v0.1). Windowed layers rotate with rope_theta_swa (Gemma 3's local base; 0: rope_theta) and,
  // unless swa_rope_scaled, without the full layers' linear scaling.
  int sliding_window = 0;
  std::vector<bool> swa_layers;
  double rope_theta_swa = 0;
  bool swa_rope_scaled = true;
  int LayerWindow(int l) const {
    if (sliding_window <= 0 || l < 0 || l >= n_layers) return 0;
    return swa_layers.empty() || swa_layers[static_cast<size_t>(l)] ? sliding_window : 0;
  }
  // Linear RoPE scaling (rope_scaling type "linear"): positions divided by this factor (1: none).
  double rope_linear_factor = 1.0;
  // The softmax scale is 1/sqrt(query_pre_attn_scalar) (Gemma 3's; 0: head_dim).
  float query_pre_attn_scalar = 0.f;
  FfnAct ffn_act = FfnAct::kSilu;
  // Mixture of experts (qwen3_moe): layers whose MLP is routed over n_experts, n_experts_used per token.
  int n_experts = 0, n_experts_used = 0, moe_intermediate = 0;
  bool norm_topk_prob = true;
  int decoder_sparse_step = 1;
  std::vector<int> mlp_only_layers;
  int first_k_dense = 0;        // deepseek: the first k layers keep a dense MLP
  int n_shared_experts = 0;     // deepseek: always-on experts (one SwiGLU of moe_intermediate x n_shared)
  int shared_ffn = 0;           // hidden size of the shared expert SwiGLU every token takes (0: none)
  bool shared_expert_gate = false;  // qwen2_moe: the shared expert's output is scaled by sigmoid(x . w_gate)
  bool router_sigmoid = false;  // deepseek-v3 scoring (noaux_tc), else softmax
  bool router_bias = false;     // e_score_correction_bias present (selection only)
  // gpt-oss: the router's linear has a bias, each expert's gate/up/down projections too, and the top-k are
  // chosen on the raw logits with their weights a softmax over the k chosen (not over every expert).
  bool moe_biases = false;
  bool router_softmax_topk = false;
  int n_group = 1, topk_group = 1;
  float routed_scaling_factor = 1.f;
  bool IsMoeLayer(int l) const {
    for (int d : mlp_only_layers)
      if (d == l) return false;
    return n_experts > 0 && l >= first_k_dense && (l + 1) % decoder_sparse_step == 0;
  }
  // Multi-head latent attention (deepseek_v2/v3): q through an optional low-rank q_lora, K/V through a shared
  // normalized latent of kv_lora_rank plus a rope key of qk_rope_dim that all heads share. The KV cache holds
  // only [latent, rope key] per token per layer.
  bool mla = false;
  int q_lora_rank = 0, kv_lora_rank = 0, qk_nope_dim = 0, qk_rope_dim = 0, v_head_dim = 0;
  // Elements per token per layer in the K and V planes of the KV cache.
  YarnParams yarn;                 // rope_scaling yarn (deepseek)
  float attn_scale_mult = 1.f;     // softmax scale multiplier (YaRN: get_mscale(factor, mscale_all_dim)^2)
  Dsv4Params dsv4;
  bool is_dsv4() const { return dsv4.hc > 0; }
  // DeepSeek-V4: each layer's cache layers, and every cache layer's window (0: full attention). mtp: the layout
  // `--speculative mtp` runs with, where each MTP block k (entry n_layers + k) keeps its K=V rows in one more
  // cache layer of window W after the decoder layers' (a windowed MTP cache, sliding with the W kind); without
  // it the layout (and the KV digest) is the plain model's and the MTP rows live in a cache of their own
  // (Transformer::MtpKvLayout).
  std::vector<Dsv4KvLayer> Dsv4KvLayers(std::vector<int>* windows = nullptr, bool mtp = false) const;
  // MTP modules loaded (num_nextn_predict_layers: DeepSeek-V3, V4); each has its own KV layer when used.
  int n_mtp = 0;
  // Floats per token of the main model's state an MTP module reads (ForwardBatch's `hidden`): the final-normed
  // hidden state (V3), or V4's un-collapsed residual streams (hc x hidden, as llama.cpp's h_nextn).
  int mtp_hidden() const { return is_dsv4() ? dsv4.hc * hidden : hidden; }
  int kv_k_elems() const { return mla ? kv_lora_rank + qk_rope_dim : n_kv_heads * head_dim; }
  int kv_v_elems() const { return mla ? 0 : n_kv_heads * head_dim; }
  // The paged KV cache's shape for this model's decoder layers.
  KvLayout kv_layout() const {
    if (is_dsv4()) return Dsv4Layout();
    KvLayout k;
    k.num_layers = n_layers;
    k.k_elems = kv_k_elems();
    k.v_elems = kv_v_elems();
    return k;
  }

  // Each cache layer's window (0: full attention), what the hybrid KV cache groups layers by.
  std::vector<int> kv_layer_windows(bool dsv4_mtp = false) const;

  std::string Summary() const;
  KvLayout Dsv4Layout(bool mtp = false) const;  // kv_layout() of a DeepSeek-V4 model (mtp: Dsv4KvLayers')
};

// Sizes positive and in range, heads divisible, expert settings coherent; `file` names the source in errors.
Status ValidateConfig(const ModelConfig& c, const std::string& file);

// llama3 rope_scaling -> per-frequency divisors, as the HF implementation defines them.
std::vector<float> Llama3FreqFactors(int rot_dim, double theta, double factor, double low_freq_factor,
                                     double high_freq_factor, double original_max_pos);

}  // namespace deepinfer
