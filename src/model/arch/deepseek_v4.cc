// DeepSeek-V4 (GGUF `deepseek4`, HF DeepseekV4ForCausalLM / model_type deepseek_v4). Its own forward
// (model/models/deepseek_v4.cc) over its own attention (model/layers/attention_dsv4.h) and hyper-connections
// (model/layers/hyper_connection.h); the MoE layer is the shared one with sqrt-softplus scoring, hash routing on
// the first layers and a clamped SwiGLU. docs/design/deepseek_v4.md has the specification this follows
// (../shared/research/deepseek_v4.md, written from llama.cpp's deepseek4 and transformers' deepseek_v4).
//
// GGUF files load (what llama.cpp runs), with their MTP block (models/deepseek_v4.cc, DeepseekV4MtpForward), and
// so do DeepSeek's own checkpoints (the names and packing llama.cpp's converter reads, conversion/deepseek.py
// DeepseekV4Model): embed / layers.{L}.* / norm / head / hc_head_*, mtp.0.*, FP8 linear weights with E8M0 128x128
// block scales in `<base>.scale`, MXFP4 routed experts packed per expert (ArchSpec::hf_e8m0_scales). So does
// transformers' renamed layout of them (model.layers.{L}.self_attn.q_a_proj, fused mlp.experts.gate_up_proj, its
// config keys): DeepseekV4TransformersLayout() below, the family's other HF spelling (ArchSpec::hf_alt_layout).
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "base/logging.h"
#include "format/gguf.h"
#include "model/arch/arch.h"
#include "model/arch/blocks.h"
#include "model/arch/model_tensors.h"
#include "model/arch/tensor_list.h"
#include "model/make_tiny.h"
#include "model/model.h"

