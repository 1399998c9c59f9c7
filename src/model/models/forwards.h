// Each family's forward (one file per architecture under model/models/, composed from ForwardPass's builders)
// and the blocks families share. A family's ArchSpec (model/arch/) names its forward; the families built like
// Llama (pre-norm residual blocks: Mistral, Qwen2/3 and their MoE variants, Mixtral, DeepSeek-V2/V3, whose
// attention kind and MLP kind come from their weights) use LlamaForward.
#pragma once
#include "deepinfer/status.h"

namespace deepinfer {

class ForwardPass;
class PagedKvCache;
struct LayerWeights;

// A family's forward over a planned batch: from the token embeddings to the last layer's residual stream in
// f.x() (the final norm and the vocabulary projection are shared: Transformer does them).
using FamilyForward = Status (*)(ForwardPass& f, PagedKvCache& kv);

Status LlamaForward(ForwardPass& f, PagedKvCache& kv);
Status Olmo2Forward(ForwardPass& f, PagedKvCache& kv);    // post-norm layers (models/olmo2.cc)
Status SmolLM3Forward(ForwardPass& f, PagedKvCache& kv);  // NoPE layers (models/smollm3.cc)
Status Gemma3Forward(ForwardPass& f, PagedKvCache& kv);   // sandwich norms, scaled embeddings (models/gemma3.cc)
Status DeepseekV4Forward(ForwardPass& f, PagedKvCache& kv);  // hyper-connections, compressed KV (models/deepseek_v4.cc)

// The pre-norm residual layer over the whole batch:  x += attention(norm(x));  x += mlp(norm(x)).
// kv_layer: the layer's index in kv; moe_layer: the main layer's index for its live expert placement (-1: an
// MTP module's layer); rope false: attention without RoPE (a NoPE layer).
Status PreNormLayer(ForwardPass& f, const LayerWeights& L, int kv_layer, PagedKvCache& kv, int moe_layer, bool rope = true);
// The model's main layers as pre-norm layers under two-batch overlap (two_batch_overlap.cc).
Status PreNormLayersOverlapped(ForwardPass& f, PagedKvCache& kv);

}  // namespace deepinfer
