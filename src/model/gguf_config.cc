// GGUF metadata -> ModelConfig: the keys every family shares, then the family's own (model/arch/).
#include "format/gguf.h"
#include "model/arch/arch.h"
#include "model/model.h"

namespace deepinfer {

StatusOr<ModelConfig> ParseGgufConfig(const GgufFile& g) {
  const std::string& path = g.path();
  DI_ASSIGN_OR_RETURN(std::string arch_name, g.GetString("general.architecture"));
  const GgufConfigReader r(g, arch_name, path);
  DI_ASSIGN_OR_RETURN(int64_t n_expert, r.Int("expert_count", 0, false));
  const ArchSpec* spec = FindArchByGguf(arch_name, n_expert > 0);
  if (!spec)
    return Unimplemented(path + ": unknown architecture '" + arch_name + "' (supported: " + SupportedArchNames(true) + ")");
  ModelConfig c;
  c.arch = spec->arch;
  DI_ASSIGN_OR_RETURN(int64_t hidden, r.Int("embedding_length", 0, true));
  DI_ASSIGN_OR_RETURN(int64_t layers, r.Int("block_count", 0, true));
  // block_count includes MTP ("nextn") blocks, which follow the decoder layers.
  DI_ASSIGN_OR_RETURN(int64_t nextn, r.Int("nextn_predict_layers", 0, false));
  if (nextn < 0 || nextn >= layers) return InvalidArgument(path + ": nextn_predict_layers out of range");
  layers -= nextn;
  c.n_mtp = static_cast<int>(nextn);
  DI_ASSIGN_OR_RETURN(int64_t ffn, r.Int("feed_forward_length", 0, n_expert == 0));
  if (n_expert > 0) {
    DI_ASSIGN_OR_RETURN(int64_t used, r.Int("expert_used_count", 0, true));
    // Absent for Mixtral, whose experts are feed_forward_length wide (its family reads it so).
    DI_ASSIGN_OR_RETURN(int64_t eff, r.Int("expert_feed_forward_length", 0, false));
    if (used <= 0 || used > n_expert || eff < 0 || eff > (int64_t{1} << 30) || n_expert > 4096)
      return InvalidArgument(path + ": expert metadata out of range");
    c.n_experts = static_cast<int>(n_expert);
    c.n_experts_used = static_cast<int>(used);
    c.moe_intermediate = static_cast<int>(eff);
    if (ffn <= 0) ffn = eff;  // no dense layers
    c.norm_topk_prob = true;  // llama.cpp renormalizes unless the family says otherwise (deepseek2, qwen2moe)
  }
  DI_ASSIGN_OR_RETURN(int64_t heads, r.Int("attention.head_count", 0, true));
  DI_ASSIGN_OR_RETURN(int64_t kv_heads, r.Int("attention.head_count_kv", heads, false));
  DI_ASSIGN_OR_RETURN(int64_t ctx, r.Int("context_length", 2048, false));
  DI_ASSIGN_OR_RETURN(int64_t head_dim, r.Int("attention.key_length", heads > 0 ? hidden / heads : 0, false));
  for (int64_t v : {hidden, layers, ffn, heads, kv_heads, head_dim, ctx})
    if (v <= 0 || v > (int64_t{1} << 30)) return InvalidArgument(path + ": model dimensions in the metadata are out of range");
  c.hidden = static_cast<int>(hidden);
  c.n_layers = static_cast<int>(layers);
  c.intermediate = static_cast<int>(ffn);
  c.n_heads = static_cast<int>(heads);
  c.n_kv_heads = static_cast<int>(kv_heads);
  c.max_ctx = static_cast<int>(std::min<int64_t>(ctx, 1 << 22));
  c.head_dim = static_cast<int>(head_dim);
  if (auto v = r.Float("attention.layer_norm_rms_epsilon"); v.ok()) c.rms_eps = static_cast<float>(*v);
  if (auto v = r.Float("rope.freq_base"); v.ok()) c.rope_theta = *v;
  c.rope_style = spec->gguf_rope;
  if (auto type = r.String("rope.scaling.type"); type.ok() && *type == "linear") {
    for (const char* key : {"rope.scaling.factor", "rope.scale_linear"})
      if (auto f = r.Float(key); f.ok()) {
        if (*f != 0) c.rope_linear_factor = *f;
        break;
      }
  }
  // A window on every layer (what `convert` writes for Mistral 7B v0.1; llama.cpp's llama ignores the key and
  // attends fully, the same within the window). Families with a pattern read theirs in gguf_config.
  DI_ASSIGN_OR_RETURN(int64_t window, r.Int("attention.sliding_window", 0, false));
  if (window < 0 || window > (int64_t{1} << 30)) return InvalidArgument(path + ": attention.sliding_window out of range");
  c.sliding_window = static_cast<int>(window);
  if (spec->gguf_config) DI_RETURN_IF_ERROR(spec->gguf_config(r, &c));
  c.qk_norm = spec->qk_norm;
  c.attn_bias = spec->attn_bias;
  const std::string embd_name = TensorName(*spec, WeightFormat::kGguf, TensorId::kTokEmbd);
  const TensorView* embd = g.FindTensor(embd_name);
  if (!embd) return NotFound(path + ": missing tensor '" + embd_name + "'");
  if (embd->shape.size() != 2 || embd->shape.front() > (int64_t{1} << 30))
    return InvalidArgument(path + ": tensor '" + embd_name + "' must be 2-D {vocab, hidden}");
  c.vocab_size = static_cast<int>(embd->shape.front());
  c.tie_embeddings = g.FindTensor(TensorName(*spec, WeightFormat::kGguf, TensorId::kOutput)) == nullptr;
  const std::string freqs_name = TensorName(*spec, WeightFormat::kGguf, TensorId::kRopeFreqs);
  if (const TensorView* rf = g.FindTensor(freqs_name)) {
    if (rf->dtype != DType::kF32 || rf->numel() != c.head_dim / 2)
      return InvalidArgument(path + ": tensor '" + freqs_name + "' must be f32 with head_dim/2 entries");
    const float* p = static_cast<const float*>(rf->data);
    c.rope_freq_factors.assign(p, p + rf->numel());
  }
  DI_RETURN_IF_ERROR(ValidateConfig(c, path));
  return c;
}

}  // namespace deepinfer
