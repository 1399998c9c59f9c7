#include <filesystem>
#include <functional>
#include <map>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "base/logging.h"
#include "base/progress.h"
#include "base/thread_pool.h"
#include "format/gguf.h"
#include "format/safetensors.h"
#include "kernels/ops.h"
#include "model/arch/arch.h"
#include "model/arch/model_tensors.h"
#include "model/model.h"
#include "model/shard.h"
#include "tensor/mxfp4_hf.h"

namespace deepinfer {

Model::~Model() = default;

std::vector<TensorView*> LayerWeights::MutableMatrices() {
  return {&gqa.wq, &gqa.wk, &gqa.wv, &gqa.wo, &mla.wq, &mla.wq_a, &mla.wq_b, &mla.wkv_a, &mla.wkv_b, &mla.wv_b, &mla.wo,
          &mlp.gate, &mlp.up, &mlp.down, &moe.router, &moe.shared.gate, &moe.shared.up, &moe.shared.down, &moe.shared_gate,
          &dsv4.wq_a, &dsv4.wq_b, &dsv4.wkv, &dsv4.wo_a, &dsv4.wo_b, &dsv4.comp_kv, &dsv4.comp_gate, &dsv4.idx_proj,
          &dsv4.idx_q_b, &dsv4.idx_comp_kv, &dsv4.idx_comp_gate};
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
  // Where tensors the loader builds (repacked HF gpt-oss experts) are registered: the Model's pending_weights.
  std::vector<Model::PendingWeight>* pending = nullptr;
  // DeepSeek-V4's HF checkpoints (ArchSpec::hf_e8m0_scales): FP8 block scales and MXFP4 experts' scales are E8M0
  // bytes in `<base>.scale`; the f32 block scales they convert to are kept in *scales (Model::loaded_scales).
  bool e8m0 = false;
  std::vector<std::vector<float>>* scales = nullptr;
};

// An E8M0 exponent byte's value, 2^(b - 127) (255 is OCP's NaN): exact in f32 except b = 0 and 1 (2^-127 and
// 2^-126 as denormal / normal minimum, both exact too).
float E8M0ToF32(uint8_t b) { return b == 255 ? std::nanf("") : std::ldexp(1.f, static_cast<int>(b) - 127); }

// `<base>.weight` -> `<base>.scale` (DeepSeek-V4's scale tensors); empty when the name has no ".weight".
std::string E8M0ScaleName(const std::string& name) {
  const std::string w = ".weight";
  if (name.size() < w.size() || name.compare(name.size() - w.size(), w.size(), w) != 0) return "";
  return name.substr(0, name.size() - w.size()) + ".scale";
}

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
  if (t->dtype == DType::kF8E4M3 && src.e8m0) {  // DeepSeek-V4: E8M0 128x128 block scales in '<base>.scale'
    if (t->shape.size() != 2) return InvalidArgument(src.file + ": FP8 tensor '" + name + "' must be 2-D");
    const std::string sname = E8M0ScaleName(name);
    const TensorView* sc = sname.empty() ? nullptr : src.find(sname);
    if (!sc) return NotFound(src.file + ": FP8 tensor '" + name + "' has no block scales '" + (sname.empty() ? name + ".scale" : sname) + "'");
    const int64_t B = TensorView::kFp8Block, br = (t->shape[0] + B - 1) / B, bc = (t->shape[1] + B - 1) / B;
    if (sc->dtype != DType::kU8 || sc->shape != std::vector<int64_t>{br, bc})
      return InvalidArgument(src.file + ": '" + sname + "' must be E8M0 (F8_E8M0 or U8) {" + std::to_string(br) + ", " +
                             std::to_string(bc) + "} for FP8 '" + name + "' " + t->ShapeString() + ", is " +
                             DTypeName(sc->dtype) + " " + sc->ShapeString());
    std::vector<float>& f = src.scales->emplace_back(static_cast<size_t>(br * bc));
    const uint8_t* b = static_cast<const uint8_t*>(sc->data);
    for (size_t i = 0; i < f.size(); ++i) f[i] = E8M0ToF32(b[i]);
    out->block_scale = f.data();  // the vector's buffer stays put when the list grows (moved, not copied)
    out->scale_cols = bc;
  } else if (t->dtype == DType::kF8E4M3) {  // DeepSeek FP8: 128x128 block scales in '<name>_scale_inv' (multiply)
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
  std::string operator()(TensorId id, int layer = -1, int expert = -1, int mtp = -1) const {
    return TensorName(arch, format, id, layer, expert, mtp);
  }
  std::string operator()(const TensorDecl& d, int expert = -1) const { return (*this)(d.id, d.layer, expert, d.mtp); }
};

// MLA's key/value up-projection in whichever form the checkpoint holds: llama.cpp's split k_b / v_b, or kv_b (HF,
// older GGUFs), from which W_UK^T (uk_t) is derived for the absorbed query.
Status LoadMlaKvB(const ModelConfig& c, const TensorSource& src, const Names& N, const TensorDecl& kv_b,
                  const TensorDecl& k_b, const TensorDecl& v_b) {
  const int64_t H = c.n_heads, kvl = c.kv_lora_rank, nope = c.qk_nope_dim, vd = c.v_head_dim;
  std::vector<float>& uk_t = *k_b.vector;
  if (src.find(N(k_b))) {
    // llama.cpp's layout: k_b = W_UK^T per head {H, kv_lora, nope} (already our uk_t layout), v_b {H, v, kv_lora}.
    TensorView kb;
    TensorView& vb = *v_b.matrix;
    DI_RETURN_IF_ERROR(Expect(src, N(k_b), k_b.shape, &kb));
    DI_RETURN_IF_ERROR(Expect(src, N(v_b), v_b.shape, &vb));
    for (TensorView* t : {&kb, &vb})
      if (t->dtype == DType::kF8E4M3 || GetDTypeInfo(t->dtype).block_elems > t->shape.back() ||
          t->shape.back() % GetDTypeInfo(t->dtype).block_elems)
        return InvalidArgument(src.file + ": attn_k_b/attn_v_b have an unusable type");
    kb.shape = {H * kvl, nope};
    vb.shape = {H * vd, kvl};
    uk_t.resize(static_cast<size_t>(H) * kvl * nope);
    for (int64_t r = 0; r < H * kvl; ++r) kb.RowToF32(r, uk_t.data() + r * nope);
    return Status::Ok();
  }
  TensorView& w = *kv_b.matrix;
  DI_RETURN_IF_ERROR(Expect(src, N(kv_b), kv_b.shape, &w));
  // W_UK[h]^T for the absorbed query: rows [h*(nope+v), h*(nope+v)+nope) of kv_b, transposed, in f32.
  if (GetDTypeInfo(w.dtype).block_elems != 1 && kvl % GetDTypeInfo(w.dtype).block_elems)
    return InvalidArgument(src.file + ": kv_b has an unusable type");
  uk_t.assign(static_cast<size_t>(H) * kvl * nope, 0.f);
  std::vector<float> row(kvl);
  for (int64_t hh = 0; hh < H; ++hh)
    for (int i = 0; i < nope; ++i) {
      w.RowToF32(hh * (nope + vd) + i, row.data());
      for (int64_t j = 0; j < kvl; ++j) uk_t[(hh * kvl + j) * nope + i] = row[j];
    }
  return Status::Ok();
}

// DeepSeek-V4's MXFP4 expert (ArchSpec::hf_e8m0_scales): `name` U8 [rows, cols / 2], element 2i in the low
// nibble, and `<base>.scale` E8M0 [rows, cols / 32], as ggml's block_mxfp4 rows: the nibble order is HF
// gpt-oss's, so each row is HfMxfp4ToBlocks of its bytes and scales (llama.cpp's repack_mxfp4_blocks).
Status LoadE8M0Mxfp4(const TensorSource& src, const std::string& name, const TensorView& w, int64_t rows, int64_t cols, TensorView* out) {
  if (cols % 32) return InvalidArgument(src.file + ": MXFP4 tensor '" + name + "': rows must be a multiple of 32 wide");
  const int64_t nb = cols / 32;
  if (w.shape != std::vector<int64_t>{rows, cols / 2})
    return InvalidArgument(src.file + ": MXFP4 tensor '" + name + "' has shape " + w.ShapeString() + ", expected [" +
                           std::to_string(rows) + ", " + std::to_string(cols / 2) + "] (two e2m1 codes a byte)");
  const std::string sname = E8M0ScaleName(name);
  const TensorView* sc = sname.empty() ? nullptr : src.find(sname);
  if (!sc) return NotFound(src.file + ": MXFP4 tensor '" + name + "' has no E8M0 scales '" + (sname.empty() ? name + ".scale" : sname) + "'");
  if (sc->dtype != DType::kU8 || sc->shape != std::vector<int64_t>{rows, nb})
    return InvalidArgument(src.file + ": '" + sname + "' must be E8M0 (F8_E8M0 or U8) [" + std::to_string(rows) + ", " +
                           std::to_string(nb) + "] (one exponent per 32 values of '" + name + "'), is " +
                           DTypeName(sc->dtype) + " " + sc->ShapeString());
  const uint8_t* hb = static_cast<const uint8_t*>(w.data);
  const uint8_t* hs = static_cast<const uint8_t*>(sc->data);
  const size_t row_bytes = static_cast<size_t>(nb) * sizeof(BlockMXFP4);
  *out = TensorView{};
  out->dtype = DType::kMXFP4;
  out->shape = {rows, cols};
  out->nbytes = row_bytes * static_cast<size_t>(rows);
  src.pending->push_back({out, [=](uint8_t* dst) {
                            for (int64_t r = 0; r < rows; ++r)
                              HfMxfp4ToBlocks(hb + r * nb * 16, hs + r * nb, reinterpret_cast<BlockMXFP4*>(dst + static_cast<size_t>(r) * row_bytes),
                                              static_cast<size_t>(nb));
                          }});
  return Status::Ok();
}

// HF kInputHalves (DeepSeek-V4's MTP e_proj / h_proj): the two {rows, cols / 2} halves joined along the input
// into one {rows, cols} matrix the loader builds. Same plain type on both sides: their rows' bytes side by side;
// otherwise (FP8 with block scales, mixed types) f32 of the values.
Status LoadInputHalves(const TensorSource& src, const Names& N, const TensorDecl& d) {
  const int64_t rows = d.shape[0], cols = d.shape[1], half = cols / 2;
  TensorView a, b;
  DI_RETURN_IF_ERROR(Expect(src, N(TensorId::kMtpEProj, d.layer, -1, d.mtp), {rows, half}, &a));
  DI_RETURN_IF_ERROR(Expect(src, N(TensorId::kMtpHProj, d.layer, -1, d.mtp), {rows, half}, &b));
  const DTypeInfo& info = GetDTypeInfo(a.dtype);
  const bool raw = a.dtype == b.dtype && !a.block_scale && !b.block_scale && a.dtype != DType::kU8 && a.dtype != DType::kI32 && a.dtype != DType::kI64 &&
                   half % info.block_elems == 0;
  if (!raw)
    for (const TensorView* t : {&a, &b})
      if (t->dtype == DType::kU8 || t->dtype == DType::kI32 || t->dtype == DType::kI64 || half % GetDTypeInfo(t->dtype).block_elems)
        return InvalidArgument(src.file + ": '" + N(TensorId::kMtpEProj, d.layer, -1, d.mtp) + "' / '" +
                               N(TensorId::kMtpHProj, d.layer, -1, d.mtp) + "' have an unusable type");
  TensorView& out = *d.matrix;
  out = TensorView{};
  out.dtype = raw ? a.dtype : DType::kF32;
  out.shape = {rows, cols};
  out.nbytes = DTypeBytes(out.dtype, static_cast<size_t>(rows * cols));
  src.pending->push_back({&out, [=](uint8_t* dst) {
                            const size_t hb = DTypeBytes(raw ? a.dtype : DType::kF32, static_cast<size_t>(half));
                            for (int64_t r = 0; r < rows; ++r) {
                              uint8_t* row = dst + static_cast<size_t>(r) * 2 * hb;
                              if (raw) {
                                std::memcpy(row, a.row(r), hb);
                                std::memcpy(row + hb, b.row(r), hb);
                              } else {
                                a.RowToF32(r, reinterpret_cast<float*>(row));
                                b.RowToF32(r, reinterpret_cast<float*>(row + hb));
                              }
                            }
                          }});
  return Status::Ok();
}

// transformers' fused experts (ArchSpec::hf_fused_experts): gate and up from one gate_up_proj [E, 2 * rows, cols]
// (expert e's gate rows, then its up rows), down from down_proj [E, rows, cols]; each expert viewed in place.
Status LoadFusedExperts(const TensorSource& src, const Names& N, const TensorDecl& d) {
  const int64_t E = d.shape[0], rows = d.shape[1], cols = d.shape[2];
  const bool fused = d.id == TensorId::kFfnGateExps || d.id == TensorId::kFfnUpExps;
  const int64_t R = fused ? 2 * rows : rows, part = d.id == TensorId::kFfnUpExps ? 1 : 0;
  TensorView w;
  DI_RETURN_IF_ERROR(Expect(src, N(d), {E, R, cols}, &w));
  if (w.dtype != DType::kF32 && w.dtype != DType::kF16 && w.dtype != DType::kBF16)
    return InvalidArgument(src.file + ": tensor '" + N(d) + "' must be f32, f16 or bf16, is " + DTypeName(w.dtype));
  const size_t es = DTypeBytes(w.dtype, 1), expert_bytes = es * static_cast<size_t>(rows * cols);
  std::vector<TensorView>& out = *d.experts;
  out.assign(static_cast<size_t>(E), TensorView{});
  for (int64_t e = 0; e < E; ++e) {
    TensorView& v = out[static_cast<size_t>(e)];
    v.dtype = w.dtype;
    v.shape = {rows, cols};
    v.nbytes = expert_bytes;
    v.data = static_cast<const uint8_t*>(w.data) + es * static_cast<size_t>((e * R + part * rows) * cols);
  }
  return Status::Ok();
}

// Routed experts: one tensor per expert (HF), or one stacked {E, rows, cols} tensor (GGUF) viewed per expert.
Status LoadExperts(const TensorSource& src, const Names& N, const TensorDecl& d) {
  const int64_t E = d.shape[0];
  std::vector<TensorView>& out = *d.experts;
  out.resize(E);
  if (N.format == WeightFormat::kHf && N.arch.hf_fused_experts) return LoadFusedExperts(src, N, d);
  if (N.format == WeightFormat::kHf) {
    for (int e = 0; e < E; ++e) {
      const std::string name = N(d, e);
      if (const TensorView* w = src.find(name); w && src.e8m0 && w->dtype == DType::kU8) {
        DI_RETURN_IF_ERROR(LoadE8M0Mxfp4(src, name, *w, d.shape[1], d.shape[2], &out[e]));
        continue;
      }
      DI_RETURN_IF_ERROR(Expect(src, name, {d.shape[1], d.shape[2]}, &out[e]));
    }
    return Status::Ok();
  }
  TensorView stacked;
  DI_RETURN_IF_ERROR(Expect(src, N(d), d.shape, &stacked));
  for (int e = 0; e < E; ++e) out[e] = ExpertSlice(stacked, e);
  return Status::Ok();
}

bool IsFusedGateUp(TensorId id) {
  return id == TensorId::kFfnGateExps || id == TensorId::kFfnUpExps || id == TensorId::kFfnGateExpsBias ||
         id == TensorId::kFfnUpExpsBias;
}

// Which of gate_up's interleaved rows a declaration reads: gate the even ones, up the odd ones (transformers'
// GptOssExperts: gate = gate_up[..., ::2], up = gate_up[..., 1::2]).
int64_t FusedParity(TensorId id) { return id == TensorId::kFfnUpExps || id == TensorId::kFfnUpExpsBias ? 1 : 0; }

// HF gpt-oss experts (ArchSpec::hf_oai_experts) as per-expert {rows, cols} views the model builds
// (Model::pending_weights: written once, by CopyWeights or BuildPendingWeights).
// gate/up come from the fused gate_up_proj (every second row), down from down_proj. MXFP4 `_blocks` [E, R, nb, 16]
// (or flattened [E, R, nb * 16]) with `_scales` [E, R, nb] (R = the file's rows, nb = cols / 32) become ggml's
// block_mxfp4 rows; float tensors [E, cols, R] (x @ W) are transposed, keeping their type.
Status LoadOaiExperts(const TensorSource& src, const Names& N, const TensorDecl& d) {
  const int64_t E = d.shape[0], rows = d.shape[1], cols = d.shape[2];
  const bool fused = IsFusedGateUp(d.id);
  const int64_t stride = fused ? 2 : 1, parity = fused ? FusedParity(d.id) : 0, R = rows * stride;
  const std::string name = N(d);
  std::vector<TensorView>& out = *d.experts;
  out.assign(static_cast<size_t>(E), TensorView{});
  auto numel = [](const TensorView& t) {
    int64_t n = 1;
    for (int64_t x : t.shape) n *= x;
    return n;
  };
  if (const TensorView* blocks = src.find(name + "_blocks")) {
    const TensorView* scales = src.find(name + "_scales");
    if (!scales) return NotFound(src.file + ": '" + name + "_blocks' has no '" + name + "_scales'");
    if (cols % 32) return InvalidArgument(src.file + ": '" + name + "_blocks': MXFP4 rows must be a multiple of 32 wide");
    const int64_t nb = cols / 32;
    const bool shape_ok = (blocks->shape == std::vector<int64_t>{E, R, nb, 16} || blocks->shape == std::vector<int64_t>{E, R, nb * 16}) &&
                          scales->shape == std::vector<int64_t>{E, R, nb};
    if (blocks->dtype != DType::kU8 || scales->dtype != DType::kU8 || !shape_ok || numel(*blocks) != E * R * nb * 16)
      return InvalidArgument(src.file + ": '" + name + "_blocks' / '_scales' must be U8 [" + std::to_string(E) + ", " +
                             std::to_string(R) + ", " + std::to_string(nb) + ", 16] / [.., " + std::to_string(nb) +
                             "], are " + DTypeName(blocks->dtype) + " " + blocks->ShapeString() + " / " +
                             DTypeName(scales->dtype) + " " + scales->ShapeString());
    const size_t row_bytes = static_cast<size_t>(nb) * sizeof(BlockMXFP4), expert_bytes = row_bytes * static_cast<size_t>(rows);
    const uint8_t* hb = static_cast<const uint8_t*>(blocks->data);
    const uint8_t* hs = static_cast<const uint8_t*>(scales->data);
    for (int64_t e = 0; e < E; ++e) {
      TensorView& v = out[static_cast<size_t>(e)];
      v.dtype = DType::kMXFP4;
      v.shape = {rows, cols};
      v.nbytes = expert_bytes;
      src.pending->push_back({&v, [=](uint8_t* dst) {
                                for (int64_t r = 0; r < rows; ++r) {
                                  const int64_t sr = e * R + r * stride + parity;  // the file's row
                                  HfMxfp4ToBlocks(hb + sr * nb * 16, hs + sr * nb,
                                                  reinterpret_cast<BlockMXFP4*>(dst + static_cast<size_t>(r) * row_bytes),
                                                  static_cast<size_t>(nb));
                                }
                              }});
    }
    return Status::Ok();
  }
  const TensorView* w = src.find(name);
  if (!w) return NotFound(src.file + ": missing tensor '" + name + "' (or its MXFP4 '" + name + "_blocks' / '_scales')");
  if (w->shape != std::vector<int64_t>{E, cols, R})
    return InvalidArgument(src.file + ": tensor '" + name + "' has shape " + w->ShapeString() + ", expected [" +
                           std::to_string(E) + ", " + std::to_string(cols) + ", " + std::to_string(R) + "]");
  if (w->dtype != DType::kF32 && w->dtype != DType::kF16 && w->dtype != DType::kBF16)
    return InvalidArgument(src.file + ": tensor '" + name + "' must be f32, f16 or bf16 (or MXFP4 _blocks/_scales), is " + DTypeName(w->dtype));
  const size_t es = GetDTypeInfo(w->dtype).block_bytes, expert_bytes = es * static_cast<size_t>(rows * cols);
  const uint8_t* in = static_cast<const uint8_t*>(w->data);
  for (int64_t e = 0; e < E; ++e) {
    TensorView& v = out[static_cast<size_t>(e)];
    v.dtype = w->dtype;
    v.shape = {rows, cols};
    v.nbytes = expert_bytes;
    src.pending->push_back({&v, [=](uint8_t* dst) {
                              for (int64_t c = 0; c < cols; ++c) {
                                const uint8_t* line = in + (static_cast<size_t>(e * cols + c) * static_cast<size_t>(R)) * es;  // in[e][c][:]
                                for (int64_t r = 0; r < rows; ++r)
                                  std::memcpy(dst + static_cast<size_t>(r * cols + c) * es, line + static_cast<size_t>(r * stride + parity) * es, es);
                              }
                            }});
  }
  return Status::Ok();
}

// Reads the tensors of one list (model/arch/tensor_decl.h) into the members they declare.
Status LoadTensors(const ModelConfig& c, const TensorSource& src, const Names& N, const TensorList& list) {
  const bool oai = N.format == WeightFormat::kHf && N.arch.hf_oai_experts;  // gpt-oss's fused HF experts
  bool previous = true;  // whether the declaration before this one was read
  for (const TensorDecl& d : list) {
    const std::string name = N(d);
    bool present = true;
    switch (d.presence) {
      case Presence::kRequired:
        if (name.empty() && d.form != TensorForm::kInputHalves)
          return Internal(src.file + ": a required tensor has no name in this format");
        break;
      case Presence::kOptional: present = src.find(name) != nullptr; break;
      case Presence::kIfPresent: present = d.with_previous ? previous : src.find(name) != nullptr; break;
      case Presence::kNotStored: present = false; break;
    }
    if (name.empty() && d.form != TensorForm::kInputHalves) present = false;  // the format does not store it
    previous = present;
    if (!present) {  // the stand-in, else the member stays empty
      if (d.fallback_matrix) *d.matrix = *d.fallback_matrix;
      if (d.fallback_vector) *d.vector = *d.fallback_vector;
      continue;
    }
    switch (d.form) {
      case TensorForm::kMatrix: DI_RETURN_IF_ERROR(Expect(src, name, d.shape, d.matrix)); break;
      case TensorForm::kVector:
        DI_RETURN_IF_ERROR(ExpectVec(src, name, d.shape[0], d.vector));
        if (d.norm && N.format == WeightFormat::kHf && N.arch.hf_norm_offset != 0.f)
          for (float& x : *d.vector) x += N.arch.hf_norm_offset;  // in f32, as llama.cpp's converter adds it
        break;
      case TensorForm::kExpertVectors: {  // {E, n} in any float type, held as E * n f32
        TensorView t;
        if (oai && IsFusedGateUp(d.id)) {  // gpt-oss's gate_up_proj_bias [E, 2n]: every second element
          const int64_t E = d.shape[0], n = d.shape[1];
          DI_RETURN_IF_ERROR(Expect(src, name, {E, 2 * n}, &t));
          if (GetDTypeInfo(t.dtype).block_elems != 1 || t.dtype == DType::kF8E4M3 || t.dtype == DType::kU8 || t.dtype == DType::kI32 || t.dtype == DType::kI64)
            return InvalidArgument(src.file + ": tensor '" + name + "' must be f32, f16 or bf16");
          std::vector<float> both(static_cast<size_t>(E * 2 * n));
          DequantizeRow(t.dtype, t.data, both.data(), both.size());
          d.vector->resize(static_cast<size_t>(E * n));
          for (int64_t i = 0; i < E * n; ++i) (*d.vector)[static_cast<size_t>(i)] = both[static_cast<size_t>(2 * i + FusedParity(d.id))];
          break;
        }
        DI_RETURN_IF_ERROR(Expect(src, name, d.shape, &t));
        if (GetDTypeInfo(t.dtype).block_elems != 1 || t.dtype == DType::kF8E4M3)
          return InvalidArgument(src.file + ": tensor '" + name + "' must be f32, f16 or bf16");
        d.vector->resize(static_cast<size_t>(d.shape[0] * d.shape[1]));
        DequantizeRow(t.dtype, t.data, d.vector->data(), d.vector->size());
        break;
      }
      case TensorForm::kGateVector:
        DI_RETURN_IF_ERROR(Expect(src, name, d.shape, d.matrix));
        d.matrix->shape = d.shape;  // GGUF stores it as a vector {n}
        break;
      case TensorForm::kExperts:
        DI_RETURN_IF_ERROR(oai ? LoadOaiExperts(src, N, d) : LoadExperts(src, N, d));
        break;
      case TensorForm::kInputHalves:
        if (N.format == WeightFormat::kHf) DI_RETURN_IF_ERROR(LoadInputHalves(src, N, d));
        else DI_RETURN_IF_ERROR(Expect(src, name, d.shape, d.matrix));
        break;
      case TensorForm::kMlaKvB:
        DI_RETURN_IF_ERROR(LoadMlaKvB(c, src, N, d, *list.Find(TensorForm::kMlaKB), *list.Find(TensorForm::kMlaVB)));
        break;
      case TensorForm::kMlaKB:
      case TensorForm::kMlaVB: break;  // read with kv_b, in whichever form the file has
      case TensorForm::kTokenExperts: {
        TensorView t;
        DI_RETURN_IF_ERROR(Expect(src, name, d.shape, &t));
        // i32 (GGUF, DeepSeek's checkpoints as make-tiny writes them) or i64 (a torch long buffer, as a checkpoint
        // saved by transformers may hold it; llama.cpp's converter narrows it to i32 too).
        if (t.dtype != DType::kI32 && t.dtype != DType::kI64)
          return InvalidArgument(src.file + ": tensor '" + name + "' must be i32 or i64, not " + DTypeName(t.dtype));
        const size_t count = static_cast<size_t>(d.shape[0] * d.shape[1]);
        d.ints->resize(count);
        for (size_t i = 0; i < count; ++i) {
          int64_t e;
          if (t.dtype == DType::kI64) {
            std::memcpy(&e, static_cast<const uint8_t*>(t.data) + i * 8, 8);
          } else {
            int32_t e32;
            std::memcpy(&e32, static_cast<const uint8_t*>(t.data) + i * 4, 4);
            e = e32;
          }
          if (e < 0 || e >= c.n_experts)
            return InvalidArgument(src.file + ": tensor '" + name + "' holds an expert id out of range: " + std::to_string(e));
          (*d.ints)[i] = static_cast<int32_t>(e);
        }
        break;
      }
    }
  }
  return Status::Ok();
}

// `spelling`: the family, or the layout of its HF checkpoints this one has (PickHfLayout).
Status LoadWeights(Model& m, const TensorSource& src, WeightFormat format, const ArchSpec& spelling) {
  const ModelConfig& c = m.config;
  const Names N{spelling, format};
  ModelTensors t = DeclareModelTensors(c, m);
  DI_RETURN_IF_ERROR(LoadTensors(c, src, N, t.embedding));
  DI_RETURN_IF_ERROR(LoadTensors(c, src, N, t.head));
  if (m.lm_head.data == m.tok_embd.data) m.config.tie_embeddings = true;  // the checkpoint has no head of its own
  for (const TensorList& layer : t.layers) DI_RETURN_IF_ERROR(LoadTensors(c, src, N, layer));
  // MTP modules follow the last layer. A GGUF converted without them ("trunk only") still loads, without MTP.
  if (!t.mtp.empty()) {
    const TensorList& own = t.mtp[0].own;
    auto d = std::find_if(own.begin(), own.end(), [](const TensorDecl& x) { return x.presence == Presence::kRequired; });
    if (d == own.end() || !src.find(N(*d))) {
      DI_LOG_INFO("%s: the config announces %d MTP module(s) but the weights hold none; loading without MTP",
                  src.file.c_str(), m.config.n_mtp);
      t.mtp.clear();
      m.mtp.clear();
      m.config.n_mtp = 0;
    }
  }
  for (const ModelTensors::Mtp& p : t.mtp) {
    DI_RETURN_IF_ERROR(LoadTensors(c, src, N, p.layer));
    DI_RETURN_IF_ERROR(LoadTensors(c, src, N, p.own));
  }
  return Status::Ok();
}

// The names of the tensors a checkpoint of `c` holds in `spelling`'s HF layout (the decoder's: an MTP block is
// read where present, not required), each mapped to nothing.
std::map<std::string, int> HfLayoutNames(const ModelConfig& c, const ArchSpec& spelling) {
  Model scratch;
  const ModelTensors plan = DeclareModelTensors(c, scratch);
  const Names N{spelling, WeightFormat::kHf};
  std::map<std::string, int> names;
  std::vector<const TensorList*> lists = {&plan.embedding, &plan.head};
  for (const TensorList& layer : plan.layers) lists.push_back(&layer);
  for (const TensorList* list : lists)
    for (const TensorDecl& d : *list) {
      if (d.form == TensorForm::kInputHalves) continue;
      const bool per_expert = d.form == TensorForm::kExperts && !spelling.hf_fused_experts && !spelling.hf_oai_experts;
      for (int e = 0; e < (per_expert ? d.shape[0] : 1); ++e)
        if (std::string n = N(d, per_expert ? e : -1); !n.empty()) names.emplace(std::move(n), 0);
    }
  return names;
}

// Which of the family's HF layouts (ArchSpec::hf_alt_layout) a directory is written in, by the tensor names it
// holds: the family's own unless it holds names only the other layout has. A directory holding names of both is
// refused, naming one of each (the loader would otherwise read half a model).
StatusOr<const ArchSpec*> PickHfLayout(const ModelConfig& c, const SafetensorsModel& st, const std::string& dir) {
  const ArchSpec& own = GetArch(c.arch);
  if (!own.hf_alt_layout) return &own;
  const ArchSpec& alt = own.hf_alt_layout();
  const std::map<std::string, int> own_names = HfLayoutNames(c, own), alt_names = HfLayoutNames(c, alt);
  std::string own_hit, alt_hit;
  for (const auto& [name, view] : st.tensors()) {
    if (own_hit.empty() && own_names.count(name) && !alt_names.count(name)) own_hit = name;
    if (alt_hit.empty() && alt_names.count(name) && !own_names.count(name)) alt_hit = name;
  }
  if (!own_hit.empty() && !alt_hit.empty())
    return InvalidArgument(dir + ": " + own.name + " checkpoint mixes two tensor layouts: '" + own_hit + "' is a " +
                           own.hf_layout + "-layout name, '" + alt_hit + "' a " + alt.hf_layout + "-layout one (one layout per directory)");
  if (!alt_hit.empty()) DI_LOG_INFO("%s: %s's HF tensor layout", dir.c_str(), alt.hf_layout);
  return alt_hit.empty() ? &own : &alt;
}

StatusOr<std::unique_ptr<Model>> LoadGguf(const std::string& path, const dist::ParallelConfig* split) {
  DI_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> g, GgufFile::Open(path));
  auto m = std::make_unique<Model>();
  m->source = path;
  m->format = "gguf";
  DI_ASSIGN_OR_RETURN(m->config, ParseGgufConfig(*g));
  if (split) DI_RETURN_IF_ERROR(CheckModelSplit(*split, m->config));
  GgufFile* gp = g.get();
  TensorSource src{path, [gp](const std::string& n) { return gp->FindTensor(n); }};
  DI_RETURN_IF_ERROR(LoadWeights(*m, src, WeightFormat::kGguf, GetArch(m->config.arch)));
  DI_ASSIGN_OR_RETURN(m->tokenizer, TokenizerFromGguf(*g));
  if (m->tokenizer->vocab_size() != m->config.vocab_size)
    DI_LOG_WARN("%s: tokenizer has %d tokens, embeddings %d", path.c_str(), m->tokenizer->vocab_size(), m->config.vocab_size);
  m->gguf = std::move(g);
  return m;
}

