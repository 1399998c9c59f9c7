// A model family, declared once: the names it goes by in Hugging Face configs and GGUF files, the rules that
// set its configuration (the shared fields are read by model/hf_config.cc and model/gguf_config.cc; a family
// adds its own), its tensors (model/arch/tensor_decl.h: which, their shapes and spellings, how they shard), and
// what `make-tiny` writes for it. Each family lives in one file of
// model/arch/ and is listed once in registry.cc; nothing else in the tree switches on the family to find names
// or rules. How to add one: docs/architecture.md ("Adding a model family", worked on Mixtral).
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "deepinfer/status.h"
#include "kernels/ops.h"
#include "model/arch/tensor_names.h"
#include "model/config.h"
#include "model/models/forwards.h"

namespace deepinfer {

class GgufFile;
class GgufWriter;
class TensorList;
struct LayerWeights;
struct Model;
struct MtpWeights;
struct TinySpec;

// Typed reads of an HF config.json whose errors name the file and the key.
class HfConfigReader {
 public:
  HfConfigReader(const nlohmann::json& j, const std::string& path) : j_(j), path_(path) {}
  // def < 0: required (NotFound when missing or null); InvalidArgument when not an integer.
  StatusOr<int64_t> Int(const char* key, int64_t def) const;
  StatusOr<double> Number(const char* key, double def) const;
  // Lenient reads (wrong types give the default), as the families' optional settings have always been read.
  int64_t IntOr(const char* key, int64_t def) const;
  bool BoolOr(const char* key, bool def) const;
  std::string StringOr(const char* key, const std::string& def) const;
  std::vector<int> IntList(const char* key) const;
  const nlohmann::json& json() const { return j_; }
  Status Invalid(const std::string& what) const { return InvalidArgument(path_ + ": " + what); }
  const std::string& path() const { return path_; }

 private:
  const nlohmann::json& j_;
  const std::string& path_;
};

// Typed reads of GGUF metadata under the file's architecture prefix ("<arch>.<key>").
class GgufConfigReader {
 public:
  GgufConfigReader(const GgufFile& g, const std::string& arch, const std::string& path) : g_(g), arch_(arch), path_(path) {}
  // Missing: def, or NotFound when required; a value of the wrong type is an error either way.
  StatusOr<int64_t> Int(const char* key, int64_t def, bool required) const;
  bool Has(const char* key) const;
  StatusOr<double> Float(const char* key) const;  // NotFound when missing
  StatusOr<std::string> String(const char* key) const;
  // A number or an array of numbers (NotFound when missing).
  StatusOr<std::vector<double>> Numbers(const char* key) const;
  // A boolean stored as bool or integer; def when missing.
  bool Bool(const char* key, bool def) const;
  // rope.scaling of type yarn: its factor and original context into *y (true), false when the type is missing or
  // something else (the family refuses what it does not run); out-of-range values are an error.
  StatusOr<bool> Yarn(YarnParams* y) const;
  const GgufFile& file() const { return g_; }
  Status Invalid(const std::string& what) const { return InvalidArgument(path_ + ": " + what); }
  const std::string& path() const { return path_; }

