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
#include "format/safetensors.h"
#include "model/arch/arch.h"
#include "model/model.h"
#include "model/shard.h"

namespace deepinfer {

Model::~Model() = default;

std::vector<TensorView*> LayerWeights::MutableMatrices() {
  return {&gqa.wq, &gqa.wk, &gqa.wv, &gqa.wo, &mla.wq, &mla.wq_a, &mla.wq_b, &mla.wkv_a, &mla.wkv_b, &mla.wv_b, &mla.wo,
          &mlp.gate, &mlp.up, &mlp.down, &moe.router, &moe.shared.gate, &moe.shared.up, &moe.shared.down, &moe.shared_gate};
}

std::vector<const TensorView*> LayerWeights::Matrices() const {
  std::vector<const TensorView*> out;
  for (TensorView* t : const_cast<LayerWeights*>(this)->MutableMatrices()) out.push_back(t);
  return out;
}

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

// Expert e's {rows, cols} matrix inside a stacked {n_expert, rows, cols} tensor.
TensorView ExpertSlice(const TensorView& stacked, int e) {
  TensorView v;
  v.dtype = stacked.dtype;
  v.shape = {stacked.shape[1], stacked.shape[2]};
  v.nbytes = stacked.nbytes / static_cast<size_t>(stacked.shape[0]);
  v.data = static_cast<const uint8_t*>(stacked.data) + v.nbytes * static_cast<size_t>(e);
  return v;
}

// Tensor names of one checkpoint: its family's spellings (model/arch/) in its format.
struct Names {
  const ArchSpec& arch;
  WeightFormat format;
  std::string operator()(TensorId id, int layer = -1, int expert = -1) const { return TensorName(arch, format, id, layer, expert); }
};

Status LoadExperts(const ModelConfig& c, const TensorSource& src, const Names& N, int l, MoeWeights& W) {
  const int64_t h = c.hidden, ff = c.moe_intermediate, E = c.n_experts;
  DI_RETURN_IF_ERROR(Expect(src, N(TensorId::kFfnRouter, l), {E, h}, &W.router));
  if (c.router_bias) DI_RETURN_IF_ERROR(ExpectVec(src, N(TensorId::kFfnExpProbsBias, l), E, &W.exp_probs_bias));
  if (c.shared_ffn > 0) {
    const int64_t sff = c.shared_ffn;
    DI_RETURN_IF_ERROR(Expect(src, N(TensorId::kFfnGateShexp, l), {sff, h}, &W.shared.gate));
    DI_RETURN_IF_ERROR(Expect(src, N(TensorId::kFfnUpShexp, l), {sff, h}, &W.shared.up));
    DI_RETURN_IF_ERROR(Expect(src, N(TensorId::kFfnDownShexp, l), {h, sff}, &W.shared.down));
    if (c.shared_expert_gate) {
      DI_RETURN_IF_ERROR(Expect(src, N(TensorId::kFfnShexpGate, l), {1, h}, &W.shared_gate));
      W.shared_gate.shape = {1, h};  // GGUF stores it as a vector {hidden}
    }
  }
  W.gate.resize(E), W.up.resize(E), W.down.resize(E);
  if (N.format == WeightFormat::kHf) {  // one tensor per expert
    for (int e = 0; e < E; ++e) {
      DI_RETURN_IF_ERROR(Expect(src, N(TensorId::kFfnGateExps, l, e), {ff, h}, &W.gate[e]));
      DI_RETURN_IF_ERROR(Expect(src, N(TensorId::kFfnUpExps, l, e), {ff, h}, &W.up[e]));
      DI_RETURN_IF_ERROR(Expect(src, N(TensorId::kFfnDownExps, l, e), {h, ff}, &W.down[e]));
    }
    return Status::Ok();
  }
  TensorView g, u, d;  // GGUF: stacked {n_expert, rows, cols}
  DI_RETURN_IF_ERROR(Expect(src, N(TensorId::kFfnGateExps, l), {E, ff, h}, &g));
  DI_RETURN_IF_ERROR(Expect(src, N(TensorId::kFfnUpExps, l), {E, ff, h}, &u));
  DI_RETURN_IF_ERROR(Expect(src, N(TensorId::kFfnDownExps, l), {E, h, ff}, &d));
  for (int e = 0; e < E; ++e) {
    W.gate[e] = ExpertSlice(g, e);
    W.up[e] = ExpertSlice(u, e);
    W.down[e] = ExpertSlice(d, e);
  }
  return Status::Ok();
}

Status LoadMla(const ModelConfig& c, const TensorSource& src, const Names& N, int l, MlaWeights& W) {
  const int64_t h = c.hidden, H = c.n_heads, qk = c.qk_nope_dim + c.qk_rope_dim, kvl = c.kv_lora_rank;
  if (c.q_lora_rank > 0) {
    DI_RETURN_IF_ERROR(Expect(src, N(TensorId::kAttnQA, l), {c.q_lora_rank, h}, &W.wq_a));
    DI_RETURN_IF_ERROR(ExpectVec(src, N(TensorId::kAttnQANorm, l), c.q_lora_rank, &W.q_a_norm));
    DI_RETURN_IF_ERROR(Expect(src, N(TensorId::kAttnQB, l), {H * qk, c.q_lora_rank}, &W.wq_b));
  } else {
    DI_RETURN_IF_ERROR(Expect(src, N(TensorId::kAttnQ, l), {H * qk, h}, &W.wq));
  }
  DI_RETURN_IF_ERROR(Expect(src, N(TensorId::kAttnKvA, l), {kvl + c.qk_rope_dim, h}, &W.wkv_a));
  DI_RETURN_IF_ERROR(ExpectVec(src, N(TensorId::kAttnKvANorm, l), kvl, &W.kv_a_norm));
  DI_RETURN_IF_ERROR(Expect(src, N(TensorId::kAttnOut, l), {h, H * c.v_head_dim}, &W.wo));
  const int nope = c.qk_nope_dim;
  if (src.find(N(TensorId::kAttnKB, l))) {
    // llama.cpp's layout: k_b = W_UK^T per head {H, kv_lora, nope} (already our uk_t layout), v_b {H, v, kv_lora}.
    TensorView kb;
    DI_RETURN_IF_ERROR(Expect(src, N(TensorId::kAttnKB, l), {H, kvl, nope}, &kb));
    DI_RETURN_IF_ERROR(Expect(src, N(TensorId::kAttnVB, l), {H, c.v_head_dim, kvl}, &W.wv_b));
    for (TensorView* t : {&kb, &W.wv_b})
      if (t->dtype == DType::kF8E4M3 || GetDTypeInfo(t->dtype).block_elems > t->shape.back() ||
          t->shape.back() % GetDTypeInfo(t->dtype).block_elems)
        return InvalidArgument(src.file + ": attn_k_b/attn_v_b have an unusable type");
    kb.shape = {H * kvl, nope};
    W.wv_b.shape = {H * c.v_head_dim, kvl};
    W.uk_t.resize(static_cast<size_t>(H) * kvl * nope);
    for (int64_t r = 0; r < H * kvl; ++r) kb.RowToF32(r, W.uk_t.data() + r * nope);
    return Status::Ok();
  }
  DI_RETURN_IF_ERROR(Expect(src, N(TensorId::kAttnKvB, l), {H * (c.qk_nope_dim + c.v_head_dim), kvl}, &W.wkv_b));
  // W_UK[h]^T for the absorbed query: rows [h*(nope+v), h*(nope+v)+nope) of kv_b, transposed, in f32.
  if (GetDTypeInfo(W.wkv_b.dtype).block_elems != 1 && kvl % GetDTypeInfo(W.wkv_b.dtype).block_elems)
    return InvalidArgument(src.file + ": kv_b has an unusable type");
  W.uk_t.assign(static_cast<size_t>(H) * kvl * nope, 0.f);
  std::vector<float> row(kvl);
  for (int64_t hh = 0; hh < H; ++hh)
    for (int i = 0; i < nope; ++i) {
      W.wkv_b.RowToF32(hh * (nope + c.v_head_dim) + i, row.data());
      for (int64_t j = 0; j < kvl; ++j) W.uk_t[(hh * kvl + j) * nope + i] = row[j];
    }
  return Status::Ok();
}

Status LoadGqa(const ModelConfig& c, const TensorSource& src, const Names& N, int l, GqaWeights& W) {
  const int64_t h = c.hidden, q_dim = int64_t{c.n_heads} * c.head_dim, kv_dim = int64_t{c.n_kv_heads} * c.head_dim;
  DI_RETURN_IF_ERROR(Expect(src, N(TensorId::kAttnQ, l), {q_dim, h}, &W.wq));
  DI_RETURN_IF_ERROR(Expect(src, N(TensorId::kAttnK, l), {kv_dim, h}, &W.wk));
  DI_RETURN_IF_ERROR(Expect(src, N(TensorId::kAttnV, l), {kv_dim, h}, &W.wv));
  DI_RETURN_IF_ERROR(Expect(src, N(TensorId::kAttnOut, l), {h, q_dim}, &W.wo));
  if (c.attn_bias || src.find(N(TensorId::kAttnQBias, l))) {
    DI_RETURN_IF_ERROR(ExpectVec(src, N(TensorId::kAttnQBias, l), q_dim, &W.bq));
    DI_RETURN_IF_ERROR(ExpectVec(src, N(TensorId::kAttnKBias, l), kv_dim, &W.bk));
    DI_RETURN_IF_ERROR(ExpectVec(src, N(TensorId::kAttnVBias, l), kv_dim, &W.bv));
  }
  if (c.qk_norm) {
    DI_RETURN_IF_ERROR(ExpectVec(src, N(TensorId::kAttnQNorm, l), c.head_dim, &W.q_norm));
    DI_RETURN_IF_ERROR(ExpectVec(src, N(TensorId::kAttnKNorm, l), c.head_dim, &W.k_norm));
  }
  return Status::Ok();
}

Status LoadLayer(const ModelConfig& c, const TensorSource& src, const Names& N, int l, LayerWeights& L) {
  const int64_t h = c.hidden;
  DI_RETURN_IF_ERROR(ExpectVec(src, N(TensorId::kAttnNorm, l), h, &L.attn_norm));
  DI_RETURN_IF_ERROR(ExpectVec(src, N(TensorId::kFfnNorm, l), h, &L.ffn_norm));
  if (c.mla) DI_RETURN_IF_ERROR(LoadMla(c, src, N, l, L.mla));
  else DI_RETURN_IF_ERROR(LoadGqa(c, src, N, l, L.gqa));
  if (c.IsMoeLayer(l)) return LoadExperts(c, src, N, l, L.moe);
  DI_RETURN_IF_ERROR(Expect(src, N(TensorId::kFfnGate, l), {c.intermediate, h}, &L.mlp.gate));
  DI_RETURN_IF_ERROR(Expect(src, N(TensorId::kFfnUp, l), {c.intermediate, h}, &L.mlp.up));
  DI_RETURN_IF_ERROR(Expect(src, N(TensorId::kFfnDown, l), {h, c.intermediate}, &L.mlp.down));
  return Status::Ok();
}

Status LoadWeights(Model& m, const TensorSource& src, WeightFormat format) {
  const ModelConfig& c = m.config;
  const Names N{GetArch(c.arch), format};
  const int64_t h = c.hidden;
  DI_RETURN_IF_ERROR(Expect(src, N(TensorId::kTokEmbd), {c.vocab_size, h}, &m.tok_embd));
  DI_RETURN_IF_ERROR(ExpectVec(src, N(TensorId::kOutputNorm), h, &m.out_norm));
  if (src.find(N(TensorId::kOutput)) && !m.config.tie_embeddings) {
    DI_RETURN_IF_ERROR(Expect(src, N(TensorId::kOutput), {c.vocab_size, h}, &m.lm_head));
  } else {
    m.config.tie_embeddings = true;
    m.lm_head = m.tok_embd;
  }
  m.layers.resize(c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) DI_RETURN_IF_ERROR(LoadLayer(c, src, N, l, m.layers[l]));
  // MTP modules follow the last layer. A GGUF converted without them ("trunk only") still loads, without MTP.
  if (m.config.n_mtp > 0 && !src.find(N(TensorId::kMtpEhProj, c.n_layers))) {
    DI_LOG_INFO("%s: the config announces %d MTP module(s) but the weights hold none; loading without MTP",
                src.file.c_str(), m.config.n_mtp);
    m.config.n_mtp = 0;
  }
  m.mtp.resize(m.config.n_mtp);
  for (int k = 0; k < m.config.n_mtp; ++k) {
    const int l = c.n_layers + k;
    MtpWeights& P = m.mtp[k];
    DI_RETURN_IF_ERROR(LoadLayer(c, src, N, l, P.layer));
    DI_RETURN_IF_ERROR(ExpectVec(src, N(TensorId::kMtpENorm, l), h, &P.enorm));
    DI_RETURN_IF_ERROR(ExpectVec(src, N(TensorId::kMtpHNorm, l), h, &P.hnorm));
    DI_RETURN_IF_ERROR(Expect(src, N(TensorId::kMtpEhProj, l), {h, 2 * h}, &P.eh_proj));
    P.embed = m.tok_embd;
    P.head = m.lm_head;
    P.head_norm = m.out_norm;
    if (src.find(N(TensorId::kMtpEmbd, l))) DI_RETURN_IF_ERROR(Expect(src, N(TensorId::kMtpEmbd, l), {c.vocab_size, h}, &P.embed));
    if (src.find(N(TensorId::kMtpHead, l))) DI_RETURN_IF_ERROR(Expect(src, N(TensorId::kMtpHead, l), {c.vocab_size, h}, &P.head));
    if (src.find(N(TensorId::kMtpHeadNorm, l))) DI_RETURN_IF_ERROR(ExpectVec(src, N(TensorId::kMtpHeadNorm, l), h, &P.head_norm));
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<Model>> LoadGguf(const std::string& path) {
  DI_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> g, GgufFile::Open(path));
  auto m = std::make_unique<Model>();
  m->source = path;
  m->format = "gguf";
  DI_ASSIGN_OR_RETURN(m->config, ParseGgufConfig(*g));
  if (const dist::DistContext* d = dist::Context()) DI_RETURN_IF_ERROR(CheckModelSplit(d->pc, m->config));
  GgufFile* gp = g.get();
  TensorSource src{path, [gp](const std::string& n) { return gp->FindTensor(n); }};
  DI_RETURN_IF_ERROR(LoadWeights(*m, src, WeightFormat::kGguf));
  DI_ASSIGN_OR_RETURN(m->tokenizer, TokenizerFromGguf(*g));
  if (m->tokenizer->vocab_size() != m->config.vocab_size)
    DI_LOG_WARN("%s: tokenizer has %d tokens, embeddings %d", path.c_str(), m->tokenizer->vocab_size(), m->config.vocab_size);
  m->gguf = std::move(g);
  return m;
}

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
  if (const dist::DistContext* d = dist::Context()) DI_RETURN_IF_ERROR(CheckModelSplit(d->pc, m->config));
  DI_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsModel> st, SafetensorsModel::OpenDir(dir));
  SafetensorsModel* sp = st.get();
  TensorSource src{dir, [sp](const std::string& n) { return sp->Find(n); }};
  DI_RETURN_IF_ERROR(LoadWeights(*m, src, WeightFormat::kHf));
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
    for (TensorView* t : Lp->MutableMatrices())
      if (t->data) views.push_back(t);
    for (std::vector<TensorView>* experts : {&Lp->moe.gate, &Lp->moe.up, &Lp->moe.down})
      for (TensorView& t : *experts)  // expert parallelism: only the experts this rank holds have data
        if (t.data) views.push_back(&t);
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
  if (!m.ok()) return m;
  if (const dist::DistContext* d = dist::Context(); d && !d->pc.single()) DI_RETURN_IF_ERROR(ShardModel(**m, d->pc));
  if (opts.placement == WeightPlacement::kMmap) return m;
  DI_RETURN_IF_ERROR(CopyWeights(**m, opts));
  if ((*m)->weights) (*m)->shard_buffers.clear();  // the tensor-parallel slices were copied again with the rest
  return m;
}

}  // namespace deepinfer
