#include "model/convert.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include "base/logging.h"
#include "base/progress.h"
#include "base/thread_pool.h"
#include "format/gguf.h"
#include "model/arch/arch.h"
#include "model/arch/model_tensors.h"
#include "model/layers/linear.h"
#include "model/model.h"
#include "tokenizer/gguf_vocab_export.h"

namespace deepinfer {
namespace {

// llama.cpp's per-tensor type choice for a file type (llama-quant.cpp, llama_tensor_get_type and
// tensor_type_fallback, for the non-Falcon architectures convert writes). llama.cpp counts attn_v and (dense)
// ffn_down tensors in load order, one per layer, so the count is the layer number in the name here, which makes
// the choice independent of the order tensors are written in.
class LlamaMix {
 public:
  // n_gqa: query heads per KV head (llama.cpp's hparams.n_gqa()); is_70b: llama.cpp's LLM_TYPE_70B (a llama with
  // 80 layers and grouped KV heads), whose attn_v gets q5_K where the mix would give q3_K / q4_K.
  LlamaMix(int ftype, DType base, int n_layers_all, int n_attn_v, int n_expert, bool tied, int n_gqa = 1,
           bool is_70b = false)
      : ftype_(ftype), base_(base), n_layers_(n_layers_all), n_attn_v_(n_attn_v), n_expert_(n_expert), tied_(tied),
        n_gqa_(n_gqa), is_70b_(is_70b) {}

  DType Type(const std::string& name, int64_t cols) {
    auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
    int layer = 0;
    std::sscanf(name.c_str(), "blk.%d.", &layer);
    auto more_bits = [](int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; };
    // MXFP4_MOE: the stacked experts in MXFP4, every other matrix (head and embedding included) in q8_0.
    if (ftype_ == kMXFP4_MOE) return Fallback(name.find("_exps.") != std::string::npos ? DType::kMXFP4 : DType::kQ8_0, cols);
    const bool km = ftype_ == kQ4_K_M || ftype_ == kQ5_K_M;
    DType t = base_;
    if (name == "output.weight" || (tied_ && name == "token_embd.weight")) {
      if (cols % GetDTypeInfo(base_).block_elems) t = DType::kQ8_0;
      else if (base_ != DType::kQ8_0) t = DType::kQ6_K;
    } else if (name == "token_embd.weight") {
    } else if (AttnVLike(name)) {
      if (ftype_ == kQ2_K) t = n_gqa_ >= 4 ? DType::kQ4_K : DType::kQ3_K;
      else if (ftype_ == kQ3_K_M) t = layer < 2 ? DType::kQ5_K : DType::kQ4_K;
      else if (ftype_ == kQ3_K_L) t = DType::kQ5_K;
      else if (km && more_bits(layer, n_attn_v_)) t = DType::kQ6_K;
      else if (ftype_ == kQ4_K_S && layer < 4) t = DType::kQ5_K;
      if (is_70b_ && (t == DType::kQ3_K || t == DType::kQ4_K)) t = DType::kQ5_K;
      if (n_expert_ == 8) t = DType::kQ8_0;
    } else if (has("attn_k.weight")) {
      if (n_expert_ == 8) t = DType::kQ8_0;
    } else if (has("attn_output.weight")) {
      if (n_expert_ == 8) {
        if (ftype_ == kQ2_K || ftype_ == kQ3_K_S || ftype_ == kQ3_K_M || ftype_ == kQ4_K_S || ftype_ == kQ4_K_M)
          t = DType::kQ5_K;
      } else if (ftype_ == kQ2_K) {
        t = DType::kQ3_K;
      } else if (ftype_ == kQ3_K_M) {
        t = DType::kQ4_K;
      } else if (ftype_ == kQ3_K_L) {
        t = DType::kQ5_K;
      }
    } else if (has("ffn_down")) {
      if (ftype_ == kQ2_K) t = DType::kQ3_K;
      else if (ftype_ == kQ3_K_M) t = layer < n_layers_ / 16 ? DType::kQ5_K : DType::kQ4_K;
      else if (ftype_ == kQ3_K_L) t = DType::kQ5_K;
      else if (km && more_bits(layer, n_layers_)) t = DType::kQ6_K;
      else if (ftype_ == kQ4_K_S && layer < n_layers_ / 8) t = DType::kQ5_K;
    }
    return Fallback(t, cols);
  }