// A DeepSeek-V4 GGUF's MTP block from an MTP GGUF (ModelOptions::mtp_model): the same model's configuration with
// one block more (its nextn tensors, and its own head collapse under the root output_hc_* names). Only the
// block's tensors are read; the file stays mapped with the model.
Status AttachMtpGguf(Model& m, const std::string& path) {
  ModelConfig& c = m.config;
  if (m.format != "gguf" || !c.is_dsv4())
    return InvalidArgument("--mtp-model " + path + ": an MTP GGUF joins a DeepSeek-V4 (deepseek4) GGUF; " + m.source +
                           " is " + (m.format == "gguf" ? "another architecture" : "not a GGUF"));
  if (c.n_mtp > 0) return InvalidArgument("--mtp-model " + path + ": " + m.source + " holds an MTP block of its own");
  DI_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> g, GgufFile::Open(path));
  DI_ASSIGN_OR_RETURN(ModelConfig mc, ParseGgufConfig(*g));
  auto differs = [&](const char* what, int64_t mine, int64_t theirs) {
    return InvalidArgument("--mtp-model " + path + ": not this model's MTP block (" + what + " " + std::to_string(theirs) +
                           ", the model's " + std::to_string(mine) + ")");
  };
  if (mc.arch != c.arch) return InvalidArgument("--mtp-model " + path + ": not a deepseek4 GGUF");
  if (mc.n_mtp != 1) return differs("MTP blocks (nextn_predict_layers)", 1, mc.n_mtp);
  const std::pair<const char*, std::pair<int64_t, int64_t>> same[] = {
      {"decoder layers", {c.n_layers, mc.n_layers}},         {"hidden size", {c.hidden, mc.hidden}},
      {"vocabulary", {c.vocab_size, mc.vocab_size}},         {"heads", {c.n_heads, mc.n_heads}},
      {"head size", {c.head_dim, mc.head_dim}},              {"q LoRA rank", {c.q_lora_rank, mc.q_lora_rank}},
      {"experts", {c.n_experts, mc.n_experts}},              {"hyper-connection streams", {c.dsv4.hc, mc.dsv4.hc}},
      {"sliding window", {c.sliding_window, mc.sliding_window}}};
  for (const auto& [what, v] : same)
    if (v.first != v.second) return differs(what, v.first, v.second);
  for (int l = 0; l < c.n_layers; ++l)
    if (mc.dsv4.compress_ratio[static_cast<size_t>(l)] != c.dsv4.compress_ratio[static_cast<size_t>(l)])
      return differs(("layer " + std::to_string(l) + "'s compression ratio").c_str(),
                     c.dsv4.compress_ratio[static_cast<size_t>(l)], mc.dsv4.compress_ratio[static_cast<size_t>(l)]);
  // The per-layer arrays with the block's entries, and the block.
  c.n_mtp = 1;
  c.dsv4.compress_ratio = mc.dsv4.compress_ratio;
  c.dsv4.swiglu_limit = mc.dsv4.swiglu_limit;
  c.dsv4.swiglu_limit_shared = mc.dsv4.swiglu_limit_shared;
  const ModelTensors t = DeclareModelTensors(c, m);
  // The block's own head collapse, which this file holds under the model's names (required here).
  TensorList hc(c.n_layers, 0);
  for (const TensorDecl& d : t.mtp[0].own)
    if (const TensorId root = MtpHcAsRoot(d.id); root != TensorId::kCount) {
      if (d.form == TensorForm::kExpertVectors) hc.ExpertVectors(root, d.shape[0], d.shape[1], d.vector, 0.f);
      else hc.Vector(root, d.shape[0], d.vector, 0.f, 0.f);
    }
  const Names N{GetArch(c.arch), WeightFormat::kGguf};
  GgufFile* gp = g.get();
  TensorSource src{path, [gp](const std::string& n) { return gp->FindTensor(n); }};
  const std::string probe = N(TensorId::kMtpEhProj, c.n_layers, -1, 0);
  if (!src.find(probe)) return InvalidArgument("--mtp-model " + path + ": no MTP block in it ('" + probe + "' is missing)");
  DI_RETURN_IF_ERROR(LoadTensors(c, src, N, t.mtp[0].layer));
  DI_RETURN_IF_ERROR(LoadTensors(c, src, N, t.mtp[0].own));
  DI_RETURN_IF_ERROR(LoadTensors(c, src, N, hc));
  m.mtp_gguf = std::move(g);
  DI_LOG_INFO("%s: MTP block (layer %d) from %s", m.source.c_str(), c.n_layers, path.c_str());
  return Status::Ok();
}

