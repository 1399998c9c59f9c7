// Tensor declarations the families share (model/arch/tensor_decl.h): the embedding and head, GQA and MLA
// attention, the dense and routed MLPs, and a whole GQA decoder layer. A family's file composes its layer from
// these (ArchSpec::layer_tensors), so its tensor list reads there; what the configuration switches on (biases,
// q/k norms, low-rank q, which layers route, shared experts) is decided here, once, for every family.
#pragma once

namespace deepinfer {

struct ModelConfig;
struct Model;
struct LayerWeights;
struct GqaWeights;
struct MlaWeights;
struct MtpWeights;
class TensorList;

// Model-level: the token embedding (first in the files `convert` and `make-tiny` write) and the final norm and
// head (last); an untied checkpoint without a head of its own ties it.
void EmbeddingTensors(const ModelConfig& c, Model& m, TensorList& t);
void HeadTensors(const ModelConfig& c, Model& m, TensorList& t);
// DeepSeek-V4's collapse of its residual streams before the final norm (model/arch/deepseek_v4.cc).
void Dsv4HeadTensors(const ModelConfig& c, Model& m, TensorList& t);

// Grouped-query attention: q, k, v (q/k rows in adjacent-pair order in the GGUFs of llama-style RoPE families),
// their biases (required when the configuration has them, else honoured when present), per-head q/k norms, output.
void GqaTensors(const ModelConfig& c, GqaWeights& w, TensorList& t);
// Multi-head latent attention: low-rank q (or a plain q), the latent and rope-key projection and its norm, the
// key/value up-projection in its forms (kv_b; GGUF's split k_b / v_b), output.
void MlaTensors(const ModelConfig& c, MlaWeights& w, TensorList& t);
// The MLP of layer `layer`: a dense SwiGLU, or (config.IsMoeLayer) the router, its selection bias (DeepSeek's
// noaux_tc), the routed experts, the shared experts and Qwen2-MoE's gate on them.
void FfnTensors(const ModelConfig& c, int layer, LayerWeights& w, TensorList& t);

// Decoder layers: attn_norm, the attention, ffn_norm, the MLP. GQA: the layer of every GQA family; MLA: DeepSeek's.
void GqaLayerTensors(const ModelConfig& c, int layer, LayerWeights& w, TensorList& t);
void MlaLayerTensors(const ModelConfig& c, int layer, LayerWeights& w, TensorList& t);

// A DeepSeek MTP module's own tensors (V3 and V4), besides its decoder layer: the norms of the next token's
// embedding and of the model's hidden state, their joint projection, and the module's own embedding, head norm
// and head, which a checkpoint may leave to the model's (split by vocabulary rows like those).
void MtpModuleTensors(const ModelConfig& c, MtpWeights& w, const Model& m, TensorList& t);

}  // namespace deepinfer