 private:
  const GgufFile& g_;
  const std::string& arch_;
  const std::string& path_;
};

struct ArchSpec {
  Arch arch;
  const char* name;                   // deepinfer's name (make-tiny --arch, logs)
  std::vector<std::string> hf_names;  // config.json model_type values and architectures[] classes it accepts
  const char* hf_class;               // the architectures[] entry make-tiny writes
  const char* gguf_arch;              // general.architecture convert and make-tiny write (and read)
  // GGUF files of another family's architecture that are this family when they have routed experts (Mixtral
  // is GGUF "llama" with expert_count).
  const char* gguf_arch_with_experts = nullptr;
  // Family rules, each written once.
  QkNorm qk_norm = QkNorm::kNone;  // RMSNorm of q and k before RoPE (config.h)
  bool attn_bias = false;  // q/k/v projection biases
  bool mla = false;        // multi-head latent attention (else GQA)
  bool moe = false;        // routed experts (make-tiny writes MoE layers)
  bool adds_bos = false;   // the family's tokenizer prepends BOS (make-tiny's vocabulary)
  bool shared_expert_gate = false;  // MoE layers add one shared expert scaled by a sigmoid gate (make-tiny)
  // HF checkpoints store RMSNorm weights as offsets from this (Gemma: x * (1 + w), offset 1). GGUF stores the
  // whole weight (llama.cpp's converter adds the offset in f32); the loader adds it to what it reads from HF, and
  // make-tiny writes HF the weight minus it.
  float hf_norm_offset = 0.f;
  // Why the family's HF weights cannot be read yet (null: they can); its GGUF files still load.
  const char* hf_weights_unsupported = nullptr;
  // Where HF checkpoints keep a decoder layer's tensors ("<prefix>{L}.") and, where the family stores its MTP
  // modules apart, module k's ("<hf_mtp_prefix>{k}."; null: as layer n_layers + k under hf_layer_prefix).
  const char* hf_layer_prefix = "model.layers.";
  const char* hf_mtp_prefix = nullptr;
  // DeepSeek-V4's checkpoints: an FP8 (e4m3) `<base>.weight` has its 128x128 block scales in `<base>.scale` as
  // E8M0 exponent bytes (2^(b - 127); V3's are f32 multipliers in `<name>_scale_inv`), and a routed expert may be
  // MXFP4: `<base>.weight` U8/I8 [rows, cols / 2] (element 2i in the low nibble) with `<base>.scale` E8M0
  // [rows, cols / 32], repacked into ggml's block_mxfp4 bit for bit (llama.cpp's repack_mxfp4_blocks).
  bool hf_e8m0_scales = false;
  // make-tiny draws the family's weights under the shared table's HF spellings (SharedTensorName) rather than its
  // own: DeepSeek-V4's GGUFs were made before its HF names existed, and must not change.
  bool tiny_seeds_by_shared_names = false;
  // gpt-oss: HF stores each layer's routed experts fused, as OpenAI's checkpoints do: gate and up in one
  // gate_up_proj with their rows interleaved (gate even, up odd; its bias likewise), down_proj alone, either as
  // MXFP4 `<name>_blocks` / `<name>_scales` (U8, rows {out, in}, HF's nibble order) or as float tensors in x @ W
  // layout [E, in, out]. The families' HF names of kFfnGateExps / kFfnUpExps / kFfnDownExps (and their biases)
  // name the fused tensors. The loader repacks them into per-expert {out, in} views (MXFP4 as ggml's
  // block_mxfp4, bit for bit what llama.cpp's converter writes); make-tiny writes them so.
  bool hf_oai_experts = false;
  // transformers' fused MoE experts (DeepseekV4Experts): kFfnGateExps and kFfnUpExps name one gate_up_proj
  // [E, 2F, D] (nn.Linear layout, each expert's F gate rows then its F up rows: MergeModulelist + Concatenate(dim=1)
  // of w1, w3), kFfnDownExps one down_proj [E, D, F]; float types only. The loader views each expert in place.
  bool hf_fused_experts = false;
  // The name of this spelling of the family's HF checkpoints (make-tiny --hf-layout; null: the family has one)
  // and the other spelling the loader and `convert` also read, detected by the tensor names a directory holds
  // (DeepSeek-V4: DeepSeek's own layout, and transformers' renamed one). The other spelling is a whole ArchSpec:
  // the family's, with its own HF prefixes, tensor_names and expert packing (model/arch/deepseek_v4.cc).
  const char* hf_layout = nullptr;
  const ArchSpec& (*hf_alt_layout)() = nullptr;
  // config.json defaults of the family's HF config class (a JSON object), for keys a checkpoint leaves out.
  const char* hf_defaults = nullptr;
  // RoPE as stored in GGUF files. kAdjacentPairs for llama-style families: llama.cpp's converter permutes the
  // q/k rows of HF checkpoints (rotate-half) into adjacent pairs, and `convert`/`make-tiny` do the same.
  RopeStyle gguf_rope = RopeStyle::kHalves;
  RopeStyle hf_rope = RopeStyle::kHalves;
  bool gguf_permutes_qk() const { return gguf_rope == RopeStyle::kAdjacentPairs && hf_rope == RopeStyle::kHalves; }
  // The family's own configuration fields, after the shared ones are read (null: none).
  Status (*hf_config)(const HfConfigReader& j, ModelConfig* c) = nullptr;
  Status (*gguf_config)(const GgufConfigReader& g, ModelConfig* c) = nullptr;
  // `convert`: why this configuration has no faithful GGUF form (Ok: it has one), and its family metadata.
  Status (*gguf_convertible)(const ModelConfig& c) = nullptr;
  void (*gguf_metadata)(const ModelConfig& c, const std::string& prefix, GgufWriter& w) = nullptr;
  // `make-tiny`: the family's own shape rules (applied to the spec first), its config.json fields and GGUF
  // metadata.
  void (*tiny_adjust)(TinySpec* s) = nullptr;
  void (*tiny_hf_config)(const TinySpec& s, nlohmann::json* cfg) = nullptr;
  void (*tiny_gguf_metadata)(const TinySpec& s, const std::string& prefix, GgufWriter& w) = nullptr;
  std::vector<TensorNameOverride> tensor_names = {};  // spellings that differ from the shared table
  // The family's forward (model/models/<family>.cc); nullptr: LlamaForward, the pre-norm decoder the families
  // built like Llama share.
  FamilyForward forward = nullptr;
  // The forward of an MTP module (model/models/); nullptr: DeepseekMtpForward, V3's pre-norm module.
  FamilyMtpForward mtp_forward = nullptr;
  // The tensors of decoder layer `layer` in file order, landing in `w` (shared blocks: model/arch/blocks.h). The
  // loader, `convert`, `make-tiny` and the sharder all read this one list.
  void (*layer_tensors)(const ModelConfig& c, int layer, LayerWeights& w, TensorList& out) = nullptr;
  // Families with multi-token prediction: an MTP module's own tensors (its decoder layer is layer_tensors' of
  // layer n_layers + k), landing in `w`; those it may share with the model fall back to m's.
  void (*mtp_tensors)(const ModelConfig& c, MtpWeights& w, const Model& m, TensorList& out) = nullptr;
};

// The registry (registry.cc).
const ArchSpec& GetArch(Arch arch);
const std::vector<const ArchSpec*>& AllArchs();
// By config.json model_type or architectures[] class (nullptr: unknown).
const ArchSpec* FindArchByHfName(const std::string& name);
// By general.architecture; has_experts picks families that share another's GGUF architecture (nullptr: unknown).
const ArchSpec* FindArchByGguf(const std::string& gguf_arch, bool has_experts);
// By deepinfer's own name or any HF/GGUF name (make-tiny --arch).
const ArchSpec* FindArchByAnyName(const std::string& name);
// The family's HF spelling named `layout` (ArchSpec::hf_layout): its own or its hf_alt_layout (nullptr: neither).
const ArchSpec* FindHfLayout(const ArchSpec& family, const std::string& layout);
// "llama, mistral, ..." for error messages.
std::string SupportedArchNames(bool gguf);

// Each family's declaration (one file each in model/arch/).
const ArchSpec& LlamaArch();
const ArchSpec& MistralArch();
const ArchSpec& Qwen2Arch();
const ArchSpec& Qwen3Arch();
const ArchSpec& Qwen3MoeArch();
const ArchSpec& DeepseekArch();
const ArchSpec& MixtralArch();
const ArchSpec& Qwen2MoeArch();
const ArchSpec& Olmo2Arch();
const ArchSpec& SmolLM3Arch();
const ArchSpec& Gemma3Arch();
const ArchSpec& GptOssArch();
const ArchSpec& DeepseekV4Arch();

// Which layers of `layers` are windowed when every period-th one is not (llama.cpp's set_swa_pattern: layer l is
// windowed iff l % period < period - 1; period 0: all). Gemma 3 (period 6) and gpt-oss (period 2: even layers).
std::vector<bool> SwaLayerPattern(int layers, int period);
// HF's `layer_types` (one "sliding_attention" / "full_attention" per layer) into c->swa_layers; false when the
// config has none.
StatusOr<bool> ReadHfLayerTypes(const HfConfigReader& j, ModelConfig* c);

// Shared by the MoE families: GGUF expert metadata (expert_count, expert_used_count, expert_feed_forward_length)
// written for convert and make-tiny.
void WriteGgufExpertCounts(const std::string& prefix, int experts, int used, int expert_ffn, GgufWriter& w);
// Shared by the Qwen MoE families (qwen3_moe.cc): num_experts, num_experts_per_tok, moe_intermediate_size,
// decoder_sparse_step, mlp_only_layers and norm_topk_prob (default given) from config.json; and whether llama.cpp
// can run the configuration (every layer routed, its fixed renormalization rule).
Status ReadQwenMoeHfConfig(const HfConfigReader& j, bool norm_topk_default, ModelConfig* c);
Status QwenMoeGgufConvertible(const ModelConfig& c, bool norm_topk);

}  // namespace deepinfer