StatusOr<std::unique_ptr<Model>> LoadHf(const std::string& dir, const dist::ParallelConfig* split) {
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
  if (const char* why = GetArch(m->config.arch).hf_weights_unsupported) return Unimplemented(dir + ": " + why);
  if (split) DI_RETURN_IF_ERROR(CheckModelSplit(*split, m->config));
  DI_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsModel> st, SafetensorsModel::OpenDir(dir));
  SafetensorsModel* sp = st.get();
  DI_ASSIGN_OR_RETURN(const ArchSpec* spelling, PickHfLayout(m->config, *sp, dir));
  // A multimodal checkpoint holds its language model under a prefix: model.language_model.* (transformers 4.52+)
  // or language_model.model.* with language_model.lm_head (before). The names the families declare are the text
  // model's own ("model.", "lm_head."), so they are rewritten to the wrapper's.
  std::string body = "model.", head = "lm_head.";
  const std::string embd = TensorName(*spelling, WeightFormat::kHf, TensorId::kTokEmbd);
  if (!sp->Find(embd) && embd.rfind("model.", 0) == 0) {
    if (sp->Find("model.language_model." + embd.substr(6))) body = "model.language_model.";
    else if (sp->Find("language_model." + embd)) body = "language_model.model.", head = "language_model.lm_head.";
    if (body != "model.") DI_LOG_INFO("%s: the language model of a multimodal checkpoint (%s*)", dir.c_str(), body.c_str());
  }
  TensorSource src{dir, [sp, body, head](const std::string& n) {
                     if (body != "model." && n.rfind("model.", 0) == 0) return sp->Find(body + n.substr(6));
                     if (head != "lm_head." && n.rfind("lm_head.", 0) == 0) return sp->Find(head + n.substr(8));
                     return sp->Find(n);
                   },
                   &m->pending_weights, spelling->hf_e8m0_scales, &m->loaded_scales};
  DI_RETURN_IF_ERROR(LoadWeights(*m, src, WeightFormat::kHf, *spelling));
  DI_ASSIGN_OR_RETURN(m->tokenizer, TokenizerFromHfDir(dir));
  m->safetensors = std::move(st);
  return m;
}