  // llama.cpp's attention-V-like tensors (category_is_attn_v): more sensitive to quantization.
  static bool AttnVLike(const std::string& name) {
    for (const char* s : {"attn_v.weight", "attn_qkv.weight", "attn_kv_b.weight"})
      if (name.find(s) != std::string::npos) return true;
    return false;
  }

  // A type whose block does not divide the row: llama.cpp's smaller-block substitute, else f16.
  static DType Fallback(DType t, int64_t cols) {
    if (cols % GetDTypeInfo(t).block_elems == 0) return t;
    switch (t) {
      case DType::kQ2_K:
      case DType::kQ3_K: t = DType::kQ4_0; break;
      case DType::kQ4_K: t = DType::kQ5_0; break;
      case DType::kQ5_K: t = DType::kQ5_1; break;
      case DType::kQ6_K: t = DType::kQ8_0; break;
      default: break;
    }
    return cols % GetDTypeInfo(t).block_elems ? DType::kF16 : t;
  }

  static constexpr int kQ2_K = 10, kQ3_K_S = 11, kQ3_K_M = 12, kQ3_K_L = 13, kQ4_K_S = 14, kQ4_K_M = 15, kQ5_K_S = 16,
                       kQ5_K_M = 17, kMXFP4_MOE = 38;

 private:
  int ftype_;
  DType base_;
  int n_layers_, n_attn_v_, n_expert_;
  bool tied_;
  int n_gqa_;
  bool is_70b_;
};

// fn(r, scratch) for rows [0, rows) on the compute pool, each thread a contiguous range and its own scratch row
// of cols floats. Rows are independent, so the bytes written do not depend on the thread count.
template <class F>
void ParallelRows(int64_t rows, int64_t cols, F&& fn) {
  ComputePool().Run([&](int tid, int nt) {
    const auto [r0, r1] = ThreadPool::Range(static_cast<size_t>(rows), tid, nt);
    if (r0 == r1) return;
    std::vector<float> buf(static_cast<size_t>(cols));
    for (size_t r = r0; r < r1; ++r) fn(static_cast<int64_t>(r), buf.data());
  });
}

// Writes tensors into a GgufWriter as producers: each reads its source rows when the file is written.
class TensorEmitter {
 public:
  TensorEmitter(GgufWriter& gw, DType outtype, std::unique_ptr<LlamaMix> mix)
      : gw_(gw), outtype_(outtype), mix_(std::move(mix)) {}

  // The type matrix `name` of `src` dtype and `cols` columns is written as.
  DType OutType(const std::string& name, DType src, int64_t cols) const {
    // MXFP4 (HF gpt-oss's experts, repacked by the loader) is written as it is, whatever the output type, as
    // llama.cpp's converter does: no dequantization, no requantization with other exponents.
    if (src == DType::kMXFP4) return DType::kMXFP4;
    const bool quantized = outtype_ != DType::kInvalid && GetDTypeInfo(outtype_).block_elems > 1;
    // Routers stay exact, as llama.cpp's quantizer leaves ffn_gate_inp.
    if (quantized && name.find("ffn_gate_inp") != std::string::npos) return DType::kF32;
    if (mix_) return mix_->Type(name, cols);
    if (quantized) return LlamaMix::Fallback(outtype_, cols);
    DType t = outtype_;
    if (t == DType::kInvalid) t = (src == DType::kF32 || src == DType::kF16 || src == DType::kBF16) ? src : DType::kBF16;
    return t;
  }

