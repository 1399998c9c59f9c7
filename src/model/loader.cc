#include <filesystem>
#include <functional>
#include <map>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "base/logging.h"
#include "base/progress.h"
#include "base/thread_pool.h"
#include "format/gguf.h"
#include "model/model.h"
#include "format/safetensors.h"

namespace deepinfer {

Model::~Model() = default;

namespace {

// Where tensors come from: GGUF or safetensors names, resolved per layer.
struct TensorSource {
  std::string file;
  std::function<const TensorView*(const std::string&)> find;
};

Status Expect(const TensorSource& src, const std::string& name, std::vector<int64_t> shape, TensorView* out) {
  const TensorView* t = src.find(name);
  if (!t) return NotFound(src.file + ": missing tensor '" + name + "'");
  TensorView want;
  want.shape = shape;
  // A 1-D vector of n may be stored as {n} or {1, n}.
  auto squeeze = [](std::vector<int64_t> s) {
    while (s.size() > 1 && s.front() == 1) s.erase(s.begin());
    return s;
  };
  if (squeeze(t->shape) != squeeze(shape))
    return InvalidArgument(src.file + ": tensor '" + name + "' has shape " + t->ShapeString() + ", expected " + want.ShapeString());
  *out = *t;
  if (t->dtype == DType::kF8E4M3) {  // DeepSeek FP8: 128x128 block scales in '<name>_scale_inv' (multiply)
    if (t->shape.size() != 2) return InvalidArgument(src.file + ": FP8 tensor '" + name + "' must be 2-D");
    const std::string sname = name + "_scale_inv";
    const TensorView* sc = src.find(sname);
    if (!sc) return NotFound(src.file + ": FP8 tensor '" + name + "' has no '" + sname + "'");
    const int64_t B = TensorView::kFp8Block, br = (t->shape[0] + B - 1) / B, bc = (t->shape[1] + B - 1) / B;
    if (sc->dtype != DType::kF32 || sc->shape != std::vector<int64_t>{br, bc})
      return InvalidArgument(src.file + ": '" + sname + "' must be f32 {" + std::to_string(br) + ", " + std::to_string(bc) +
                             "}, is " + DTypeName(sc->dtype) + " " + sc->ShapeString());
    out->block_scale = static_cast<const float*>(sc->data);
    out->scale_cols = bc;
  }
  return Status::Ok();
}

Status ExpectVec(const TensorSource& src, const std::string& name, int64_t n, std::vector<float>* out) {
  TensorView t;
  DI_RETURN_IF_ERROR(Expect(src, name, {n}, &t));
  if (GetDTypeInfo(t.dtype).block_elems != 1 && n % GetDTypeInfo(t.dtype).block_elems)
    return InvalidArgument(src.file + ": tensor '" + name + "' has an unusable type");
  out->resize(n);
  DequantizeRow(t.dtype, t.data, out->data(), n);
  return Status::Ok();
}

struct Names {  // per-format tensor names
  std::string embd, out_norm, lm_head;
  std::function<std::string(int, const char*)> layer;
  // HF keeps one tensor per expert; GGUF stacks them ({n_expert, rows, cols}) and leaves this null.
  std::function<std::string(int, int, const char*)> expert;
};

// Expert e's {rows, cols} matrix inside a stacked {n_expert, rows, cols} tensor.
TensorView ExpertSlice(const TensorView& stacked, int e) {
  TensorView v;
  v.dtype = stacked.dtype;
  v.shape = {stacked.shape[1], stacked.shape[2]};
  v.nbytes = stacked.nbytes / static_cast<size_t>(stacked.shape[0]);
  v.data = static_cast<const uint8_t*>(stacked.data) + v.nbytes * static_cast<size_t>(e);
  return v;
}

Status LoadExperts(const ModelConfig& c, const TensorSource& src, const Names& names, int l, LayerWeights& L) {
  const int64_t h = c.hidden, ff = c.moe_intermediate, E = c.n_experts;
  DI_RETURN_IF_ERROR(Expect(src, names.layer(l, "router"), {E, h}, &L.router));
  if (c.router_bias) DI_RETURN_IF_ERROR(ExpectVec(src, names.layer(l, "exp_bias"), E, &L.exp_bias));
  if (c.n_shared_experts > 0) {
    const int64_t sff = ff * c.n_shared_experts;
    DI_RETURN_IF_ERROR(Expect(src, names.layer(l, "sh_gate"), {sff, h}, &L.sh_gate));
    DI_RETURN_IF_ERROR(Expect(src, names.layer(l, "sh_up"), {sff, h}, &L.sh_up));
    DI_RETURN_IF_ERROR(Expect(src, names.layer(l, "sh_down"), {h, sff}, &L.sh_down));
  }
  L.exp_gate.resize(E), L.exp_up.resize(E), L.exp_down.resize(E);
  if (names.expert) {
    for (int e = 0; e < E; ++e) {
      DI_RETURN_IF_ERROR(Expect(src, names.expert(l, e, "gate_proj"), {ff, h}, &L.exp_gate[e]));
      DI_RETURN_IF_ERROR(Expect(src, names.expert(l, e, "up_proj"), {ff, h}, &L.exp_up[e]));
      DI_RETURN_IF_ERROR(Expect(src, names.expert(l, e, "down_proj"), {h, ff}, &L.exp_down[e]));
    }
    return Status::Ok();
  }
  TensorView g, u, d;
  DI_RETURN_IF_ERROR(Expect(src, names.layer(l, "gate_exps"), {E, ff, h}, &g));
  DI_RETURN_IF_ERROR(Expect(src, names.layer(l, "up_exps"), {E, ff, h}, &u));
  DI_RETURN_IF_ERROR(Expect(src, names.layer(l, "down_exps"), {E, h, ff}, &d));
  for (int e = 0; e < E; ++e) {
    L.exp_gate[e] = ExpertSlice(g, e);
    L.exp_up[e] = ExpertSlice(u, e);
    L.exp_down[e] = ExpertSlice(d, e);
  }
  return Status::Ok();
}

Names GgufNames() {
  Names n{"token_embd.weight", "output_norm.weight", "output.weight", nullptr, nullptr};
  n.layer = [](int l, const char* what) {
    static const std::map<std::string, std::string> kMap = {
        {"attn_norm", "attn_norm.weight"}, {"ffn_norm", "ffn_norm.weight"}, {"wq", "attn_q.weight"},
        {"wk", "attn_k.weight"}, {"wv", "attn_v.weight"}, {"wo", "attn_output.weight"},
        {"bq", "attn_q.bias"}, {"bk", "attn_k.bias"}, {"bv", "attn_v.bias"},
        {"q_norm", "attn_q_norm.weight"}, {"k_norm", "attn_k_norm.weight"}, {"gate", "ffn_gate.weight"},
        {"up", "ffn_up.weight"}, {"down", "ffn_down.weight"}, {"router", "ffn_gate_inp.weight"},
        {"gate_exps", "ffn_gate_exps.weight"}, {"up_exps", "ffn_up_exps.weight"}, {"down_exps", "ffn_down_exps.weight"},
        {"exp_bias", "exp_probs_b.bias"}, {"sh_gate", "ffn_gate_shexp.weight"}, {"sh_up", "ffn_up_shexp.weight"},
        {"sh_down", "ffn_down_shexp.weight"}, {"wq_a", "attn_q_a.weight"}, {"q_a_norm", "attn_q_a_norm.weight"},
        {"wq_b", "attn_q_b.weight"}, {"wkv_a", "attn_kv_a_mqa.weight"}, {"kv_a_norm", "attn_kv_a_norm.weight"},
        {"wkv_b", "attn_kv_b.weight"}, {"wk_b", "attn_k_b.weight"}, {"wv_b", "attn_v_b.weight"},
        {"enorm", "nextn.enorm.weight"}, {"hnorm", "nextn.hnorm.weight"}, {"eh_proj", "nextn.eh_proj.weight"},
        {"mtp_embd", "nextn.embed_tokens.weight"}, {"mtp_head_norm", "nextn.shared_head_norm.weight"},
        {"mtp_head", "nextn.shared_head_head.weight"}};
    return "blk." + std::to_string(l) + "." + kMap.at(what);
  };
  return n;
}

Names HfNames() {
  Names n{"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight", nullptr, nullptr};
  n.layer = [](int l, const char* what) {
    static const std::map<std::string, std::string> kMap = {
        {"attn_norm", "input_layernorm.weight"}, {"ffn_norm", "post_attention_layernorm.weight"},
        {"wq", "self_attn.q_proj.weight"}, {"wk", "self_attn.k_proj.weight"}, {"wv", "self_attn.v_proj.weight"},
        {"wo", "self_attn.o_proj.weight"}, {"bq", "self_attn.q_proj.bias"}, {"bk", "self_attn.k_proj.bias"},
        {"bv", "self_attn.v_proj.bias"}, {"q_norm", "self_attn.q_norm.weight"}, {"k_norm", "self_attn.k_norm.weight"},
        {"gate", "mlp.gate_proj.weight"}, {"up", "mlp.up_proj.weight"}, {"down", "mlp.down_proj.weight"},
        {"router", "mlp.gate.weight"}, {"exp_bias", "mlp.gate.e_score_correction_bias"},
        {"sh_gate", "mlp.shared_experts.gate_proj.weight"}, {"sh_up", "mlp.shared_experts.up_proj.weight"},
        {"sh_down", "mlp.shared_experts.down_proj.weight"}, {"wq_a", "self_attn.q_a_proj.weight"},
        {"q_a_norm", "self_attn.q_a_layernorm.weight"}, {"wq_b", "self_attn.q_b_proj.weight"},
        {"wkv_a", "self_attn.kv_a_proj_with_mqa.weight"}, {"kv_a_norm", "self_attn.kv_a_layernorm.weight"},
        {"wkv_b", "self_attn.kv_b_proj.weight"}, {"wk_b", "self_attn.k_b_proj.weight"},
        {"wv_b", "self_attn.v_b_proj.weight"}, {"enorm", "enorm.weight"}, {"hnorm", "hnorm.weight"},
        {"eh_proj", "eh_proj.weight"}, {"mtp_embd", "embed_tokens.weight"}, {"mtp_head_norm", "shared_head.norm.weight"},
        {"mtp_head", "shared_head.head.weight"}};
    return "model.layers." + std::to_string(l) + "." + kMap.at(what);
  };
  n.expert = [](int l, int e, const char* proj) {
    return "model.layers." + std::to_string(l) + ".mlp.experts." + std::to_string(e) + "." + proj + ".weight";
  };
  return n;
}

Status Validate(const ModelConfig& c, const std::string& file) {
  auto bad = [&](const std::string& what) { return InvalidArgument(file + ": invalid model configuration: " + what); };
  if (c.vocab_size <= 0 || c.hidden <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || c.intermediate <= 0)
    return bad("sizes must be positive (" + c.Summary() + ")");
  if (c.n_kv_heads <= 0 || c.n_heads % c.n_kv_heads) return bad("head_count must be a multiple of head_count_kv");
  if (c.head_dim <= 0 || c.head_dim % 2) return bad("head_dim must be positive and even");
  if (c.hidden > (1 << 20) || c.n_layers > 4096 || c.n_heads > 4096 || c.vocab_size > (1 << 24)) return bad("sizes too large");
  if (c.max_ctx <= 0) return bad("context length must be positive");
  if (c.n_experts < 0 || c.n_experts > 4096) return bad("expert count out of range");
  if (c.n_experts > 0 && (c.n_experts_used <= 0 || c.n_experts_used > c.n_experts || c.moe_intermediate <= 0 ||
                          c.decoder_sparse_step <= 0))
    return bad("experts used per token must be in [1, n_experts] and the expert FFN size positive");
  return Status::Ok();
}

Status LoadMla(const ModelConfig& c, const TensorSource& src, const Names& names, int l, LayerWeights& L) {
  const int64_t h = c.hidden, H = c.n_heads, qk = c.qk_nope_dim + c.qk_rope_dim, kvl = c.kv_lora_rank;
  auto N = [&](const char* w) { return names.layer(l, w); };
  if (c.q_lora_rank > 0) {
    DI_RETURN_IF_ERROR(Expect(src, N("wq_a"), {c.q_lora_rank, h}, &L.wq_a));
    DI_RETURN_IF_ERROR(ExpectVec(src, N("q_a_norm"), c.q_lora_rank, &L.q_a_norm));
    DI_RETURN_IF_ERROR(Expect(src, N("wq_b"), {H * qk, c.q_lora_rank}, &L.wq_b));
  } else {
    DI_RETURN_IF_ERROR(Expect(src, N("wq"), {H * qk, h}, &L.wq));
  }
  DI_RETURN_IF_ERROR(Expect(src, N("wkv_a"), {kvl + c.qk_rope_dim, h}, &L.wkv_a));
  DI_RETURN_IF_ERROR(ExpectVec(src, N("kv_a_norm"), kvl, &L.kv_a_norm));
  DI_RETURN_IF_ERROR(Expect(src, N("wo"), {h, H * c.v_head_dim}, &L.wo));
  const int nope = c.qk_nope_dim;
  if (src.find(N("wk_b"))) {
    // llama.cpp's layout: k_b = W_UK^T per head {H, kv_lora, nope} (already our uk_t layout), v_b {H, v, kv_lora}.
    TensorView kb;
    DI_RETURN_IF_ERROR(Expect(src, N("wk_b"), {H, kvl, nope}, &kb));
    DI_RETURN_IF_ERROR(Expect(src, N("wv_b"), {H, c.v_head_dim, kvl}, &L.wv_b));
    for (TensorView* t : {&kb, &L.wv_b})
      if (t->dtype == DType::kF8E4M3 || GetDTypeInfo(t->dtype).block_elems > t->shape.back() ||
          t->shape.back() % GetDTypeInfo(t->dtype).block_elems)
        return InvalidArgument(src.file + ": attn_k_b/attn_v_b have an unusable type");
    kb.shape = {H * kvl, nope};
    L.wv_b.shape = {H * c.v_head_dim, kvl};
    L.uk_t.resize(static_cast<size_t>(H) * kvl * nope);
    for (int64_t r = 0; r < H * kvl; ++r) kb.RowToF32(r, L.uk_t.data() + r * nope);
    return Status::Ok();
  }
  DI_RETURN_IF_ERROR(Expect(src, N("wkv_b"), {H * (c.qk_nope_dim + c.v_head_dim), kvl}, &L.wkv_b));
  // W_UK[h]^T for the absorbed query: rows [h*(nope+v), h*(nope+v)+nope) of kv_b, transposed, in f32.
  if (GetDTypeInfo(L.wkv_b.dtype).block_elems != 1 && kvl % GetDTypeInfo(L.wkv_b.dtype).block_elems)
    return InvalidArgument(src.file + ": kv_b has an unusable type");
  L.uk_t.assign(static_cast<size_t>(H) * kvl * nope, 0.f);
  std::vector<float> row(kvl);
  for (int64_t hh = 0; hh < H; ++hh)
    for (int i = 0; i < nope; ++i) {
      L.wkv_b.RowToF32(hh * (nope + c.v_head_dim) + i, row.data());
      for (int64_t j = 0; j < kvl; ++j) L.uk_t[(hh * kvl + j) * nope + i] = row[j];
    }
  return Status::Ok();
}

Status LoadLayer(const ModelConfig& c, const TensorSource& src, const Names& names, int l, LayerWeights& L) {
  const int64_t h = c.hidden, q_dim = int64_t{c.n_heads} * c.head_dim, kv_dim = int64_t{c.n_kv_heads} * c.head_dim;
  auto N = [&](const char* w) { return names.layer(l, w); };
  DI_RETURN_IF_ERROR(ExpectVec(src, N("attn_norm"), h, &L.attn_norm));
  DI_RETURN_IF_ERROR(ExpectVec(src, N("ffn_norm"), h, &L.ffn_norm));
  if (c.mla) {
    DI_RETURN_IF_ERROR(LoadMla(c, src, names, l, L));
  } else {
    DI_RETURN_IF_ERROR(Expect(src, N("wq"), {q_dim, h}, &L.wq));
    DI_RETURN_IF_ERROR(Expect(src, N("wk"), {kv_dim, h}, &L.wk));
    DI_RETURN_IF_ERROR(Expect(src, N("wv"), {kv_dim, h}, &L.wv));
    DI_RETURN_IF_ERROR(Expect(src, N("wo"), {h, q_dim}, &L.wo));
  }
  if (c.IsMoeLayer(l)) {
    DI_RETURN_IF_ERROR(LoadExperts(c, src, names, l, L));
  } else {
    DI_RETURN_IF_ERROR(Expect(src, N("gate"), {c.intermediate, h}, &L.w_gate));
    DI_RETURN_IF_ERROR(Expect(src, N("up"), {c.intermediate, h}, &L.w_up));
    DI_RETURN_IF_ERROR(Expect(src, N("down"), {h, c.intermediate}, &L.w_down));
  }
  if (c.attn_bias || src.find(N("bq"))) {
    DI_RETURN_IF_ERROR(ExpectVec(src, N("bq"), q_dim, &L.bq));
    DI_RETURN_IF_ERROR(ExpectVec(src, N("bk"), kv_dim, &L.bk));
    DI_RETURN_IF_ERROR(ExpectVec(src, N("bv"), kv_dim, &L.bv));
  }
  if (c.qk_norm) {
    DI_RETURN_IF_ERROR(ExpectVec(src, N("q_norm"), c.head_dim, &L.q_norm));
    DI_RETURN_IF_ERROR(ExpectVec(src, N("k_norm"), c.head_dim, &L.k_norm));
  }
  return Status::Ok();
}

Status LoadWeights(Model& m, const TensorSource& src, const Names& names) {
  const ModelConfig& c = m.config;
  const int64_t h = c.hidden;
  DI_RETURN_IF_ERROR(Expect(src, names.embd, {c.vocab_size, h}, &m.tok_embd));
  DI_RETURN_IF_ERROR(ExpectVec(src, names.out_norm, h, &m.out_norm));
  if (src.find(names.lm_head) && !m.config.tie_embeddings) {
    DI_RETURN_IF_ERROR(Expect(src, names.lm_head, {c.vocab_size, h}, &m.lm_head));
  } else {
    m.config.tie_embeddings = true;
    m.lm_head = m.tok_embd;
  }
  m.layers.resize(c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) DI_RETURN_IF_ERROR(LoadLayer(c, src, names, l, m.layers[l]));
  // MTP modules follow the last layer. A GGUF converted without them ("trunk only") still loads, without MTP.
  if (m.config.n_mtp > 0 && !src.find(names.layer(c.n_layers, "eh_proj"))) {
    DI_LOG_INFO("%s: the config announces %d MTP module(s) but the weights hold none; loading without MTP",
                src.file.c_str(), m.config.n_mtp);
    m.config.n_mtp = 0;
  }
  m.mtp.resize(m.config.n_mtp);
  for (int k = 0; k < m.config.n_mtp; ++k) {
    const int l = c.n_layers + k;
    MtpWeights& P = m.mtp[k];
    auto N = [&](const char* w) { return names.layer(l, w); };
    DI_RETURN_IF_ERROR(LoadLayer(c, src, names, l, P.layer));
    DI_RETURN_IF_ERROR(ExpectVec(src, N("enorm"), h, &P.enorm));
    DI_RETURN_IF_ERROR(ExpectVec(src, N("hnorm"), h, &P.hnorm));
    DI_RETURN_IF_ERROR(Expect(src, N("eh_proj"), {h, 2 * h}, &P.eh_proj));
    P.embed = m.tok_embd;
    P.head = m.lm_head;
    P.head_norm = m.out_norm;
    if (src.find(N("mtp_embd"))) DI_RETURN_IF_ERROR(Expect(src, N("mtp_embd"), {c.vocab_size, h}, &P.embed));
    if (src.find(N("mtp_head"))) DI_RETURN_IF_ERROR(Expect(src, N("mtp_head"), {c.vocab_size, h}, &P.head));
    if (src.find(N("mtp_head_norm"))) DI_RETURN_IF_ERROR(ExpectVec(src, N("mtp_head_norm"), h, &P.head_norm));
  }
  return Status::Ok();
}

// ------------------------------------------------------------------------------------------------ GGUF

StatusOr<std::unique_ptr<Model>> LoadGguf(const std::string& path) {
  DI_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> g, GgufFile::Open(path));
  auto m = std::make_unique<Model>();
  m->source = path;
  m->format = "gguf";
  DI_ASSIGN_OR_RETURN(std::string arch_name, g->GetString("general.architecture"));
  ModelConfig& c = m->config;
  if (!ArchFromName(arch_name, &c.arch))
    return Unimplemented(path + ": unknown architecture '" + arch_name + "' (supported: llama, qwen2, qwen3, qwen3moe, mistral)");
  auto key = [&](const char* k) { return arch_name + "." + k; };
  auto get_int = [&](const char* k, int64_t def, bool required) -> StatusOr<int64_t> {
    auto v = g->GetInt(key(k));
    if (v.ok()) return v;
    if (v.status().code() != StatusCode::kNotFound || required) return v.status();
    return def;
  };
  DI_ASSIGN_OR_RETURN(int64_t hidden, get_int("embedding_length", 0, true));
  DI_ASSIGN_OR_RETURN(int64_t layers, get_int("block_count", 0, true));
  // block_count includes MTP ("nextn") blocks, which follow the decoder layers.
  DI_ASSIGN_OR_RETURN(int64_t nextn, get_int("nextn_predict_layers", 0, false));
  if (nextn < 0 || nextn >= layers) return InvalidArgument(path + ": nextn_predict_layers out of range");
  layers -= nextn;
  c.n_mtp = static_cast<int>(nextn);
  DI_ASSIGN_OR_RETURN(int64_t n_expert, get_int("expert_count", 0, false));
  DI_ASSIGN_OR_RETURN(int64_t ffn, get_int("feed_forward_length", 0, n_expert == 0));
  if (n_expert > 0) {
    DI_ASSIGN_OR_RETURN(int64_t used, get_int("expert_used_count", 0, true));
    DI_ASSIGN_OR_RETURN(int64_t eff, get_int("expert_feed_forward_length", 0, true));
    if (used <= 0 || used > n_expert || eff <= 0 || eff > (int64_t{1} << 30) || n_expert > 4096)
      return InvalidArgument(path + ": expert metadata out of range");
    c.n_experts = static_cast<int>(n_expert);
    c.n_experts_used = static_cast<int>(used);
    c.moe_intermediate = static_cast<int>(eff);
    if (ffn <= 0) ffn = eff;  // no dense layers
    c.norm_topk_prob = true;  // llama.cpp's qwen3moe always renormalizes
  }
  DI_ASSIGN_OR_RETURN(int64_t heads, get_int("attention.head_count", 0, true));
  DI_ASSIGN_OR_RETURN(int64_t kv_heads, get_int("attention.head_count_kv", heads, false));
  DI_ASSIGN_OR_RETURN(int64_t ctx, get_int("context_length", 2048, false));
  DI_ASSIGN_OR_RETURN(int64_t head_dim, get_int("attention.key_length", heads > 0 ? hidden / heads : 0, false));
  for (int64_t v : {hidden, layers, ffn, heads, kv_heads, head_dim, ctx})
    if (v <= 0 || v > (int64_t{1} << 30)) return InvalidArgument(path + ": model dimensions in the metadata are out of range");
  c.hidden = static_cast<int>(hidden);
  c.n_layers = static_cast<int>(layers);
  c.intermediate = static_cast<int>(ffn);
  c.n_heads = static_cast<int>(heads);
  c.n_kv_heads = static_cast<int>(kv_heads);
  c.max_ctx = static_cast<int>(std::min<int64_t>(ctx, 1 << 22));
  c.head_dim = static_cast<int>(head_dim);
  if (auto v = g->GetFloat(key("attention.layer_norm_rms_epsilon")); v.ok()) c.rms_eps = static_cast<float>(*v);
  if (auto v = g->GetFloat(key("rope.freq_base")); v.ok()) c.rope_theta = *v;
  c.rope_style = (c.arch == Arch::kQwen2 || c.arch == Arch::kQwen3 || c.arch == Arch::kQwen3Moe) ? RopeStyle::kHalves
                                                                                                  : RopeStyle::kAdjacentPairs;
  if (c.arch == Arch::kDeepseekV3) {
    // deepseek2, legacy layout (attn_kv_b): key_length = nope + rope, value_length = v. Current layout
    // (attn_k_b/attn_v_b, MQA form): key_length = kv_lora + rope, value_length = kv_lora, and the per-head sizes
    // in key_length_mla / value_length_mla. rope.dimension_count = rope in both.
    const bool split = g->Find(key("attention.key_length_mla")) != nullptr;
    if (split) {
      DI_ASSIGN_OR_RETURN(head_dim, get_int("attention.key_length_mla", 0, true));
    }
    DI_ASSIGN_OR_RETURN(int64_t v_len, get_int(split ? "attention.value_length_mla" : "attention.value_length", 0, true));
    DI_ASSIGN_OR_RETURN(int64_t rope, get_int("rope.dimension_count", 0, true));
    DI_ASSIGN_OR_RETURN(int64_t q_lora, get_int("attention.q_lora_rank", 0, false));
    DI_ASSIGN_OR_RETURN(int64_t kv_lora, get_int("attention.kv_lora_rank", 0, true));
    DI_ASSIGN_OR_RETURN(int64_t dense, get_int("leading_dense_block_count", 0, false));
    DI_ASSIGN_OR_RETURN(int64_t shared, get_int("expert_shared_count", 0, false));
    DI_ASSIGN_OR_RETURN(int64_t gating, get_int("expert_gating_func", 1, false));
    DI_ASSIGN_OR_RETURN(int64_t groups, get_int("expert_group_count", 1, false));
    DI_ASSIGN_OR_RETURN(int64_t groups_used, get_int("expert_group_used_count", 1, false));
    for (int64_t v : {v_len, rope, kv_lora}) if (v <= 0 || v > 65536) return InvalidArgument(path + ": MLA dimensions out of range");
    if (head_dim <= 0 || head_dim > 65536 || q_lora < 0 || q_lora > 65536 || rope >= head_dim || dense < 0 || shared < 0 || shared > 64 || groups < 1 ||
        groups_used < 1 || groups_used > groups)
      return InvalidArgument(path + ": deepseek2 metadata out of range");
    c.mla = true;
    c.q_lora_rank = static_cast<int>(q_lora);
    c.kv_lora_rank = static_cast<int>(kv_lora);
    c.qk_rope_dim = static_cast<int>(rope);
    c.head_dim = static_cast<int>(head_dim);
    c.qk_nope_dim = c.head_dim - c.qk_rope_dim;
    c.v_head_dim = static_cast<int>(v_len);
    c.first_k_dense = static_cast<int>(dense);
    c.n_shared_experts = static_cast<int>(shared);
    c.router_sigmoid = gating == 2;
    c.n_group = static_cast<int>(groups);
    c.topk_group = static_cast<int>(groups_used);
    c.norm_topk_prob = false;
    if (const GgufValue* nv = g->Find(key("expert_weights_norm")); nv && !nv->is_array()) {
      if (auto* b = std::get_if<bool>(&nv->scalar)) c.norm_topk_prob = *b;
      if (auto* i = std::get_if<int64_t>(&nv->scalar)) c.norm_topk_prob = *i != 0;
    }
    if (auto v = g->GetFloat(key("expert_weights_scale")); v.ok()) c.routed_scaling_factor = static_cast<float>(*v);
    c.router_bias = g->FindTensor("blk." + std::to_string(c.first_k_dense) + ".exp_probs_b.bias") != nullptr;
    if (auto t = g->GetString(key("rope.scaling.type")); t.ok() && *t == "yarn") {
      auto f = g->GetFloat(key("rope.scaling.factor"));
      auto oc = g->GetInt(key("rope.scaling.original_context_length"));
      if (!f.ok() || !oc.ok() || !(*f >= 1 && *f < 1e6) || *oc <= 0)
        return InvalidArgument(path + ": rope.scaling yarn needs factor >= 1 and original_context_length");
      c.yarn.factor = *f;
      c.yarn.original_ctx = static_cast<double>(*oc);
      if (auto v = g->GetFloat(key("rope.scaling.yarn_beta_fast")); v.ok()) c.yarn.beta_fast = *v;
      if (auto v = g->GetFloat(key("rope.scaling.yarn_beta_slow")); v.ok()) c.yarn.beta_slow = *v;
      // llama.cpp stores 0.1 * mscale_all_dim; cos/sin keep scale 1 (mscale == mscale_all_dim, as V2/V3 ship).
      auto lm = g->GetFloat(key("rope.scaling.yarn_log_multiplier"));
      const double log_mul = lm.ok() ? *lm : 0.0;
      const double m = 1 + log_mul * std::log(c.yarn.factor);
      c.attn_scale_mult = static_cast<float>(m * m);
    }
    c.n_kv_heads = c.n_heads;
  }
  c.qk_norm = c.arch == Arch::kQwen3 || c.arch == Arch::kQwen3Moe;
  c.attn_bias = c.arch == Arch::kQwen2;
  if (c.arch == Arch::kDeepseekV3) c.norm_topk_prob = c.norm_topk_prob && c.n_experts > 0;
  const TensorView* embd = g->FindTensor("token_embd.weight");
  if (!embd) return NotFound(path + ": missing tensor 'token_embd.weight'");
  if (embd->shape.size() != 2 || embd->shape.front() > (int64_t{1} << 30))
    return InvalidArgument(path + ": tensor 'token_embd.weight' must be 2-D {vocab, hidden}");
  c.vocab_size = static_cast<int>(embd->shape.front());
  c.tie_embeddings = g->FindTensor("output.weight") == nullptr;
  if (const TensorView* rf = g->FindTensor("rope_freqs.weight")) {
    if (rf->dtype != DType::kF32 || rf->numel() != c.head_dim / 2)
      return InvalidArgument(path + ": tensor 'rope_freqs.weight' must be f32 with head_dim/2 entries");
    const float* p = static_cast<const float*>(rf->data);
    c.rope_freq_factors.assign(p, p + rf->numel());
  }
  DI_RETURN_IF_ERROR(Validate(c, path));
  GgufFile* gp = g.get();
  TensorSource src{path, [gp](const std::string& n) { return gp->FindTensor(n); }};
  DI_RETURN_IF_ERROR(LoadWeights(*m, src, GgufNames()));
  DI_ASSIGN_OR_RETURN(m->tokenizer, TokenizerFromGguf(*g));
  if (m->tokenizer->vocab_size() != c.vocab_size)
    DI_LOG_WARN("%s: tokenizer has %d tokens, embeddings %d", path.c_str(), m->tokenizer->vocab_size(), c.vocab_size);
  m->gguf = std::move(g);
  return m;
}

// ------------------------------------------------------------------------------------------------ HF

}  // namespace

