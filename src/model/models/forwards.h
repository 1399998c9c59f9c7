// Each family's forward (one file per architecture under model/models/, composed from ForwardPass's builders)
// and the blocks families share. A family's ArchSpec (model/arch/) names its forward; the families built like
// Llama (pre-norm residual blocks: Mistral, Qwen2/3 and their MoE variants, Mixtral, DeepSeek-V2/V3, whose
// attention kind and MLP kind come from their weights) use LlamaForward.
#pragma once

#include <functional>

#include "deepinfer/status.h"

namespace deepinfer {

class ForwardPass;
class PagedKvCache;
struct LayerWeights;
struct MtpWeights;
struct Rows;

// A family's forward over a planned batch: from the token embeddings to the last layer's residual stream in
// f.x() (the final norm and the vocabulary projection are shared: Transformer does them).
using FamilyForward = Status (*)(ForwardPass& f, PagedKvCache& kv);

// A family's MTP module k over a planned batch (Transformer::ForwardMtp): row r pairs the batch's token with
// hidden[global row r] (ModelConfig::mtp_hidden() floats: the main model's state one position earlier); leaves
// the rows to project in f.x() (the head norm and head are shared: Transformer does them) and, when out_hidden is
// given, writes each row's state for a chained next step (mtp_hidden() floats per row). kv: the MTP cache (layer
// k is the module's).
using FamilyMtpForward = Status (*)(ForwardPass& f, const MtpWeights& P, int k, const float* hidden, PagedKvCache& kv,
                                    float* out_hidden);

Status LlamaForward(ForwardPass& f, PagedKvCache& kv);
Status Olmo2Forward(ForwardPass& f, PagedKvCache& kv);    // post-norm layers (models/olmo2.cc)
Status SmolLM3Forward(ForwardPass& f, PagedKvCache& kv);  // NoPE layers (models/smollm3.cc)
Status Gemma3Forward(ForwardPass& f, PagedKvCache& kv);   // sandwich norms, scaled embeddings (models/gemma3.cc)
Status DeepseekV4Forward(ForwardPass& f, PagedKvCache& kv);  // hyper-connections, compressed KV (models/deepseek_v4.cc)

// MTP modules: V3's (x = eh_proj [enorm(e), hnorm(h)], one pre-norm layer; models/deepseek_mtp.cc) and V4's (the
// same per residual stream, one window-only V4 layer, the head's stream collapse; models/deepseek_v4.cc).
Status DeepseekMtpForward(ForwardPass& f, const MtpWeights& P, int k, const float* hidden, PagedKvCache& kv, float* out_hidden);
Status DeepseekV4MtpForward(ForwardPass& f, const MtpWeights& P, int k, const float* hidden, PagedKvCache& kv, float* out_hidden);

// The pre-norm residual layer over the whole batch:  x += attention(norm(x));  x += mlp(norm(x)).
// kv_layer: the layer's index in kv; moe_layer: the main layer's index for its live expert placement (-1: an
// MTP module's layer); rope false: attention without RoPE (a NoPE layer).
Status PreNormLayer(ForwardPass& f, const LayerWeights& L, int kv_layer, PagedKvCache& kv, int moe_layer, bool rope = true);
// Two-batch overlap's schedule over the main layers (two_batch_overlap.cc), with a family's stages for one
// micro-batch: its layer up to the MoE dispatch (ending in ForwardPass::MoeBegin), the end of its MoE block
// (ForwardPass::MoeEnd and the residual), and a layer without an exchange, run on the whole batch.
struct OverlapStages {
  std::function<Status(const LayerWeights& L, int layer, int micro, Rows rows)> attention_and_dispatch;
  std::function<Status(int micro, Rows rows)> finish;
  std::function<Status(const LayerWeights& L, int layer)> whole_layer;
};
Status RunLayersOverlapped(ForwardPass& f, const OverlapStages& stages);
// The model's main layers as pre-norm layers under two-batch overlap.
Status PreNormLayersOverlapped(ForwardPass& f, PagedKvCache& kv);

}  // namespace deepinfer