  // A matrix, optionally with llama-style q/k rows reordered (rotate-half -> adjacent pairs, per head).
  void Matrix(const std::string& name, const TensorView& v, int permute_heads = 0) {
    const int64_t rows = v.rows(), cols = v.cols();
    const DType t = OutType(name, v.dtype, cols);
    const std::vector<int64_t> shape = v.shape.size() > 2 ? v.shape : std::vector<int64_t>{rows, cols};
    gw_.AddTensor(name, t, shape, [v, t, rows, cols, permute_heads](std::vector<uint8_t>* out) {
      const size_t out_row = DTypeBytes(t, static_cast<size_t>(cols));
      const bool raw = t == v.dtype && !permute_heads && !v.block_scale;
      ParallelRows(rows, cols, [&](int64_t r, float* buf) {
        int64_t src = r;
        if (permute_heads) {
          const int64_t hd = rows / permute_heads, h = r / hd, j = r % hd;
          src = h * hd + (j % 2) * (hd / 2) + j / 2;
        }
        if (raw) {
          std::memcpy(out->data() + r * out_row, v.row(src), out_row);
          return;
        }
        v.RowToF32(src, buf);
        QuantizeRow(t, buf, out->data() + r * out_row, static_cast<size_t>(cols));
      });
    });
  }

  // Per-expert matrices stacked into {E, rows, cols}, as llama.cpp keeps them.
  void Stacked(const std::string& name, const std::vector<TensorView>& experts) {
    const int64_t E = static_cast<int64_t>(experts.size()), rows = experts[0].rows(), cols = experts[0].cols();
    const DType t = OutType(name, experts[0].dtype, cols);
    gw_.AddTensor(name, t, {E, rows, cols}, [experts, t, rows, cols](std::vector<uint8_t>* out) {
      const size_t out_row = DTypeBytes(t, static_cast<size_t>(cols));
      ParallelRows(static_cast<int64_t>(experts.size()) * rows, cols, [&](int64_t er, float* buf) {
        const TensorView& v = experts[er / rows];
        const int64_t r = er % rows;
        uint8_t* dst = out->data() + er * out_row;
        if (t == v.dtype && !v.block_scale) {
          std::memcpy(dst, v.row(r), out_row);
          return;
        }
        v.RowToF32(r, buf);
        QuantizeRow(t, buf, dst, static_cast<size_t>(cols));
      });
    });
  }

  // Rows of an f32 matrix held in memory (W_UK^T derived at load), in the type `like` converts to.
  void F32Rows(const std::string& name, const std::vector<float>& data, std::vector<int64_t> shape, DType like) {
    const int64_t cols = shape.back(), rows = static_cast<int64_t>(data.size()) / cols;
    const DType t = OutType(name, like, cols);
    gw_.AddTensor(name, t, shape, [&data, t, rows, cols](std::vector<uint8_t>* out) {
      const size_t out_row = DTypeBytes(t, static_cast<size_t>(cols));
      ParallelRows(rows, cols, [&](int64_t r, float*) {
        QuantizeRow(t, data.data() + r * cols, out->data() + r * out_row, static_cast<size_t>(cols));
      });
    });
  }

  // A tensor copied as it is (a GGUF input's vectors and the matrices llama.cpp leaves unquantized).
  void Raw(const std::string& name, const TensorView& v) {
    const uint8_t* p = static_cast<const uint8_t*>(v.data);
    gw_.AddTensor(name, v.dtype, v.shape, std::vector<uint8_t>(p, p + v.nbytes));
  }

  // A {1, n} weight (Qwen2-MoE's shared-expert gate) as the f32 vector {n} llama.cpp expects.
  void VectorFrom(const std::string& name, const TensorView& t) {
    std::vector<float> v(static_cast<size_t>(t.cols()));
    t.RowToF32(0, v.data());
    Vector(name, v);
  }