StatusOr<ModelConfig> ParseHfConfig(const std::string& json_text, const std::string& cfg_path) {
  auto j = nlohmann::json::parse(json_text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return DataLoss(cfg_path + ": not valid JSON");
  ModelConfig c;
  std::string arch_name = j.value("model_type", "");
  if (!ArchFromName(arch_name, &c.arch))
    return Unimplemented(cfg_path + ": unknown architecture '" + arch_name +
                         "' (supported: llama, mistral, qwen2, qwen3, qwen3_moe, deepseek_v2, deepseek_v3)");
  auto geti = [&](const char* k, int64_t def) -> StatusOr<int64_t> {
    if (!j.contains(k) || j[k].is_null()) {
      if (def < 0) return NotFound(cfg_path + ": missing '" + k + "'");
      return def;
    }
    if (!j[k].is_number_integer()) return InvalidArgument(cfg_path + ": '" + k + "' must be an integer");
    return j[k].get<int64_t>();
  };
  auto getf = [&](const char* k, double def) -> StatusOr<double> {
    if (!j.contains(k) || j[k].is_null()) return def;
    if (!j[k].is_number()) return InvalidArgument(cfg_path + ": '" + k + "' must be a number");
    return j[k].get<double>();
  };
  DI_ASSIGN_OR_RETURN(int64_t hidden, geti("hidden_size", -1));
  DI_ASSIGN_OR_RETURN(int64_t heads, geti("num_attention_heads", -1));
  DI_ASSIGN_OR_RETURN(int64_t kv, geti("num_key_value_heads", heads));
  DI_ASSIGN_OR_RETURN(int64_t hd, geti("head_dim", heads > 0 ? hidden / heads : 0));
  DI_ASSIGN_OR_RETURN(int64_t layers, geti("num_hidden_layers", -1));
  DI_ASSIGN_OR_RETURN(int64_t n_expert, geti("num_experts", 0));
  DI_ASSIGN_OR_RETURN(int64_t moe_ff, geti("moe_intermediate_size", 0));
  DI_ASSIGN_OR_RETURN(int64_t ffn, geti("intermediate_size", n_expert > 0 ? moe_ff : -1));
  DI_ASSIGN_OR_RETURN(int64_t vocab, geti("vocab_size", -1));
  DI_ASSIGN_OR_RETURN(int64_t ctx, geti("max_position_embeddings", 2048));
  DI_ASSIGN_OR_RETURN(double eps, getf("rms_norm_eps", 1e-6));
  DI_ASSIGN_OR_RETURN(double theta, getf("rope_theta", 10000.0));
  for (int64_t v : {hidden, heads, kv, hd, layers, ffn, vocab, ctx})
    if (v <= 0 || v > (int64_t{1} << 30)) return InvalidArgument(cfg_path + ": model dimensions are missing or out of range");
  c.hidden = static_cast<int>(hidden);
  c.n_heads = static_cast<int>(heads);
  c.n_kv_heads = static_cast<int>(kv);
  c.head_dim = static_cast<int>(hd);
  c.n_layers = static_cast<int>(layers);
  c.intermediate = static_cast<int>(ffn);
  c.vocab_size = static_cast<int>(vocab);
  c.max_ctx = static_cast<int>(std::min<int64_t>(ctx, 1 << 22));
  c.rms_eps = static_cast<float>(eps);
  c.rope_theta = theta;
  c.rope_style = RopeStyle::kHalves;  // HF implementations rotate halves for every architecture here
  c.tie_embeddings = j.value("tie_word_embeddings", false);
  c.qk_norm = c.arch == Arch::kQwen3 || c.arch == Arch::kQwen3Moe;
  if (c.arch == Arch::kDeepseekV3) {
    auto int_or = [&](const char* k, int64_t def) -> int64_t {
      return j.contains(k) && j[k].is_number_integer() ? j[k].get<int64_t>() : def;
    };
    c.mla = true;
    c.q_lora_rank = static_cast<int>(int_or("q_lora_rank", 0));  // null in V2-Lite: no q compression
    c.kv_lora_rank = static_cast<int>(int_or("kv_lora_rank", 0));
    c.qk_nope_dim = static_cast<int>(int_or("qk_nope_head_dim", 0));
    c.qk_rope_dim = static_cast<int>(int_or("qk_rope_head_dim", 0));
    c.v_head_dim = static_cast<int>(int_or("v_head_dim", 0));
    c.head_dim = c.qk_nope_dim + c.qk_rope_dim;
    c.n_kv_heads = c.n_heads;
    c.rope_style = RopeStyle::kAdjacentPairs;  // DeepSeek's rotary is interleaved (pairs 2i, 2i+1)
    c.n_mtp = static_cast<int>(int_or("num_nextn_predict_layers", 0));
    if (c.n_mtp < 0 || c.n_mtp > 16) return InvalidArgument(cfg_path + ": num_nextn_predict_layers out of range");
    const int64_t n_exp = int_or("n_routed_experts", 0);
    if (c.kv_lora_rank <= 0 || c.qk_nope_dim <= 0 || c.qk_rope_dim <= 0 || c.qk_rope_dim % 2 || c.v_head_dim <= 0 ||
        c.q_lora_rank < 0 || c.kv_lora_rank > 65536 || c.q_lora_rank > 65536 || n_exp < 0 || n_exp > 4096)
      return InvalidArgument(cfg_path + ": MLA / expert dimensions missing or out of range");
    if (n_exp > 0) {
      c.n_experts = static_cast<int>(n_exp);
      c.n_experts_used = static_cast<int>(int_or("num_experts_per_tok", 0));
      c.moe_intermediate = static_cast<int>(int_or("moe_intermediate_size", 0));
      c.n_shared_experts = static_cast<int>(int_or("n_shared_experts", 0));
      c.first_k_dense = static_cast<int>(int_or("first_k_dense_replace", 0));
      c.decoder_sparse_step = static_cast<int>(int_or("moe_layer_freq", 1));
      c.n_group = static_cast<int>(int_or("n_group", 1));
      c.topk_group = static_cast<int>(int_or("topk_group", 1));
      c.router_sigmoid = j.value("scoring_func", "softmax") == "sigmoid";
      c.router_bias = j.value("topk_method", "greedy") == "noaux_tc";
      c.norm_topk_prob = j.value("norm_topk_prob", false);
      c.routed_scaling_factor = static_cast<float>(j.value("routed_scaling_factor", 1.0));
      if (c.n_experts_used <= 0 || c.n_experts_used > c.n_experts || c.moe_intermediate <= 0 || c.n_group < 1 ||
          c.topk_group < 1 || c.topk_group > c.n_group || c.n_experts % c.n_group || c.n_shared_experts < 0 ||
          c.first_k_dense < 0 || c.decoder_sparse_step < 1)
        return InvalidArgument(cfg_path + ": DeepSeekMoE settings out of range");
    }
  }
  if (c.arch == Arch::kQwen3Moe && n_expert > 0) {
    DI_ASSIGN_OR_RETURN(int64_t used, geti("num_experts_per_tok", -1));
    DI_ASSIGN_OR_RETURN(int64_t step, geti("decoder_sparse_step", 1));
    if (n_expert > 4096 || used <= 0 || used > n_expert || moe_ff <= 0 || moe_ff > (int64_t{1} << 30) || step <= 0 || step > 4096)
      return InvalidArgument(cfg_path + ": num_experts / num_experts_per_tok / moe_intermediate_size out of range");
    c.n_experts = static_cast<int>(n_expert);
    c.n_experts_used = static_cast<int>(used);
    c.moe_intermediate = static_cast<int>(moe_ff);
    c.decoder_sparse_step = static_cast<int>(step);
    c.norm_topk_prob = j.value("norm_topk_prob", true);
    if (j.contains("mlp_only_layers") && j["mlp_only_layers"].is_array())
      for (const auto& v : j["mlp_only_layers"])
        if (v.is_number_integer()) c.mlp_only_layers.push_back(v.get<int>());
  }
  c.attn_bias = c.arch == Arch::kQwen2 || (j.contains("attention_bias") && j["attention_bias"].is_boolean() && j["attention_bias"].get<bool>());
  if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) {
    auto& rs = j["rope_scaling"];
    std::string type = rs.value("rope_type", rs.value("type", ""));
    if (type == "llama3") {
      c.rope_freq_factors = Llama3FreqFactors(c.head_dim, theta, rs.value("factor", 8.0), rs.value("low_freq_factor", 1.0),
                                              rs.value("high_freq_factor", 4.0), rs.value("original_max_position_embeddings", 8192.0));
    } else if (type == "yarn" && c.arch == Arch::kDeepseekV3) {
      auto num = [&](const char* k, double def) { return rs.contains(k) && rs[k].is_number() ? rs[k].get<double>() : def; };
      c.yarn.factor = num("factor", 1.0);
      c.yarn.original_ctx = num("original_max_position_embeddings", 4096.0);
      c.yarn.beta_fast = num("beta_fast", 32.0);
      c.yarn.beta_slow = num("beta_slow", 1.0);
      const double mscale = num("mscale", 1.0), mscale_all = num("mscale_all_dim", 0.0);
      auto get_mscale = [&](double m) { return c.yarn.factor <= 1 ? 1.0 : 0.1 * m * std::log(c.yarn.factor) + 1.0; };
      if (!(c.yarn.factor >= 1 && c.yarn.factor < 1e6 && c.yarn.original_ctx > 0 && c.yarn.beta_fast > 0 && c.yarn.beta_slow > 0))
        return InvalidArgument(cfg_path + ": rope_scaling yarn values out of range");
      c.yarn.mscale = static_cast<float>(get_mscale(mscale) / get_mscale(mscale_all));
      c.attn_scale_mult = static_cast<float>(get_mscale(mscale_all) * get_mscale(mscale_all));
    } else if (!type.empty() && type != "default") {
      return Unimplemented(cfg_path + ": rope_scaling type '" + type + "' is not supported yet");
    }
  }
  DI_RETURN_IF_ERROR(Validate(c, cfg_path));
  return c;
}