namespace deepinfer {
namespace {

constexpr int kGatingSqrtSoftplus = 4;  // llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SQRT_SOFTPLUS

// The tiny model's settings (../shared/research/deepseek_v4.md, section 8): every layer kind, hash and biased
// routing, a window of 16, indexer top-k 4, 4 streams x 20 Sinkhorn iterations, YaRN.
constexpr int kTinyRatios[] = {0, 0, 4, 128, 4, 128};
// 32 indexer heads, not the specification's 4: a block's score is a sum of ReLUs, exactly 0 when every head's
// dot product is negative (1 in 16 blocks with 4 heads), and such ties at the top-k boundary are broken
// differently by llama.cpp's std::partial_sort; with 32 heads an exact 0 is a 1-in-4e9 event.
constexpr int kTinyIndexHeads = 32;

// Every layer's ratio, then the MTP block's (window only) when make-tiny adds one.
std::vector<int32_t> TinyRatios(const TinySpec& s) {
  std::vector<int32_t> r(std::begin(kTinyRatios), std::end(kTinyRatios));
  if (s.mtp) r.push_back(0);
  return r;
}

// What both formats share once the fields are read: the rules and the checks llama.cpp's loader makes.
Status Finish(ModelConfig* c, const std::string& path) {
  Dsv4Params& v = c->dsv4;
  auto bad = [&](const std::string& what) { return InvalidArgument(path + ": deepseek_v4: " + what); };
  if (v.hc != 4) return Unimplemented(path + ": deepseek_v4 with " + std::to_string(v.hc) + " hyper-connection streams (only 4, as llama.cpp)");
  if (v.hc_iters <= 0 || v.hc_iters > 1000 || !(v.hc_eps >= 0)) return bad("hyper-connection Sinkhorn iterations / epsilon out of range");
  if (c->n_kv_heads != 1) return bad("head_count_kv must be 1 (one K=V latent)");
  if (c->qk_rope_dim <= 0 || c->qk_rope_dim % 2 || c->qk_rope_dim > c->head_dim) return bad("rope dimension must be even and at most the head size");
  if (v.o_groups <= 0 || c->n_heads % v.o_groups || v.o_lora_rank <= 0) return bad("output groups must divide the heads, with a positive output rank");
  if (c->q_lora_rank <= 0) return bad("q_lora_rank must be positive");
  if (c->sliding_window <= 0) return bad("sliding_window must be positive");
  // One MTP block at most, window-only and routed by score (llama.cpp's deepseek4 asserts the same).
  if (c->n_mtp > 1) return Unimplemented(path + ": deepseek_v4 with " + std::to_string(c->n_mtp) + " MTP blocks (only 1, as llama.cpp)");
  const int all_layers = c->n_layers + c->n_mtp;
  if (static_cast<int>(v.compress_ratio.size()) < c->n_layers) return bad("compress_ratios has fewer entries than layers");
  // The MTP block's entry may be missing from an HF config that lists the decoder layers only: it is 0.
  v.compress_ratio.resize(static_cast<size_t>(all_layers), 0);
  for (int k = 0; k < c->n_mtp; ++k)
    if (v.compress_ratio[static_cast<size_t>(c->n_layers + k)] != 0)
      return Unimplemented(path + ": deepseek_v4 MTP block with a compressed attention (only ratio 0, as llama.cpp)");
  bool csa = false;
  for (int r : v.compress_ratio) {
    if (r != 0 && r != 4 && r != 128) return Unimplemented(path + ": deepseek_v4 compress ratio " + std::to_string(r) + " (only 0, 4 and 128, as llama.cpp)");
    csa = csa || r == 4;
  }
  if (csa && (v.index_heads <= 0 || v.index_head_dim < c->qk_rope_dim || v.index_head_dim > c->head_dim || v.index_topk <= 0))
    return bad("the indexer needs heads, a head size between the rope dimension and head_dim, and a top-k");
  if (!(v.compress_rope_theta > 0)) return bad("compress_rope_freq_base must be positive");
  if (c->n_experts <= 0 || v.hash_layers < 0 || v.hash_layers > c->n_layers) return bad("experts and hash layers out of range");
  for (auto* limits : {&v.swiglu_limit, &v.swiglu_limit_shared}) {
    if (limits->size() == 1) limits->assign(static_cast<size_t>(all_layers), limits->front());
    if (static_cast<int>(limits->size()) != all_layers) return bad("a SwiGLU clamp array must have one entry per layer (MTP block included)");
  }
  c->first_k_dense = 0;
  c->intermediate = c->moe_intermediate;
  c->shared_ffn = c->moe_intermediate * c->n_shared_experts;
  c->rope_style = RopeStyle::kAdjacentPairs;
  // YaRN: frequencies only (llama.cpp cancels ggml's magnitude scaling; transformers forces it to 1), on the
  // compressed layers only; llama.cpp does not read the betas from the file.
  c->yarn.mscale = 1.f;
  c->yarn.beta_fast = 32;
  c->yarn.beta_slow = 1;
  c->yarn.truncate = true;
  return Status::Ok();
}

// transformers' DeepseekV4Config (configuration_deepseek_v4.py) writes some settings its own way; each reader
// below takes its keys where DeepSeek's own (compress_ratios, num_hash_layers, qk_rope_head_dim, rope_scaling) are
// absent, to the same ModelConfig.

// The rope dimension: qk_rope_head_dim, else head_dim * partial_rotary_factor.
StatusOr<int64_t> TransformersRopeDim(const HfConfigReader& j, int head_dim) {
  const nlohmann::json& js = j.json();
  if (js.contains("qk_rope_head_dim") || !js.contains("partial_rotary_factor")) return j.Int("qk_rope_head_dim", -1);
  DI_ASSIGN_OR_RETURN(double f, j.Number("partial_rotary_factor", 0.0));
  const double dim = f * head_dim;
  if (!(f > 0 && f <= 1) || dim != std::floor(dim)) return j.Invalid("partial_rotary_factor must give a whole rope dimension of head_dim");
  return static_cast<int64_t>(dim);
}

// compress_ratios from layer_types (sliding_attention / compressed_sparse_attention / heavily_compressed_attention)
// and compress_rates (the two compressed kinds' ratios; transformers' defaults 4 and 128).
Status TransformersLayerTypes(const HfConfigReader& j, ModelConfig* c) {
  const nlohmann::json& js = j.json();
  std::map<std::string, int> rate = {{"sliding_attention", 0}, {"compressed_sparse_attention", 4}, {"heavily_compressed_attention", 128}};
  if (js.contains("compress_rates") && !js["compress_rates"].is_null()) {
    if (!js["compress_rates"].is_object()) return j.Invalid("compress_rates must be an object");
    for (const auto& [kind, r] : js["compress_rates"].items()) {
      if (!rate.count(kind) || kind == "sliding_attention" || !r.is_number_integer())
        return j.Invalid("compress_rates: '" + kind + "' is not a compressed layer type with an integer rate");
      rate[kind] = r.get<int>();
    }
  }
  if (!js["layer_types"].is_array()) return j.Invalid("layer_types must be a list");
  for (const auto& t : js["layer_types"]) {
    if (!t.is_string() || !rate.count(t.get<std::string>()))
      return j.Invalid("layer_types entries must be sliding_attention, compressed_sparse_attention or heavily_compressed_attention");
    c->dsv4.compress_ratio.push_back(rate[t.get<std::string>()]);
  }
  return Status::Ok();
}

// num_hash_layers from mlp_layer_types: the leading "hash_moe" layers, the rest "moe".
StatusOr<int> TransformersHashLayers(const HfConfigReader& j) {
  const nlohmann::json& types = j.json()["mlp_layer_types"];
  if (!types.is_array()) return j.Invalid("mlp_layer_types must be a list");
  int hash = 0;
  for (size_t l = 0; l < types.size(); ++l) {
    if (types[l] != "hash_moe" && types[l] != "moe") return j.Invalid("mlp_layer_types entries must be hash_moe or moe");
    if (types[l] == "hash_moe" && hash != static_cast<int>(l))
      return Unimplemented(j.path() + ": deepseek_v4 with hash-routed layers after score-routed ones (only the first layers hash)");
    if (types[l] == "hash_moe") ++hash;
  }
  return hash;
}

// rope_parameters {"main": {rope_theta}, "compress": {rope_theta, rope_type yarn, factor,
// original_max_position_embeddings}}: the bases of the window-only and the compressed layers, and YaRN.
Status TransformersRope(const HfConfigReader& j, ModelConfig* c) {
  const nlohmann::json& js = j.json();
  if (!js.contains("rope_parameters") || !js["rope_parameters"].is_object()) return Status::Ok();
  const nlohmann::json& rp = js["rope_parameters"];
  auto theta = [&](const char* kind, double* out) -> Status {
    if (!rp.contains(kind) || !rp[kind].is_object() || !rp[kind].contains("rope_theta")) return Status::Ok();
    if (!rp[kind]["rope_theta"].is_number() || !(rp[kind]["rope_theta"].get<double>() > 0))
      return j.Invalid(std::string("rope_parameters.") + kind + ".rope_theta must be a positive number");
    *out = rp[kind]["rope_theta"].get<double>();
    return Status::Ok();
  };
  DI_RETURN_IF_ERROR(theta("main", &c->rope_theta));
  DI_RETURN_IF_ERROR(theta("compress", &c->dsv4.compress_rope_theta));
  if (rp.contains("main") && rp["main"].is_object() && rp["main"].value("rope_type", "default") != "default")
    return Unimplemented(j.path() + ": deepseek_v4 with rope_parameters.main of type '" + rp["main"].value("rope_type", "") + "'");
  if (!rp.contains("compress") || !rp["compress"].is_object()) return Status::Ok();
  const nlohmann::json& cp = rp["compress"];
  const std::string type = cp.value("rope_type", cp.value("type", "default"));
  if (type == "yarn") {
    c->yarn.factor = cp.value("factor", 1.0);
    c->yarn.original_ctx = cp.value("original_max_position_embeddings", 4096.0);
    if (!(c->yarn.factor >= 1 && c->yarn.original_ctx > 0)) return j.Invalid("rope_parameters.compress yarn values out of range");
    if (cp.value("attention_factor", 1.0) != 1.0)
      return Unimplemented(j.path() + ": deepseek_v4 with a YaRN attention_factor other than 1 (DeepSeek's reference scales nothing)");
  } else if (type != "default") {
    return Unimplemented(j.path() + ": deepseek_v4 with rope_parameters.compress of type '" + type + "'");
  }
  return Status::Ok();
}

Status DeepseekV4HfConfig(const HfConfigReader& j, ModelConfig* c) {
  const nlohmann::json& js = j.json();
  Dsv4Params& v = c->dsv4;
  DI_ASSIGN_OR_RETURN(int64_t experts, j.Int("n_routed_experts", -1));
  DI_ASSIGN_OR_RETURN(int64_t used, j.Int("num_experts_per_tok", -1));
  DI_ASSIGN_OR_RETURN(int64_t moe_ff, j.Int("moe_intermediate_size", -1));
  if (experts <= 0 || experts > 4096 || used <= 0 || used > experts || moe_ff <= 0) return j.Invalid("expert settings out of range");
  c->n_experts = static_cast<int>(experts);
  c->n_experts_used = static_cast<int>(used);
  c->moe_intermediate = static_cast<int>(moe_ff);
  c->n_shared_experts = static_cast<int>(j.IntOr("n_shared_experts", 1));
  DI_ASSIGN_OR_RETURN(double scale, j.Number("routed_scaling_factor", 1.0));
  c->routed_scaling_factor = static_cast<float>(scale);
  c->norm_topk_prob = j.BoolOr("norm_topk_prob", true);
  const std::string scoring = j.StringOr("scoring_func", "sqrtsoftplus");
  if (scoring != "sqrtsoftplus") return Unimplemented(j.path() + ": deepseek_v4 scoring_func '" + scoring + "' (only sqrtsoftplus)");
  DI_ASSIGN_OR_RETURN(int64_t rope, TransformersRopeDim(j, c->head_dim));
  DI_ASSIGN_OR_RETURN(int64_t q_lora, j.Int("q_lora_rank", -1));
  DI_ASSIGN_OR_RETURN(int64_t window, j.Int("sliding_window", -1));
  c->qk_rope_dim = static_cast<int>(rope);
  c->q_lora_rank = static_cast<int>(q_lora);
  c->sliding_window = static_cast<int>(window);
  v.o_groups = static_cast<int>(j.IntOr("o_groups", 0));
  v.o_lora_rank = static_cast<int>(j.IntOr("o_lora_rank", 0));
  if (js.contains("compress_ratios") || !js.contains("layer_types")) {
    v.compress_ratio = j.IntList("compress_ratios");
  } else {
    DI_RETURN_IF_ERROR(TransformersLayerTypes(j, c));
  }
  DI_ASSIGN_OR_RETURN(v.compress_rope_theta, j.Number("compress_rope_theta", 160000.0));
  v.index_heads = static_cast<int>(j.IntOr("index_n_heads", 0));
  v.index_head_dim = static_cast<int>(j.IntOr("index_head_dim", 0));
  v.index_topk = static_cast<int>(j.IntOr("index_topk", 0));
  v.hash_layers = static_cast<int>(j.IntOr("num_hash_layers", 0));
  if (!js.contains("num_hash_layers") && js.contains("mlp_layer_types")) {
    DI_ASSIGN_OR_RETURN(v.hash_layers, TransformersHashLayers(j));
  }
  v.hc = static_cast<int>(j.IntOr("hc_mult", 0));
  v.hc_iters = static_cast<int>(j.IntOr("hc_sinkhorn_iters", 20));
  DI_ASSIGN_OR_RETURN(double hc_eps, j.Number("hc_eps", 1e-6));
  v.hc_eps = static_cast<float>(hc_eps);
  DI_ASSIGN_OR_RETURN(double limit, j.Number("swiglu_limit", 0.0));
  // One limit for the routed and the shared experts, as llama.cpp's converter writes both; make-tiny's configs
  // carry the shared expert's own (deepinfer's key, so its HF and GGUF files hold the same model).
  DI_ASSIGN_OR_RETURN(double limit_shared, j.Number("swiglu_limit_shared", limit));
  v.swiglu_limit = {static_cast<float>(limit)};
  v.swiglu_limit_shared = {static_cast<float>(limit_shared)};
  c->n_mtp = static_cast<int>(j.IntOr("num_nextn_predict_layers", 0));
  if (js.contains("rope_scaling") && js["rope_scaling"].is_object()) {
    const nlohmann::json& rs = js["rope_scaling"];
    const std::string type = rs.value("rope_type", rs.value("type", ""));
    if (type == "yarn") {
      c->yarn.factor = rs.value("factor", 1.0);
      c->yarn.original_ctx = rs.value("original_max_position_embeddings", 4096.0);
      if (!(c->yarn.factor >= 1 && c->yarn.original_ctx > 0)) return j.Invalid("rope_scaling yarn values out of range");
    } else if (!type.empty() && type != "default") {
      return Unimplemented(j.path() + ": deepseek_v4 with rope_scaling '" + type + "'");
    }
  }
  DI_RETURN_IF_ERROR(TransformersRope(j, c));
  return Finish(c, j.path());
}

Status DeepseekV4GgufConfig(const GgufConfigReader& g, ModelConfig* c) {
  Dsv4Params& v = c->dsv4;
  auto need = [&](const char* key) -> StatusOr<int64_t> { return g.Int(key, 0, true); };
  DI_ASSIGN_OR_RETURN(int64_t vlen, g.Int("attention.value_length", c->head_dim, false));
  if (vlen != c->head_dim) return g.Invalid("deepseek4 needs attention.value_length == key_length (K = V)");
  DI_ASSIGN_OR_RETURN(int64_t rope, need("rope.dimension_count"));
  DI_ASSIGN_OR_RETURN(int64_t q_lora, need("attention.q_lora_rank"));
  DI_ASSIGN_OR_RETURN(int64_t window, need("attention.sliding_window"));
  DI_ASSIGN_OR_RETURN(int64_t groups, need("attention.output_group_count"));
  DI_ASSIGN_OR_RETURN(int64_t o_lora, need("attention.output_lora_rank"));
  DI_ASSIGN_OR_RETURN(int64_t shared, need("expert_shared_count"));
  DI_ASSIGN_OR_RETURN(int64_t gating, need("expert_gating_func"));
  DI_ASSIGN_OR_RETURN(int64_t hc, need("hyper_connection.count"));
  DI_ASSIGN_OR_RETURN(int64_t iters, need("hyper_connection.sinkhorn_iterations"));
  DI_ASSIGN_OR_RETURN(int64_t hash, need("hash_layer_count"));
  DI_ASSIGN_OR_RETURN(double hc_eps, g.Float("hyper_connection.epsilon"));
  DI_ASSIGN_OR_RETURN(double scale, g.Float("expert_weights_scale"));
  DI_ASSIGN_OR_RETURN(double compress_theta, g.Float("attention.compress_rope_freq_base"));
  DI_ASSIGN_OR_RETURN(std::vector<double> ratios, g.Numbers("attention.compress_ratios"));
  DI_ASSIGN_OR_RETURN(std::vector<double> limit, g.Numbers("swiglu_clamp_exp"));
  std::vector<double> limit_shared = limit;
  if (g.Has("swiglu_clamp_shexp")) {
    DI_ASSIGN_OR_RETURN(limit_shared, g.Numbers("swiglu_clamp_shexp"));
  }
  if (gating != kGatingSqrtSoftplus) return Unimplemented(g.path() + ": deepseek4 with expert_gating_func " + std::to_string(gating) + " (only 4, sqrt-softplus)");
  if (!g.Has("expert_weights_norm")) return g.Invalid("missing deepseek4.expert_weights_norm");
  for (int64_t x : {rope, q_lora, window, groups, o_lora, shared, hc, iters, hash})
    if (x < 0 || x > (int64_t{1} << 30)) return g.Invalid("deepseek4 metadata out of range");
  c->qk_rope_dim = static_cast<int>(rope);
  c->q_lora_rank = static_cast<int>(q_lora);
  c->sliding_window = static_cast<int>(window);
  c->n_shared_experts = static_cast<int>(shared);
  c->routed_scaling_factor = static_cast<float>(scale);
  c->norm_topk_prob = g.Bool("expert_weights_norm", true);
  v.o_groups = static_cast<int>(groups);
  v.o_lora_rank = static_cast<int>(o_lora);
  v.hc = static_cast<int>(hc);
  v.hc_iters = static_cast<int>(iters);
  v.hc_eps = static_cast<float>(hc_eps);
  v.hash_layers = static_cast<int>(hash);
  v.compress_rope_theta = compress_theta;
  for (double r : ratios) v.compress_ratio.push_back(static_cast<int>(r));
  for (double x : limit) v.swiglu_limit.push_back(static_cast<float>(x));
  for (double x : limit_shared) v.swiglu_limit_shared.push_back(static_cast<float>(x));
  bool csa = false;
  for (int r : v.compress_ratio) csa = csa || r == 4;
  if (csa) {
    DI_ASSIGN_OR_RETURN(int64_t ih, need("attention.indexer.head_count"));
    DI_ASSIGN_OR_RETURN(int64_t id, need("attention.indexer.key_length"));
    DI_ASSIGN_OR_RETURN(int64_t ik, need("attention.indexer.top_k"));
    v.index_heads = static_cast<int>(ih);
    v.index_head_dim = static_cast<int>(id);
    v.index_topk = static_cast<int>(ik);
  }
  DI_ASSIGN_OR_RETURN(const bool yarn, g.Yarn(&c->yarn));
  if (auto t = g.String("rope.scaling.type"); !yarn && t.ok() && *t != "none")
    return Unimplemented(g.path() + ": deepseek4 with rope.scaling.type '" + *t + "'");
  return Finish(c, g.path());
}

// `convert`: the deepseek4 keys llama.cpp's loader reads (deepseek4.cpp load_arch_hparams), from the
// configuration, beside the shared ones the generic writer puts (the attention's are written here: one K=V head
// of head_dim, RoPE on its last qk_rope_dim elements). GGUF keys are written once each.
void Dsv4GgufMetadata(const ModelConfig& c, const std::string& p, GgufWriter& w) {
  const Dsv4Params& v = c.dsv4;
  WriteGgufExpertCounts(p, c.n_experts, c.n_experts_used, c.moe_intermediate, w);
  w.SetU32(p + "attention.head_count_kv", 1);
  w.SetU32(p + "attention.key_length", static_cast<uint32_t>(c.head_dim));
  w.SetU32(p + "attention.value_length", static_cast<uint32_t>(c.head_dim));
  w.SetU32(p + "rope.dimension_count", static_cast<uint32_t>(c.qk_rope_dim));
  w.SetU32(p + "expert_shared_count", static_cast<uint32_t>(c.n_shared_experts));
  w.SetF32(p + "expert_weights_scale", c.routed_scaling_factor);
  w.SetBool(p + "expert_weights_norm", c.norm_topk_prob);
  w.SetU32(p + "expert_gating_func", kGatingSqrtSoftplus);
  w.SetF32Array(p + "swiglu_clamp_exp", v.swiglu_limit);  // per layer, the MTP block's included
  w.SetF32Array(p + "swiglu_clamp_shexp", v.swiglu_limit_shared);
  w.SetU32(p + "attention.q_lora_rank", static_cast<uint32_t>(c.q_lora_rank));
  w.SetU32(p + "attention.output_group_count", static_cast<uint32_t>(v.o_groups));
  w.SetU32(p + "attention.output_lora_rank", static_cast<uint32_t>(v.o_lora_rank));
  w.SetI32Array(p + "attention.compress_ratios", std::vector<int32_t>(v.compress_ratio.begin(), v.compress_ratio.end()));
  w.SetF32(p + "attention.compress_rope_freq_base", static_cast<float>(v.compress_rope_theta));
  bool csa = false;
  for (int r : v.compress_ratio) csa = csa || r == 4;
  if (csa) {
    w.SetU32(p + "attention.indexer.head_count", static_cast<uint32_t>(v.index_heads));
    w.SetU32(p + "attention.indexer.key_length", static_cast<uint32_t>(v.index_head_dim));
    w.SetU32(p + "attention.indexer.top_k", static_cast<uint32_t>(v.index_topk));
  }
  w.SetU32(p + "hyper_connection.count", static_cast<uint32_t>(v.hc));
  w.SetU32(p + "hyper_connection.sinkhorn_iterations", static_cast<uint32_t>(v.hc_iters));
  w.SetF32(p + "hyper_connection.epsilon", v.hc_eps);
  w.SetU32(p + "hash_layer_count", static_cast<uint32_t>(v.hash_layers));
  if (c.yarn.factor > 1) {
    w.SetString(p + "rope.scaling.type", "yarn");
    w.SetF32(p + "rope.scaling.factor", static_cast<float>(c.yarn.factor));
    w.SetU32(p + "rope.scaling.original_context_length", static_cast<uint32_t>(c.yarn.original_ctx));
  }
}

void HcTensors(const ModelConfig& c, const TensorId (&ids)[3], HcWeights& w, TensorList& t) {
  const int64_t h = c.dsv4.hc, mix = (2 + h) * h, width = h * c.hidden;
  t.ExpertVectors(ids[0], mix, width, &w.fn, 1.f / std::sqrt(static_cast<float>(width)));
  t.Vector(ids[1], mix, &w.base, 1.f, 0.f);
  t.Vector(ids[2], 3, &w.scale, 0.1f, 1.f);
}

void LayerTensors(const ModelConfig& c, int layer, LayerWeights& w, TensorList& t) {
  const int64_t D = c.hidden, H = c.n_heads, d = c.head_dim, qr = c.q_lora_rank, G = c.dsv4.o_groups,
                ro = c.dsv4.o_lora_rank, E = c.n_experts, F = c.moe_intermediate;
  const int ratio = c.dsv4.compress_ratio[static_cast<size_t>(layer)];
  auto inv = [](int64_t fan_in) { return 1.f / std::sqrt(static_cast<float>(fan_in)); };
  Dsv4AttnWeights& a = w.dsv4;
  t.Norm(TensorId::kAttnNorm, D, &w.attn_norm);
  HcTensors(c, {TensorId::kHcAttnFn, TensorId::kHcAttnBase, TensorId::kHcAttnScale}, w.hc_attn, t);
  t.Vector(TensorId::kAttnSinks, H, &a.sinks, 1.f, 0.f).ColumnParallel(TpBy::kHeads, 1);
  t.Matrix(TensorId::kAttnQA, qr, D, &a.wq_a, inv(D));
  t.Norm(TensorId::kAttnQANorm, qr, &a.q_a_norm);
  t.Matrix(TensorId::kAttnQB, H * d, qr, &a.wq_b, inv(qr)).ColumnParallel(TpBy::kHeads, d);
  t.Matrix(TensorId::kAttnKv, d, D, &a.wkv, inv(D));
  t.Norm(TensorId::kAttnKvANorm, d, &a.kv_norm);
  // Tensor parallel: whole output groups per rank (their heads' q rows and sinks above), wo_b row-parallel.
  t.Matrix(TensorId::kAttnOutA, G * ro, H * d / G, &a.wo_a, inv(H * d / G)).ColumnParallel(TpBy::kOutGroups, ro);
  t.Matrix(TensorId::kAttnOutB, D, G * ro, &a.wo_b, inv(G * ro)).RowParallel(TpBy::kOutGroups, ro);
  if (ratio != 0) {
    const int64_t cw = (ratio == 4 ? 2 : 1) * d;
    t.Matrix(TensorId::kAttnCompKv, cw, D, &a.comp_kv, inv(D));
    t.Matrix(TensorId::kAttnCompGate, cw, D, &a.comp_gate, inv(D));
    t.ExpertVectors(TensorId::kAttnCompApe, ratio, cw, &a.comp_ape, 1.f);
    t.Norm(TensorId::kAttnCompNorm, d, &a.comp_norm);
  }
  if (ratio == 4) {
    const int64_t ih = c.dsv4.index_heads, id = c.dsv4.index_head_dim;
    t.Matrix(TensorId::kIdxProj, ih, D, &a.idx_proj, inv(D));
    t.Matrix(TensorId::kIdxQB, ih * id, qr, &a.idx_q_b, inv(qr));
    t.Matrix(TensorId::kIdxCompKv, 2 * id, D, &a.idx_comp_kv, inv(D));
    t.Matrix(TensorId::kIdxCompGate, 2 * id, D, &a.idx_comp_gate, inv(D));
    t.ExpertVectors(TensorId::kIdxCompApe, 4, 2 * id, &a.idx_comp_ape, 1.f);
    t.Norm(TensorId::kIdxCompNorm, id, &a.idx_comp_norm);
  }
  t.Norm(TensorId::kFfnNorm, D, &w.ffn_norm);
  HcTensors(c, {TensorId::kHcFfnFn, TensorId::kHcFfnBase, TensorId::kHcFfnScale}, w.hc_ffn, t);
  MoeWeights& m = w.moe;
  m.swiglu_limit = c.dsv4.swiglu_limit[static_cast<size_t>(layer)];
  m.shared_swiglu_limit = c.dsv4.swiglu_limit_shared[static_cast<size_t>(layer)];
  t.Matrix(TensorId::kFfnRouter, E, D, &m.router, inv(D));
  if (layer < c.dsv4.hash_layers) t.TokenExperts(TensorId::kFfnTid2Eid, c.vocab_size, c.n_experts_used, &m.tid2eid);
  else t.Vector(TensorId::kFfnExpProbsBias, E, &m.exp_probs_bias, 0.1f, 0.f);
  t.Experts(TensorId::kFfnGateExps, E, F, D, &m.gate, inv(D)).ColumnParallel(TpBy::kExpertFfn);
  t.Experts(TensorId::kFfnUpExps, E, F, D, &m.up, inv(D)).ColumnParallel(TpBy::kExpertFfn);
  t.Experts(TensorId::kFfnDownExps, E, D, F, &m.down, inv(F)).RowParallel(TpBy::kExpertFfn);
  const int64_t S = c.shared_ffn;
  t.Matrix(TensorId::kFfnGateShexp, S, D, &m.shared.gate, inv(D)).ColumnParallel(TpBy::kSharedFfn);
  t.Matrix(TensorId::kFfnUpShexp, S, D, &m.shared.up, inv(D)).ColumnParallel(TpBy::kSharedFfn);
  t.Matrix(TensorId::kFfnDownShexp, D, S, &m.shared.down, inv(S)).RowParallel(TpBy::kSharedFfn);
}

// The MTP block's own tensors (its layer is a window-only V4 layer): V3's module (blocks.cc) but as DeepSeek's V4
// checkpoints hold it: eh_proj as e_proj / h_proj, the head norm `norm`, the block's own collapse of the streams
// (hc_head_*; GGUF has none: llama.cpp's single-file GGUF uses the model's, which the block falls back to), and no
// embedding or head of its own (the model's serve; a GGUF's nextn.embed_tokens / shared_head_head are honoured).
void Dsv4MtpTensors(const ModelConfig& c, MtpWeights& w, const Model& m, TensorList& t) {
  const int64_t D = c.hidden, h = c.dsv4.hc, width = h * D;
  t.Norm(TensorId::kMtpENorm, D, &w.enorm);
  t.Norm(TensorId::kMtpHNorm, D, &w.hnorm);
  t.Other(TensorId::kMtpEhProj, TensorForm::kInputHalves, {D, 2 * D}, &w.eh_proj, nullptr, 1.f / std::sqrt(2.f * D));
  TensorDecl& embed = t.Matrix(TensorId::kMtpEmbd, c.vocab_size, D, &w.embed, 1.0f).ColumnParallel(TpBy::kVocab).IfPresent();
  embed.fallback_matrix = &m.tok_embd;
  t.Norm(TensorId::kMtpHeadNorm, D, &w.head_norm).Optional(&m.out_norm);
  TensorDecl& head = t.Matrix(TensorId::kMtpHead, c.vocab_size, D, &w.head, 3.f / std::sqrt(D)).ColumnParallel(TpBy::kVocab).IfPresent();
  head.fallback_matrix = &m.lm_head;
  // Drawn as the model's (Dsv4HeadTensors): make-tiny writes the model's values here.
  t.ExpertVectors(TensorId::kMtpHcFn, h, width, &w.hc_head.fn, 1.f / std::sqrt(static_cast<float>(width))).Optional(&m.hc_head.fn);
  t.Vector(TensorId::kMtpHcBase, h, &w.hc_head.base, 1.f, 0.f).Optional(&m.hc_head.base);
  t.Vector(TensorId::kMtpHcScale, 1, &w.hc_head.scale, 0.1f, 1.f).Optional(&m.hc_head.scale);
}

// make-tiny --hf-layout transformers: the settings as transformers' DeepseekV4Config writes them (layer_types and
// compress_rates for compress_ratios, mlp_layer_types for num_hash_layers, partial_rotary_factor for
// qk_rope_head_dim, rope_parameters for rope_scaling), the same model.
void TransformersTinyConfig(nlohmann::json* cfg) {
  nlohmann::json& c = *cfg;
  static const std::map<int, const char*> kKind = {{0, "sliding_attention"}, {4, "compressed_sparse_attention"}, {128, "heavily_compressed_attention"}};
  nlohmann::json types = nlohmann::json::array(), mlp = nlohmann::json::array();
  const int layers = c["num_hidden_layers"].get<int>(), hash = c["num_hash_layers"].get<int>();
  for (int l = 0; l < layers; ++l) {
    types.push_back(kKind.at(c["compress_ratios"][static_cast<size_t>(l)].get<int>()));
    mlp.push_back(l < hash ? "hash_moe" : "moe");
  }
  c["layer_types"] = types;
  c["compress_rates"] = {{"compressed_sparse_attention", 4}, {"heavily_compressed_attention", 128}};
  c["mlp_layer_types"] = mlp;
  c["partial_rotary_factor"] = c["qk_rope_head_dim"].get<double>() / c["head_dim"].get<double>();
  const nlohmann::json& ys = c["rope_scaling"];
  c["rope_parameters"] = {
      {"main", {{"rope_type", "default"}, {"rope_theta", c["rope_theta"]}, {"partial_rotary_factor", c["partial_rotary_factor"]}}},
      {"compress", {{"rope_type", "yarn"}, {"factor", ys["factor"]}, {"original_max_position_embeddings", ys["original_max_position_embeddings"]},
                    {"attention_factor", 1.0}, {"rope_theta", c["compress_rope_theta"]}, {"partial_rotary_factor", c["partial_rotary_factor"]}}}};
  // intermediate_size is an alias of moe_intermediate_size there (attribute_map), not a key it writes.
  for (const char* k : {"compress_ratios", "num_hash_layers", "qk_rope_head_dim", "rope_scaling", "intermediate_size"}) c.erase(k);
}

}  // namespace

// The head's collapse of the streams (model-level: declared with the head, model/arch/blocks.cc).
void Dsv4HeadTensors(const ModelConfig& c, Model& m, TensorList& t) {
  const int64_t h = c.dsv4.hc, width = h * c.hidden;
  t.ExpertVectors(TensorId::kOutputHcFn, h, width, &m.hc_head.fn, 1.f / std::sqrt(static_cast<float>(width)));
  t.Vector(TensorId::kOutputHcBase, h, &m.hc_head.base, 1.f, 0.f);
  t.Vector(TensorId::kOutputHcScale, 1, &m.hc_head.scale, 0.1f, 1.f);
}

const ArchSpec& DeepseekV4TransformersLayout();

const ArchSpec& DeepseekV4Arch() {
  static const ArchSpec kSpec{
      .arch = Arch::kDeepseekV4,
      .name = "deepseek_v4",
      .hf_names = {"deepseek_v4", "DeepseekV4ForCausalLM"},
      .hf_class = "DeepseekV4ForCausalLM",
      .gguf_arch = "deepseek4",
      .moe = true,
      // DeepSeek's own checkpoint layout (llama.cpp's converter reads these names).
      .hf_layer_prefix = "layers.",
      .hf_mtp_prefix = "mtp.",
      .hf_e8m0_scales = true,
      .tiny_seeds_by_shared_names = true,
      .hf_layout = "deepseek",
      .hf_alt_layout = DeepseekV4TransformersLayout,
      .gguf_rope = RopeStyle::kAdjacentPairs,
      .hf_rope = RopeStyle::kAdjacentPairs,
      .hf_config = DeepseekV4HfConfig,
      .gguf_config = DeepseekV4GgufConfig,
      .gguf_metadata = Dsv4GgufMetadata,
      .tiny_adjust = [](TinySpec* s) {
        // The shape of the specification's tiny model where make-tiny's flags were left at their defaults.
        if (s->hidden == 64) s->hidden = 256;
        if (s->head_dim == 16) s->head_dim = 128;
        if (s->qk_rope == 8) s->qk_rope = 32;
        if (s->q_lora == 48) s->q_lora = 64;
        if (s->moe_intermediate == 32) s->moe_intermediate = 128;
        if (s->window == 0) s->window = 16;
        s->kv_heads = 1;
        s->layers = static_cast<int>(std::size(kTinyRatios));
      },
      .tiny_hf_config = [](const TinySpec& s, nlohmann::json* cfg) {
        (*cfg)["n_routed_experts"] = s.experts;
        (*cfg)["num_experts_per_tok"] = s.experts_used;
        (*cfg)["moe_intermediate_size"] = s.moe_intermediate;
        (*cfg)["intermediate_size"] = s.moe_intermediate;
        (*cfg)["n_shared_experts"] = s.shared_experts;
        (*cfg)["routed_scaling_factor"] = 1.5;
        (*cfg)["norm_topk_prob"] = true;
        (*cfg)["scoring_func"] = "sqrtsoftplus";
        (*cfg)["qk_rope_head_dim"] = s.qk_rope;
        (*cfg)["q_lora_rank"] = s.q_lora;
        (*cfg)["sliding_window"] = s.window;
        (*cfg)["o_groups"] = 2;
        (*cfg)["o_lora_rank"] = 32;
        (*cfg)["compress_ratios"] = TinyRatios(s);
        (*cfg)["num_nextn_predict_layers"] = s.mtp ? 1 : 0;
        (*cfg)["compress_rope_theta"] = 160000.0;
        (*cfg)["index_n_heads"] = kTinyIndexHeads;
        (*cfg)["index_head_dim"] = 64;
        (*cfg)["index_topk"] = 4;
        (*cfg)["num_hash_layers"] = 3;
        (*cfg)["hc_mult"] = 4;
        (*cfg)["hc_sinkhorn_iters"] = 20;
        (*cfg)["hc_eps"] = 1e-6;
        (*cfg)["swiglu_limit"] = 1.5;
        (*cfg)["swiglu_limit_shared"] = 1.25;  // the GGUF's swiglu_clamp_shexp
        (*cfg)["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 256}};
        if (s.hf_layout == "transformers") TransformersTinyConfig(cfg);
      },
      .tiny_gguf_metadata = [](const TinySpec& s, const std::string& p, GgufWriter& w) {
        WriteGgufExpertCounts(p, s.experts, s.experts_used, s.moe_intermediate, w);
        w.SetU32(p + "expert_shared_count", static_cast<uint32_t>(s.shared_experts));
        w.SetF32(p + "expert_weights_scale", 1.5f);
        w.SetBool(p + "expert_weights_norm", true);
        w.SetU32(p + "expert_gating_func", kGatingSqrtSoftplus);
        w.SetF32(p + "swiglu_clamp_exp", 1.5f);
        w.SetF32(p + "swiglu_clamp_shexp", 1.25f);  // its own limit (the HF config has one for both)
        w.SetU32(p + "attention.q_lora_rank", static_cast<uint32_t>(s.q_lora));
        w.SetU32(p + "attention.sliding_window", static_cast<uint32_t>(s.window));
        w.SetU32(p + "attention.output_group_count", 2);
        w.SetU32(p + "attention.output_lora_rank", 32);
        w.SetI32Array(p + "attention.compress_ratios", TinyRatios(s));
        w.SetF32(p + "attention.compress_rope_freq_base", 160000.f);
        w.SetU32(p + "attention.indexer.head_count", kTinyIndexHeads);
        w.SetU32(p + "attention.indexer.key_length", 64);
        w.SetU32(p + "attention.indexer.top_k", 4);
        w.SetU32(p + "hyper_connection.count", 4);
        w.SetU32(p + "hyper_connection.sinkhorn_iterations", 20);
        w.SetF32(p + "hyper_connection.epsilon", 1e-6f);
        w.SetU32(p + "hash_layer_count", 3);
        w.SetString(p + "rope.scaling.type", "yarn");
        w.SetF32(p + "rope.scaling.factor", 4.f);
        w.SetU32(p + "rope.scaling.original_context_length", 256);
      },
      .tensor_names = {
          {TensorId::kTokEmbd, WeightFormat::kHf, "embed.weight"},
          {TensorId::kOutputNorm, WeightFormat::kHf, "norm.weight"},
          {TensorId::kOutput, WeightFormat::kHf, "head.weight"},
          {TensorId::kAttnNorm, WeightFormat::kHf, "attn_norm.weight"},
          {TensorId::kAttnSinks, WeightFormat::kHf, "attn.attn_sink"},
          {TensorId::kAttnQA, WeightFormat::kHf, "attn.wq_a.weight"},
          {TensorId::kAttnQANorm, WeightFormat::kHf, "attn.q_norm.weight"},
          {TensorId::kAttnQB, WeightFormat::kHf, "attn.wq_b.weight"},
          {TensorId::kAttnKvANorm, WeightFormat::kHf, "attn.kv_norm.weight"},
          {TensorId::kFfnNorm, WeightFormat::kHf, "ffn_norm.weight"},
          {TensorId::kFfnRouter, WeightFormat::kHf, "ffn.gate.weight"},
          {TensorId::kFfnExpProbsBias, WeightFormat::kHf, "ffn.gate.bias"},
          {TensorId::kFfnGateExps, WeightFormat::kHf, "ffn.experts.{e}.w1.weight"},
          {TensorId::kFfnDownExps, WeightFormat::kHf, "ffn.experts.{e}.w2.weight"},
          {TensorId::kFfnUpExps, WeightFormat::kHf, "ffn.experts.{e}.w3.weight"},
          {TensorId::kFfnGateShexp, WeightFormat::kHf, "ffn.shared_experts.w1.weight"},
          {TensorId::kFfnDownShexp, WeightFormat::kHf, "ffn.shared_experts.w2.weight"},
          {TensorId::kFfnUpShexp, WeightFormat::kHf, "ffn.shared_experts.w3.weight"},
          // The MTP block (under mtp.{k}.): its head norm; no embedding or head of its own.
          {TensorId::kMtpHeadNorm, WeightFormat::kHf, "norm.weight"},
          {TensorId::kMtpEmbd, WeightFormat::kHf, ""},
          {TensorId::kMtpHead, WeightFormat::kHf, ""},
      },
      .forward = DeepseekV4Forward,
      .mtp_forward = DeepseekV4MtpForward,
      .layer_tensors = LayerTensors,
      // The MTP block: V3's module tensors, as V4's checkpoints hold them, over a window-only V4 layer (GGUF
      // blk.{L}.nextn.* and the layer's blk.{L}.*; HF mtp.{k}.*).
      .mtp_tensors = Dsv4MtpTensors,
  };
  return kSpec;
}

// transformers' layout of the same checkpoints (transformers >= 5): DeepseekV4ForCausalLM's own module names
// (models/deepseek_v4/modeling_deepseek_v4.py), which its conversion_mapping.py "deepseek_v4" renames DeepSeek's
// to on loading. The same tensors and shapes, except the routed experts (fused per layer, hf_fused_experts) and
// no MTP block (transformers has none: it drops mtp.* on loading). FP8 tensors keep their E8M0 `.scale`.
const ArchSpec& DeepseekV4TransformersLayout() {
  static const ArchSpec kSpec = [] {
    ArchSpec a = DeepseekV4Arch();
    a.hf_layer_prefix = "model.layers.";
    a.hf_mtp_prefix = nullptr;
    a.hf_fused_experts = true;
    a.hf_layout = "transformers";
    a.hf_alt_layout = DeepseekV4Arch;
    a.tensor_names = {
        {TensorId::kTokEmbd, WeightFormat::kHf, "model.embed_tokens.weight"},
        {TensorId::kOutputNorm, WeightFormat::kHf, "model.norm.weight"},
        {TensorId::kOutput, WeightFormat::kHf, "lm_head.weight"},
        {TensorId::kOutputHcFn, WeightFormat::kHf, "model.hc_head.hc_fn"},
        {TensorId::kOutputHcBase, WeightFormat::kHf, "model.hc_head.hc_base"},
        {TensorId::kOutputHcScale, WeightFormat::kHf, "model.hc_head.hc_scale"},
        {TensorId::kAttnNorm, WeightFormat::kHf, "input_layernorm.weight"},
        {TensorId::kHcAttnFn, WeightFormat::kHf, "attn_hc.fn"},
        {TensorId::kHcAttnBase, WeightFormat::kHf, "attn_hc.base"},
        {TensorId::kHcAttnScale, WeightFormat::kHf, "attn_hc.scale"},
        {TensorId::kAttnSinks, WeightFormat::kHf, "self_attn.sinks"},
        {TensorId::kAttnQA, WeightFormat::kHf, "self_attn.q_a_proj.weight"},
        {TensorId::kAttnQANorm, WeightFormat::kHf, "self_attn.q_a_norm.weight"},
        {TensorId::kAttnQB, WeightFormat::kHf, "self_attn.q_b_proj.weight"},
        {TensorId::kAttnKv, WeightFormat::kHf, "self_attn.kv_proj.weight"},
        {TensorId::kAttnKvANorm, WeightFormat::kHf, "self_attn.kv_norm.weight"},
        {TensorId::kAttnOutA, WeightFormat::kHf, "self_attn.o_a_proj.weight"},
        {TensorId::kAttnOutB, WeightFormat::kHf, "self_attn.o_b_proj.weight"},
        {TensorId::kAttnCompKv, WeightFormat::kHf, "self_attn.compressor.kv_proj.weight"},
        {TensorId::kAttnCompGate, WeightFormat::kHf, "self_attn.compressor.gate_proj.weight"},
        {TensorId::kAttnCompApe, WeightFormat::kHf, "self_attn.compressor.position_bias"},
        {TensorId::kAttnCompNorm, WeightFormat::kHf, "self_attn.compressor.kv_norm.weight"},
        {TensorId::kIdxProj, WeightFormat::kHf, "self_attn.compressor.indexer.scorer.weights_proj.weight"},
        {TensorId::kIdxQB, WeightFormat::kHf, "self_attn.compressor.indexer.q_b_proj.weight"},
        {TensorId::kIdxCompKv, WeightFormat::kHf, "self_attn.compressor.indexer.kv_proj.weight"},
        {TensorId::kIdxCompGate, WeightFormat::kHf, "self_attn.compressor.indexer.gate_proj.weight"},
        {TensorId::kIdxCompApe, WeightFormat::kHf, "self_attn.compressor.indexer.position_bias"},
        {TensorId::kIdxCompNorm, WeightFormat::kHf, "self_attn.compressor.indexer.kv_norm.weight"},
        {TensorId::kFfnNorm, WeightFormat::kHf, "post_attention_layernorm.weight"},
        {TensorId::kHcFfnFn, WeightFormat::kHf, "ffn_hc.fn"},
        {TensorId::kHcFfnBase, WeightFormat::kHf, "ffn_hc.base"},
        {TensorId::kHcFfnScale, WeightFormat::kHf, "ffn_hc.scale"},
        {TensorId::kFfnRouter, WeightFormat::kHf, "mlp.gate.weight"},
        {TensorId::kFfnExpProbsBias, WeightFormat::kHf, "mlp.gate.e_score_correction_bias"},
        {TensorId::kFfnTid2Eid, WeightFormat::kHf, "mlp.gate.tid2eid"},
        {TensorId::kFfnGateExps, WeightFormat::kHf, "mlp.experts.gate_up_proj"},  // gate's rows, then up's
        {TensorId::kFfnUpExps, WeightFormat::kHf, "mlp.experts.gate_up_proj"},
        {TensorId::kFfnDownExps, WeightFormat::kHf, "mlp.experts.down_proj"},
        {TensorId::kFfnGateShexp, WeightFormat::kHf, "mlp.shared_experts.gate_proj.weight"},
        {TensorId::kFfnUpShexp, WeightFormat::kHf, "mlp.shared_experts.up_proj.weight"},
        {TensorId::kFfnDownShexp, WeightFormat::kHf, "mlp.shared_experts.down_proj.weight"},
        // No MTP block.
        {TensorId::kMtpENorm, WeightFormat::kHf, ""},
        {TensorId::kMtpHNorm, WeightFormat::kHf, ""},
        {TensorId::kMtpEhProj, WeightFormat::kHf, ""},
        {TensorId::kMtpEmbd, WeightFormat::kHf, ""},
        {TensorId::kMtpHeadNorm, WeightFormat::kHf, ""},
        {TensorId::kMtpHead, WeightFormat::kHf, ""},
        {TensorId::kMtpEProj, WeightFormat::kHf, ""},
        {TensorId::kMtpHProj, WeightFormat::kHf, ""},
        {TensorId::kMtpHcFn, WeightFormat::kHf, ""},
        {TensorId::kMtpHcBase, WeightFormat::kHf, ""},
        {TensorId::kMtpHcScale, WeightFormat::kHf, ""},
    };
    return a;
  }();
  return kSpec;
}

}  // namespace deepinfer