  // An f32 vector {n}, or of another shape (a vector per expert: {E, n}).
  void Vector(const std::string& name, const std::vector<float>& v, std::vector<int64_t> shape = {}) {
    std::vector<uint8_t> b(v.size() * sizeof(float));
    std::memcpy(b.data(), v.data(), b.size());
    if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
    gw_.AddTensor(name, DType::kF32, std::move(shape), std::move(b));
  }
  // An I32 table (DeepSeek-V4's tid2eid), as is.
  void Ints(const std::string& name, const std::vector<int32_t>& v, std::vector<int64_t> shape) {
    std::vector<uint8_t> b(v.size() * sizeof(int32_t));
    std::memcpy(b.data(), v.data(), b.size());
    gw_.AddTensor(name, DType::kI32, std::move(shape), std::move(b));
  }

 private:
  GgufWriter& gw_;
  DType outtype_;
  std::unique_ptr<LlamaMix> mix_;
};

Status CheckConvertible(const ModelConfig& c, const std::string& dir) {
  const ArchSpec& a = GetArch(c.arch);
  // A per-layer window pattern has a GGUF form only where the family writes one (gemma3).
  if (!c.swa_layers.empty() && !a.gguf_metadata)
    return Unimplemented(dir + ": cannot convert to GGUF: llama.cpp's " + a.gguf_arch + " has no per-layer sliding-window pattern");
  if (!a.gguf_convertible) return Status::Ok();
  Status s = a.gguf_convertible(c);
  if (s.ok()) return s;
  return Status(s.code(), dir + ": cannot convert to GGUF: " + s.message());
}

// `c`: what the file describes (its per-layer arrays as long as its blocks); `source`: the checkpoint's path.
void WriteMetadata(const ModelConfig& c, const std::string& source, const std::string& ga, int blocks, GgufWriter& gw) {
  const ArchSpec& a = GetArch(c.arch);
  auto k = [&](const char* key) { return ga + "." + key; };
  gw.SetString("general.architecture", ga);
  gw.SetString("general.name", source.substr(source.find_last_of('/') + 1));
  gw.SetU32("general.alignment", 32);
  gw.SetU32(k("context_length"), c.max_ctx);
  gw.SetU32(k("embedding_length"), c.hidden);
  gw.SetU32(k("block_count"), blocks);
  gw.SetU32(k("feed_forward_length"), c.intermediate);
  gw.SetU32(k("attention.head_count"), c.n_heads);
  gw.SetF32(k("rope.freq_base"), static_cast<float>(c.rope_theta));
  if (c.rope_linear_factor != 1.0) {
    gw.SetString(k("rope.scaling.type"), "linear");
    gw.SetF32(k("rope.scaling.factor"), static_cast<float>(c.rope_linear_factor));
  }
  gw.SetF32(k("attention.layer_norm_rms_epsilon"), c.rms_eps);
  gw.SetU32(k("vocab_size"), c.vocab_size);
  if (!c.mla && !c.is_dsv4()) {  // MLA and DeepSeek-V4 write their attention keys themselves
    gw.SetU32(k("attention.head_count_kv"), c.n_kv_heads);
    gw.SetU32(k("attention.key_length"), c.head_dim);
    gw.SetU32(k("attention.value_length"), c.head_dim);
    gw.SetU32(k("rope.dimension_count"), c.head_dim);
  }
  if (c.sliding_window > 0 && c.swa_layers.empty()) gw.SetU32(k("attention.sliding_window"), c.sliding_window);
  if (a.gguf_metadata) a.gguf_metadata(c, ga + ".", gw);
  if (c.n_mtp > 0 && blocks > c.n_layers) gw.SetU32(k("nextn_predict_layers"), blocks - c.n_layers);
}

// Whether the loaded model holds data of its own for `d`: not a stand-in (a tied head, an MTP module sharing the
// model's embedding), not a tensor the checkpoint did not have.
bool Holds(const TensorDecl& d) {
  switch (d.form) {
    case TensorForm::kVector:
    case TensorForm::kExpertVectors:
    case TensorForm::kMlaKB: return !d.vector->empty();
    case TensorForm::kExperts: return !d.experts->empty();
    case TensorForm::kTokenExperts: return !d.ints->empty();
    case TensorForm::kMlaVB: return true;  // from the checkpoint's v_b, or out of its kv_b
    default: return d.matrix->data && !(d.fallback_matrix && d.matrix->data == d.fallback_matrix->data);
  }
}

// One declared tensor (model/arch/tensor_decl.h) in GGUF's form; `list` is the declaration's own (the kv_b forms).
// `as`: the tensor id whose GGUF name it is written under (kCount: its own).
void WriteTensor(const ModelConfig& c, const TensorList& list, const TensorDecl& d, TensorEmitter& out,
                 TensorId as = TensorId::kCount) {
  if (!Holds(d)) return;
  const std::string name = TensorName(GetArch(c.arch), WeightFormat::kGguf, as == TensorId::kCount ? d.id : as, d.layer);
  if (name.empty()) return;  // a tensor GGUF does not store (DeepSeek-V4's MTP hc head: the model's serves)
  switch (d.form) {
    case TensorForm::kMatrix:
    case TensorForm::kInputHalves: out.Matrix(name, *d.matrix, d.gguf_permute_heads); break;
    case TensorForm::kVector: out.Vector(name, *d.vector); break;
    case TensorForm::kExpertVectors: out.Vector(name, *d.vector, d.shape); break;
    case TensorForm::kExperts: out.Stacked(name, *d.experts); break;
    case TensorForm::kGateVector: out.VectorFrom(name, *d.matrix); break;
    case TensorForm::kTokenExperts: out.Ints(name, *d.ints, d.shape); break;
    case TensorForm::kMlaKvB: break;  // written split, as llama.cpp's converter does: k_b and v_b
    case TensorForm::kMlaKB: {        // W_UK^T per head {H, kv_lora, nope}: the loader's uk_t
      const TensorView& kv_b = *list.Find(TensorForm::kMlaKvB)->matrix;
      out.F32Rows(name, *d.vector, d.shape, kv_b.data ? kv_b.dtype : list.Find(TensorForm::kMlaVB)->matrix->dtype);
      break;
    }
    case TensorForm::kMlaVB: {  // W_UV {H, v, kv_lora}: the checkpoint's v_b, or each head's W_UV rows of kv_b
      const TensorView& kv_b = *list.Find(TensorForm::kMlaKvB)->matrix;
      const int64_t H = d.shape[0], vd = d.shape[1], nope = c.qk_nope_dim;
      std::vector<TensorView> uv(static_cast<size_t>(H));
      for (int64_t hh = 0; hh < H; ++hh)
        uv[static_cast<size_t>(hh)] = d.matrix->data ? RowSlice(*d.matrix, hh * vd, vd) : RowSlice(kv_b, hh * (nope + vd) + nope, vd);
      out.Stacked(name, uv);
      break;
    }
  }
}

void WriteTensors(const ModelConfig& c, const TensorList& list, TensorEmitter& out) {
  for (const TensorDecl& d : list) WriteTensor(c, list, d, out);
}

// DeepSeek-V4's head collapse (root output_hc_*): the model's, or in an MTP GGUF the block's own (MtpHcAsRoot).
bool IsRootHc(TensorId id) {
  return id == TensorId::kOutputHcFn || id == TensorId::kOutputHcBase || id == TensorId::kOutputHcScale;
}

// The model's configuration without its MTP modules: per-layer arrays cut to the decoder layers (block_count).
ModelConfig TrunkConfig(ModelConfig c) {
  c.n_mtp = 0;
  const size_t n = static_cast<size_t>(c.n_layers);
  for (auto* v : {&c.dsv4.swiglu_limit, &c.dsv4.swiglu_limit_shared})
    if (v->size() > n) v->resize(n);
  if (c.dsv4.compress_ratio.size() > n) c.dsv4.compress_ratio.resize(n);
  return c;
}

}  // namespace

bool ParseOutType(const std::string& name, ConvertOptions* opts) {
  struct Entry { const char* name; DType type; int ftype; };
  // llama_ftype values (llama.h); -1: no llama.cpp file type, the type for every matrix.
  static const Entry kTypes[] = {
      {"f32", DType::kF32, 0},     {"f16", DType::kF16, 1},     {"bf16", DType::kBF16, 32},
      {"q8_0", DType::kQ8_0, 7},   {"q4_0", DType::kQ4_0, 2},   {"q4_1", DType::kQ4_1, 3},
      {"q5_0", DType::kQ5_0, 8},   {"q5_1", DType::kQ5_1, 9},   {"q4_k_s", DType::kQ4_K, 14},
      {"q4_k_m", DType::kQ4_K, 15}, {"q5_k_s", DType::kQ5_K, 16}, {"q5_k_m", DType::kQ5_K, 17},
      {"q6_k", DType::kQ6_K, 18},  {"q2_k", DType::kQ2_K, 10},  {"q3_k_s", DType::kQ3_K, 11},
      {"q3_k_m", DType::kQ3_K, 12}, {"q3_k_l", DType::kQ3_K, 13},
      // llama-quantize's aliases: Q3_K = Q3_K_M, Q4_K = Q4_K_M, Q5_K = Q5_K_M.
      {"q3_k", DType::kQ3_K, 12},  {"q4_k", DType::kQ4_K, 15},  {"q5_k", DType::kQ5_K, 17},
      {"mxfp4_moe", DType::kMXFP4, 38},
  };
  std::string lower = name;
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (const Entry& e : kTypes)
    if (lower == e.name) {
      opts->outtype = e.type;
      opts->ftype = e.ftype;
      return true;
    }
  return false;
}

namespace {

Status WriteWithProgress(const GgufWriter& gw, const std::string& out, const ConvertOptions& opts) {
  std::unique_ptr<ProgressBar> bar;
  DI_RETURN_IF_ERROR(gw.Write(out, [&](size_t done, size_t total) {
    if (!opts.progress) return;
    if (!bar) bar = std::make_unique<ProgressBar>("convert", total, "B");
    bar->Update(done);
  }));
  if (bar) bar->Finish();
  return Status::Ok();
}

void SetFileType(const ConvertOptions& opts, GgufWriter& gw) {
  if (opts.ftype >= 0) gw.SetU32("general.file_type", static_cast<uint32_t>(opts.ftype));
  // The block-format version llama.cpp's quantizer stamps on every quantized file (GGML_QNT_VERSION).
  if (opts.outtype != DType::kInvalid && GetDTypeInfo(opts.outtype).block_elems > 1)
    gw.SetU32("general.quantization_version", 2);
}

// f32/f16/bf16 GGUF -> another type: metadata copied, matrices re-typed as llama-quantize does (which tensors it
// quantizes: tensor_allows_quantization — 2+ dimensions, names ending in "weight", no norms, no routers).
Status ConvertGguf(const std::string& in, const std::string& out, const ConvertOptions& opts) {
  if (opts.outtype == DType::kInvalid) return InvalidArgument("convert: a GGUF input needs --outtype");
  DI_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> f, GgufFile::Open(in));
  GgufWriter gw;
  for (const auto& [k, v] : f->metadata())
    if (k != "general.file_type" && k != "general.quantization_version") gw.SetValue(k, v);
  SetFileType(opts, gw);
  DI_ASSIGN_OR_RETURN(std::string ga, f->GetString("general.architecture"));
  auto get = [&](const std::string& key) { auto r = f->GetInt(ga + "." + key); return r.ok() ? static_cast<int>(*r) : 0; };
  const int n_layers = get("block_count"), n_expert = get("expert_count");
  int n_attn_v = 0;
  for (const auto& [name, t] : f->tensors()) n_attn_v += LlamaMix::AttnVLike(name);
  std::unique_ptr<LlamaMix> mix;
  if (opts.ftype >= 0 && !opts.pure && GetDTypeInfo(opts.outtype).block_elems > 1) {
    const int heads = get("attention.head_count"), kv_heads = get("attention.head_count_kv");
    const int n_gqa = heads > 0 && kv_heads > 0 ? heads / kv_heads : 1;
    mix = std::make_unique<LlamaMix>(opts.ftype, opts.outtype, n_layers, n_attn_v, n_expert,
                                     f->FindTensor("output.weight") == nullptr, n_gqa,
                                     ga == "llama" && n_layers == 80 && n_gqa > 1);
  }
  TensorEmitter emit(gw, opts.outtype, std::move(mix));
  for (const auto& [name, t] : f->tensors()) {
    const bool matrix = t.shape.size() >= 2 && name.size() >= 6 && name.compare(name.size() - 6, 6, "weight") == 0 &&
                        name.find("_norm.weight") == std::string::npos;
    if (!matrix || name.find("ffn_gate_inp") != std::string::npos) {
      emit.Raw(name, t);
      continue;
    }
    if (t.dtype != DType::kF32 && t.dtype != DType::kF16 && t.dtype != DType::kBF16)
      return InvalidArgument(in + ": tensor " + name + " is " + DTypeName(t.dtype) +
                             "; convert re-types only f32/f16/bf16 matrices (no requantization)");
    emit.Matrix(name, t);
  }
  DI_RETURN_IF_ERROR(WriteWithProgress(gw, out, opts));
  DI_LOG_INFO("wrote %s (%s from %s)", out.c_str(), DTypeName(opts.outtype), in.c_str());
  // f must outlive the write: the producers read its mapped tensors.
  return Status::Ok();
}

}  // namespace