// Builds the pending weights into one buffer of their own (kept in shard_buffers): for weights that stay mmapped
// and for sharding, which reads every view's data. One task per weight, spread over the pool.
Status BuildPendingWeights(Model& m) {
  if (m.pending_weights.empty()) return Status::Ok();
  constexpr size_t kAlign = 64;
  size_t total = 0;
  std::vector<size_t> offsets;
  for (const Model::PendingWeight& p : m.pending_weights) {
    offsets.push_back(total);
    total += (p.view->nbytes + kAlign - 1) / kAlign * kAlign;
  }
  DI_ASSIGN_OR_RETURN(std::unique_ptr<HostBuffer> buf, HostBuffer::Allocate(total));
  uint8_t* base = buf->data();
  ComputePool().Run([&](int tid, int nt) {
    for (size_t i = tid; i < m.pending_weights.size(); i += nt) m.pending_weights[i].fill(base + offsets[i]);
  });
  for (size_t i = 0; i < m.pending_weights.size(); ++i) m.pending_weights[i].view->data = base + offsets[i];
  m.shard_buffers.push_back(std::move(buf));
  m.pending_weights.clear();
  return Status::Ok();
}

// Matrices the forward passes only multiply by (MatMul, MatMulMany: whole matrices, or row slices of whole 16-row
// groups under tensor parallelism, cut before the copy), which the ops may therefore regroup into a layout of
// their own (Ops::RegroupForMatMul); the embedding too (its rows are looked up through Ops::MatrixRow, and tied,
// it is the head). Not MLA's and DeepSeek-V4's matrices, which are cut per head at run time.
bool OnlyMatMulReads(const TensorDecl& d) {
  switch (d.id) {
    case TensorId::kOutput:
    case TensorId::kAttnQ:
    case TensorId::kAttnK:
    case TensorId::kAttnV:
    case TensorId::kAttnOut:
    case TensorId::kFfnGate:
    case TensorId::kFfnUp:
    case TensorId::kFfnDown:
      return d.form == TensorForm::kMatrix;
    default:
      return false;
  }
}

