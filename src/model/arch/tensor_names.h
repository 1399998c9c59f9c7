// Every weight tensor deepinfer knows, by role, and how each file format spells it. This is the one place tensor
// names are written: the loader, `convert` and `make-tiny` all ask here (llama.cpp's LLM_TENSOR_NAMES plays the
// same part). Families that spell a tensor differently (Mixtral's block_sparse_moe.*, Qwen2-MoE's singular
// shared_expert.*) declare overrides in their own file under model/arch/.
#pragma once
#include <string>
#include <vector>

namespace deepinfer {

enum class TensorId {
  // Model-level.
  kTokEmbd, kOutputNorm, kOutput, kRopeFreqs,
  // DeepSeek-V4: the head's collapse of the residual streams (hyper-connections).
  kOutputHcFn, kOutputHcBase, kOutputHcScale,
  // Attention (per layer). GQA:
  kAttnNorm, kAttnQ, kAttnK, kAttnV, kAttnOut, kAttnQBias, kAttnKBias, kAttnVBias, kAttnQNorm, kAttnKNorm,
  // Norms of a block's output before it joins the residual (OLMo 2, Gemma 3).
  kAttnPostNorm,
  // gpt-oss: the output projection's bias and the per-head softmax sinks.
  kAttnOutBias, kAttnSinks,
  // MLA (DeepSeek): low-rank q, the shared latent + rope key, its up-projection (whole, or split into k_b / v_b).
  kAttnQA, kAttnQANorm, kAttnQB, kAttnKvA, kAttnKvANorm, kAttnKvB, kAttnKB, kAttnVB,
  // MLP (per layer): dense, router, routed experts (GGUF stacks them; HF has one tensor per expert), shared
  // experts and Qwen2-MoE's sigmoid gate on the shared expert.
  kFfnNorm, kFfnGate, kFfnUp, kFfnDown, kFfnRouter, kFfnExpProbsBias, kFfnGateExps, kFfnUpExps, kFfnDownExps,
  kFfnGateShexp, kFfnUpShexp, kFfnDownShexp, kFfnShexpGate, kFfnPostNorm,
  // gpt-oss: the router's bias and the routed experts' biases ({E, n} each).
  kFfnRouterBias, kFfnGateExpsBias, kFfnUpExpsBias, kFfnDownExpsBias,
  // DeepSeek-V3 MTP module (stored as layer n_layers + k).
  kMtpENorm, kMtpHNorm, kMtpEhProj, kMtpEmbd, kMtpHeadNorm, kMtpHead,
  // DeepSeek-V4: each sublayer's hyper-connection mixing, the K=V latent, the grouped low-rank output, the KV
  // compressor (kv and score projections, per-slot score bias, norm), the lightning indexer (head weights, query,
  // its own compressor) and hash routing's token -> experts table.
  kHcAttnFn, kHcAttnBase, kHcAttnScale, kHcFfnFn, kHcFfnBase, kHcFfnScale,
  kAttnKv, kAttnOutA, kAttnOutB,
  kAttnCompKv, kAttnCompGate, kAttnCompApe, kAttnCompNorm,
  kIdxProj, kIdxQB, kIdxCompKv, kIdxCompGate, kIdxCompApe, kIdxCompNorm,
  kFfnTid2Eid,
  // DeepSeek-V4's MTP block in DeepSeek's checkpoints: eh_proj's two input halves as two tensors (e_proj for the
  // embedding, h_proj for the hidden streams) and the block's own collapse of the streams (GGUF has neither: one
  // eh_proj, and the model's output_hc_* serve the block).
  kMtpEProj, kMtpHProj, kMtpHcFn, kMtpHcBase, kMtpHcScale,
  kCount
};

// DeepSeek-V4: an MTP block's own head collapse (kMtpHc*) as the model's (kOutputHc*), the names llama.cpp's MTP
// GGUF stores it under; kCount for any other id.
inline TensorId MtpHcAsRoot(TensorId id) {
  switch (id) {
    case TensorId::kMtpHcFn: return TensorId::kOutputHcFn;
    case TensorId::kMtpHcBase: return TensorId::kOutputHcBase;
    case TensorId::kMtpHcScale: return TensorId::kOutputHcScale;
    default: return TensorId::kCount;
  }
}

enum class WeightFormat { kGguf, kHf };

// A family's spelling of one tensor in one format, replacing the shared table's. Patterns are relative to the
// layer prefix ("blk.{L}." / the family's HF prefix, "model.layers.{L}." unless ArchSpec says otherwise) for
// per-layer tensors; "{e}" stands for the expert index. An empty pattern: the format does not store the tensor
// (the loader takes its stand-in, make-tiny and convert write nothing).
struct TensorNameOverride {
  TensorId id;
  WeightFormat format;
  const char* pattern;
};

struct ArchSpec;

// The full name of tensor `id` of layer `layer` (ignored for model-level tensors) and expert `expert` (HF
// per-expert tensors only) as `arch` spells it in `format`; `mtp` >= 0: the layer is that MTP module's (HF names
// it under ArchSpec::hf_mtp_prefix where the family has one). Empty: the format does not store it.
std::string TensorName(const ArchSpec& arch, WeightFormat format, TensorId id, int layer = -1, int expert = -1, int mtp = -1);
// The shared table's spelling with the default prefixes, whatever the family overrides (make-tiny draws the
// weights of families with ArchSpec::tiny_seeds_by_shared_names under these names).
std::string SharedTensorName(WeightFormat format, TensorId id, int layer = -1, int expert = -1);
// True for tensors that live inside a layer.
bool IsLayerTensor(TensorId id);

}  // namespace deepinfer