namespace {

StatusOr<std::unique_ptr<Model>> LoadHf(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string cfg_path = (fs::path(dir) / "config.json").string();
  std::ifstream in(cfg_path);
  if (!in) return NotFound(cfg_path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  auto m = std::make_unique<Model>();
  m->source = dir;
  m->format = "hf";
  DI_ASSIGN_OR_RETURN(m->config, ParseHfConfig(ss.str(), cfg_path));
  DI_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsModel> st, SafetensorsModel::OpenDir(dir));
  SafetensorsModel* sp = st.get();
  TensorSource src{dir, [sp](const std::string& n) { return sp->Find(n); }};
  DI_RETURN_IF_ERROR(LoadWeights(*m, src, HfNames()));
  DI_ASSIGN_OR_RETURN(m->tokenizer, TokenizerFromHfDir(dir));
  m->safetensors = std::move(st);
  return m;
}

// Copies every weight matrix into one anonymous huge-page buffer (in parallel, with a progress bar) and points
// the model's views at the copies. Tied embeddings are copied once.
Status CopyWeights(Model& m, const LoadOptions& opts) {
  std::vector<TensorView*> views = {&m.tok_embd};
  if (m.lm_head.data != m.tok_embd.data) views.push_back(&m.lm_head);
  std::vector<LayerWeights*> all_layers;
  for (auto& L : m.layers) all_layers.push_back(&L);
  for (auto& P : m.mtp) {
    all_layers.push_back(&P.layer);
    views.push_back(&P.eh_proj);
    if (P.embed.data != m.tok_embd.data) views.push_back(&P.embed);
    if (P.head.data != m.lm_head.data) views.push_back(&P.head);
  }
  for (LayerWeights* Lp : all_layers) {
    LayerWeights& L = *Lp;
    for (TensorView* t : {&L.wq, &L.wk, &L.wv, &L.wo, &L.wq_a, &L.wq_b, &L.wkv_a, &L.wkv_b, &L.wv_b, &L.sh_gate, &L.sh_up, &L.sh_down})
      if (t->data) views.push_back(t);
    if (L.moe()) {
      views.push_back(&L.router);
      for (size_t e = 0; e < L.exp_gate.size(); ++e)
        for (TensorView* t : {&L.exp_gate[e], &L.exp_up[e], &L.exp_down[e]}) views.push_back(t);
    } else {
      for (TensorView* t : {&L.w_gate, &L.w_up, &L.w_down}) views.push_back(t);
    }
  }
  constexpr size_t kAlign = 4096;
  size_t total = 0;
  for (auto* t : views) total += (t->nbytes + kAlign - 1) / kAlign * kAlign;
  if (opts.placement == WeightPlacement::kAuto) {
    const size_t avail = AvailableMemoryBytes();
    if (avail == 0 || total > avail / 10 * 6) {
      DI_LOG_INFO("weights stay mmapped (%.2f GB; %.2f GB available)", total / 1e9, avail / 1e9);
      return Status::Ok();
    }
  }
  DI_ASSIGN_OR_RETURN(m.weights, HostBuffer::Allocate(total));
  const bool tied = m.lm_head.data == m.tok_embd.data;
  // MTP modules without their own embedding/head share the model's: re-point them after the copy.
  std::vector<std::pair<bool, bool>> mtp_shares;
  for (auto& P : m.mtp) mtp_shares.emplace_back(P.embed.data == m.tok_embd.data, P.head.data == m.lm_head.data);
  std::vector<size_t> offsets;
  size_t off = 0;
  for (auto* t : views) {
    offsets.push_back(off);
    off += (t->nbytes + kAlign - 1) / kAlign * kAlign;
  }
  std::unique_ptr<ProgressBar> bar;
  if (opts.progress && total > (256u << 20)) bar = std::make_unique<ProgressBar>("loading weights", total, "B");
  std::atomic<size_t> copied{0};
  constexpr size_t kChunk = 8u << 20;
  // Chunks of all tensors, spread over the pool: each thread copies (and first-touches) its own chunks.
  std::vector<std::pair<size_t, size_t>> chunks;  // (view index, byte offset)
  for (size_t i = 0; i < views.size(); ++i)
    for (size_t b = 0; b < views[i]->nbytes; b += kChunk) chunks.emplace_back(i, b);
  ComputePool().Run([&](int tid, int nt) {
    for (size_t c = tid; c < chunks.size(); c += nt) {
      auto [i, b] = chunks[c];
      const size_t n = std::min(kChunk, views[i]->nbytes - b);
      std::memcpy(m.weights->data() + offsets[i] + b, static_cast<const uint8_t*>(views[i]->data) + b, n);
      const size_t done = copied.fetch_add(n) + n;
      if (bar && tid == 0) bar->Update(done);
    }
  });
  if (bar) {
    bar->Update(total);
    bar->Finish();
  }
  for (size_t i = 0; i < views.size(); ++i) views[i]->data = m.weights->data() + offsets[i];
  if (tied) m.lm_head = m.tok_embd;
  for (size_t k = 0; k < m.mtp.size(); ++k) {
    if (mtp_shares[k].first) m.mtp[k].embed = m.tok_embd;
    if (mtp_shares[k].second) m.mtp[k].head = m.lm_head;
  }
  DI_LOG_DEBUG("weights copied into %.2f GB of huge-page memory", total / 1e9);
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<Model>> LoadModelFromPath(const std::string& path, const LoadOptions& opts) {
  namespace fs = std::filesystem;
  std::error_code ec;
  StatusOr<std::unique_ptr<Model>> m = Status(StatusCode::kNotFound, path + ": no such file or directory");
  if (fs::is_directory(path, ec)) m = LoadHf(path);
  else if (fs::exists(path, ec)) m = LoadGguf(path);
  if (!m.ok() || opts.placement == WeightPlacement::kMmap) return m;
  DI_RETURN_IF_ERROR(CopyWeights(**m, opts));
  return m;
}

}  // namespace deepinfer