// Copies every declared weight matrix into one anonymous huge-page buffer (in parallel, with a progress bar) and
// points the model's views at the copies. Views that stand in for another (a tied head, an MTP module's borrowed
// embedding and head) are not copied again: they are pointed at their original's copy afterwards. Pending weights
// are built in their place (no second copy); if the weights stay mmapped, in a buffer of their own.
Status CopyWeights(Model& m, const LoadOptions& opts) {
  std::unordered_map<const TensorView*, const Model::PendingWeight*> pending;
  for (const Model::PendingWeight& p : m.pending_weights) pending[p.view] = &p;
  const ModelTensors plan = DeclareModelTensors(m.config, m);
  std::vector<const TensorList*> lists = {&plan.embedding, &plan.head};  // a head before the MTP modules borrowing it
  for (const TensorList& layer : plan.layers) lists.push_back(&layer);
  for (const ModelTensors::Mtp& p : plan.mtp) lists.insert(lists.end(), {&p.layer, &p.own});
  std::vector<TensorView*> views;
  std::vector<const TensorDecl*> stand_ins;
  std::vector<TensorView*> regroup;  // matrices only MatMul reads (Ops::RegroupForMatMul), once copied
  for (const TensorList* list : lists)
    for (const TensorDecl& d : *list) {
      if (d.experts) {
        for (TensorView& t : *d.experts)  // expert parallelism: only the experts this rank holds have data
          if (t.data || pending.count(&t)) views.push_back(&t);
      } else if (d.matrix && (d.matrix->data || pending.count(d.matrix))) {
        if (d.fallback_matrix && d.matrix->data && d.matrix->data == d.fallback_matrix->data) stand_ins.push_back(&d);
        else views.push_back(d.matrix);
        if (views.back() == d.matrix && d.mtp < 0 && (OnlyMatMulReads(d) || d.id == TensorId::kTokEmbd))
          regroup.push_back(d.matrix);
      }
    }
  constexpr size_t kAlign = 4096;
  size_t total = 0;
  for (auto* t : views) total += (t->nbytes + kAlign - 1) / kAlign * kAlign;
  if (opts.placement == WeightPlacement::kAuto) {
    const size_t avail = AvailableMemoryBytes();
    if (avail == 0 || total > avail / 10 * 6) {
      DI_LOG_INFO("weights stay mmapped (%.2f GB; %.2f GB available)", total / 1e9, avail / 1e9);
      return BuildPendingWeights(m);
    }
  }
  DI_ASSIGN_OR_RETURN(m.weights, HostBuffer::Allocate(total));
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
  // Chunks of all tensors, spread over the pool: each thread copies (and first-touches) its own chunks. A
  // pending weight is one chunk, built where it goes.
  std::vector<std::pair<size_t, size_t>> chunks;  // (view index, byte offset)
  for (size_t i = 0; i < views.size(); ++i) {
    if (pending.count(views[i])) chunks.emplace_back(i, 0);
    else
      for (size_t b = 0; b < views[i]->nbytes; b += kChunk) chunks.emplace_back(i, b);
  }
  ComputePool().Run([&](int tid, int nt) {
    for (size_t c = tid; c < chunks.size(); c += nt) {
      auto [i, b] = chunks[c];
      size_t n = std::min(kChunk, views[i]->nbytes - b);
      if (auto p = pending.find(views[i]); p != pending.end()) {
        p->second->fill(m.weights->data() + offsets[i]);
        n = views[i]->nbytes;
      } else {
        std::memcpy(m.weights->data() + offsets[i] + b, static_cast<const uint8_t*>(views[i]->data) + b, n);
      }
      const size_t done = copied.fetch_add(n) + n;
      if (bar && tid == 0) bar->Update(done);
    }
  });
  if (bar) {
    bar->Update(total);
    bar->Finish();
  }
  for (size_t i = 0; i < views.size(); ++i) views[i]->data = m.weights->data() + offsets[i];
  std::erase_if(m.pending_weights, [](const Model::PendingWeight& p) { return p.view->data != nullptr; });
  if (!m.pending_weights.empty())  // a built weight outside the declared lists: nothing would own its bytes
    return Internal("loader: " + std::to_string(m.pending_weights.size()) + " built weights are not in the model's tensor lists");
  // Regrouped before the stand-ins copy their originals' views, so a stand-in sees its original's layout.
  std::atomic<int> regrouped{0};
  ComputePool().Run([&](int tid, int nt) {
    for (size_t i = tid; i < regroup.size(); i += nt)
      if (OpsFor(Device::kCpu).RegroupForMatMul(*regroup[i])) regrouped.fetch_add(1);
  });
  for (const TensorDecl* d : stand_ins) *d->matrix = *d->fallback_matrix;
  DI_LOG_DEBUG("weights copied into %.2f GB of huge-page memory (%d matrices regrouped for the kernels)", total / 1e9,
               regrouped.load());
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<Model>> LoadModelFromPath(const std::string& path, const LoadOptions& opts) {
  namespace fs = std::filesystem;
  std::error_code ec;
  StatusOr<std::unique_ptr<Model>> m = Status(StatusCode::kNotFound, path + ": no such file or directory");
  if (fs::is_directory(path, ec)) m = LoadHf(path, opts.split);
  else if (fs::exists(path, ec)) m = LoadGguf(path, opts.split);
  if (!m.ok()) return m;
  if (!opts.mtp_model.empty()) DI_RETURN_IF_ERROR(AttachMtpGguf(**m, opts.mtp_model));
  if (opts.split && !opts.split->single()) {
    DI_RETURN_IF_ERROR(BuildPendingWeights(**m));  // sharding reads every view
    DI_RETURN_IF_ERROR(ShardModel(**m, *opts.split));
  }
  if (opts.placement == WeightPlacement::kMmap) {
    DI_RETURN_IF_ERROR(BuildPendingWeights(**m));
    return m;
  }
  DI_RETURN_IF_ERROR(CopyWeights(**m, opts));
  if ((*m)->weights) (*m)->shard_buffers.clear();  // the tensor-parallel slices were copied again with the rest
  return m;
}

}  // namespace deepinfer