Status ConvertHfToGguf(const std::string& hf_dir, const std::string& out, const ConvertOptions& opts) {
  if (opts.outtype != DType::kInvalid && !CanQuantizeRow(opts.outtype))
    return InvalidArgument(std::string("convert: unsupported output type ") + DTypeName(opts.outtype));
  if (hf_dir.size() > 5 && hf_dir.compare(hf_dir.size() - 5, 5, ".gguf") == 0) return ConvertGguf(hf_dir, out, opts);
  LoadOptions lo;
  lo.placement = WeightPlacement::kMmap;
  lo.progress = false;
  DI_ASSIGN_OR_RETURN(std::unique_ptr<Model> m, LoadModelFromPath(hf_dir, lo));
  if (m->format != "hf") return InvalidArgument(hf_dir + ": convert reads a Hugging Face model directory");
  const ModelConfig& c = m->config;
  ModelConfig written = c;  // what the GGUF will describe: without the MTP modules under --no-mtp
  if (!opts.mtp) written.n_mtp = 0;
  DI_RETURN_IF_ERROR(CheckConvertible(written, hf_dir));
  if (c.mla && c.n_experts > 0 && !c.router_sigmoid && c.n_group > 1)
    DI_LOG_WARN("%s: llama.cpp ranks expert groups by their top-2 sum; this V2-style router ranks by the best score",
                hf_dir.c_str());

  GgufWriter gw;
  const ArchSpec& arch = GetArch(c.arch);
  const std::string ga = arch.gguf_arch;
  // DeepSeek-V4's MTP block has a head collapse of its own, which one GGUF cannot hold beside the model's: as
  // llama.cpp's converter does (conversion/deepseek.py, mtp_only), the block goes to a GGUF of its own beside the
  // model's (MtpGgufPath), which `--mtp-model` loads.
  const bool mtp_file = opts.mtp && c.is_dsv4() && !m->mtp.empty();
  const int n_mtp = opts.mtp && !mtp_file ? static_cast<int>(m->mtp.size()) : 0;
  WriteMetadata(n_mtp > 0 ? c : TrunkConfig(c), m->source, ga, c.n_layers + n_mtp, gw);
  DI_RETURN_IF_ERROR(ExportHfTokenizerToGguf(hf_dir, c.vocab_size, gw));

  SetFileType(opts, gw);
  std::unique_ptr<LlamaMix> mix;
  if (opts.ftype >= 0 && !opts.pure && GetDTypeInfo(opts.outtype).block_elems > 1) {
    const int n_gqa = c.n_kv_heads > 0 ? c.n_heads / c.n_kv_heads : 1;
    mix = std::make_unique<LlamaMix>(opts.ftype, opts.outtype, c.n_layers + n_mtp, c.mla ? 0 : c.n_layers + n_mtp,
                                     c.n_experts, c.tie_embeddings, n_gqa, ga == "llama" && c.n_layers == 80 && n_gqa > 1);
  }
  TensorEmitter emit(gw, opts.outtype, std::move(mix));
  const ModelTensors t = DeclareModelTensors(c, *m);
  WriteTensors(c, t.embedding, emit);
  if (!c.rope_freq_factors.empty()) emit.Vector(TensorName(arch, WeightFormat::kGguf, TensorId::kRopeFreqs), c.rope_freq_factors);
  for (const TensorList& layer : t.layers) WriteTensors(c, layer, emit);
  for (int k = 0; k < n_mtp; ++k) {
    WriteTensors(c, t.mtp[k].layer, emit);
    // The module's own copies of the model's embedding and head go after the tensors every module has: the order
    // convert's GGUFs have always had (llama.cpp finds tensors by name).
    for (const TensorDecl& d : t.mtp[k].own)
      if (!d.fallback_matrix) WriteTensor(c, t.mtp[k].own, d, emit);
    for (const TensorDecl& d : t.mtp[k].own)
      if (d.fallback_matrix) WriteTensor(c, t.mtp[k].own, d, emit);
  }
  WriteTensors(c, t.head, emit);

  DI_RETURN_IF_ERROR(WriteWithProgress(gw, out, opts));
  DI_LOG_INFO("wrote %s (%s, %d layers%s)", out.c_str(), ga.c_str(), c.n_layers, n_mtp ? " + MTP" : "");
  if (!mtp_file) return Status::Ok();

  // The MTP GGUF (llama.cpp's layout): block_count n_layers + 1 with nextn_predict_layers 1 and the arrays' MTP
  // entries, the tokenizer, the token embedding, output norm and head, the block as layer n_layers (nextn.* with
  // it), and the block's own head collapse under the root names; no decoder layer.
  if (m->mtp.size() != 1) return Unimplemented(hf_dir + ": a DeepSeek-V4 MTP GGUF holds one block");
  const std::string mtp_out = MtpGgufPath(out);
  GgufWriter mw;
  WriteMetadata(c, m->source, ga, c.n_layers + 1, mw);
  DI_RETURN_IF_ERROR(ExportHfTokenizerToGguf(hf_dir, c.vocab_size, mw));
  SetFileType(opts, mw);
  std::unique_ptr<LlamaMix> mtp_mix;
  if (opts.ftype >= 0 && !opts.pure && GetDTypeInfo(opts.outtype).block_elems > 1)
    mtp_mix = std::make_unique<LlamaMix>(opts.ftype, opts.outtype, c.n_layers + 1, c.n_layers + 1, c.n_experts,
                                         c.tie_embeddings, 1, false);
  TensorEmitter memit(mw, opts.outtype, std::move(mtp_mix));
  WriteTensors(c, t.embedding, memit);
  WriteTensors(c, t.mtp[0].layer, memit);
  for (const TensorDecl& d : t.mtp[0].own) WriteTensor(c, t.mtp[0].own, d, memit, MtpHcAsRoot(d.id));
  for (const TensorDecl& d : t.head)
    if (!IsRootHc(d.id)) WriteTensor(c, t.head, d, memit);
  DI_RETURN_IF_ERROR(WriteWithProgress(mw, mtp_out, opts));
  DI_LOG_INFO("wrote %s (%s MTP block, layer %d)", mtp_out.c_str(), ga.c_str(), c.n_layers);
  return Status::Ok();
}

std::string MtpGgufPath(const std::string& out) {
  const size_t slash = out.find_last_of('/');
  return slash == std::string::npos ? "mtp-" + out : out.substr(0, slash + 1) + "mtp-" + out.substr(slash + 1);
}

}  // namespace deepinfer
