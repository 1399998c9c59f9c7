#include "model/convert.h"

#include <cmath>
#include <cstring>
#include <memory>

#include "base/logging.h"
#include "base/progress.h"
#include "format/gguf.h"
#include "model/arch/arch.h"
#include "model/layers/linear.h"
#include "model/model.h"
#include "tokenizer/gguf_vocab_export.h"

namespace deepinfer {
namespace {

// Writes tensors into a GgufWriter as producers: each reads its source rows when the file is written.
class TensorEmitter {
 public:
  TensorEmitter(GgufWriter& gw, DType outtype) : gw_(gw), outtype_(outtype) {}

  // The type a matrix of `src` dtype and `cols` columns is written as.
  DType OutType(DType src, int64_t cols) const {
    DType t = outtype_;
    if (t == DType::kInvalid) t = (src == DType::kF32 || src == DType::kF16 || src == DType::kBF16) ? src : DType::kBF16;
    const int blk = GetDTypeInfo(t).block_elems;
    if (cols % blk) t = DType::kF32;  // a row that does not fill whole quantization blocks stays exact
    return t;
  }

  // A matrix, optionally with llama-style q/k rows reordered (rotate-half -> adjacent pairs, per head).
  void Matrix(const std::string& name, const TensorView& v, int permute_heads = 0) {
    const int64_t rows = v.rows(), cols = v.cols();
    const DType t = OutType(v.dtype, cols);
    gw_.AddTensor(name, t, {rows, cols}, [v, t, rows, cols, permute_heads](std::vector<uint8_t>* out) {
      const size_t out_row = DTypeBytes(t, static_cast<size_t>(cols));
      const bool raw = t == v.dtype && !permute_heads && !v.block_scale;
      std::vector<float> buf(static_cast<size_t>(cols));
      for (int64_t r = 0; r < rows; ++r) {
        int64_t src = r;
        if (permute_heads) {
          const int64_t hd = rows / permute_heads, h = r / hd, j = r % hd;
          src = h * hd + (j % 2) * (hd / 2) + j / 2;
        }
        if (raw) {
          std::memcpy(out->data() + r * out_row, v.row(src), out_row);
          continue;
        }
        v.RowToF32(src, buf.data());
        QuantizeRow(t, buf.data(), out->data() + r * out_row, static_cast<size_t>(cols));
      }
    });
  }

  // Per-expert matrices stacked into {E, rows, cols}, as llama.cpp keeps them.
  void Stacked(const std::string& name, const std::vector<TensorView>& experts) {
    const int64_t E = static_cast<int64_t>(experts.size()), rows = experts[0].rows(), cols = experts[0].cols();
    const DType t = OutType(experts[0].dtype, cols);
    gw_.AddTensor(name, t, {E, rows, cols}, [experts, t, rows, cols](std::vector<uint8_t>* out) {
      const size_t out_row = DTypeBytes(t, static_cast<size_t>(cols));
      std::vector<float> buf(static_cast<size_t>(cols));
      uint8_t* dst = out->data();
      for (const TensorView& v : experts)
        for (int64_t r = 0; r < rows; ++r, dst += out_row) {
          if (t == v.dtype && !v.block_scale) {
            std::memcpy(dst, v.row(r), out_row);
            continue;
          }
          v.RowToF32(r, buf.data());
          QuantizeRow(t, buf.data(), dst, static_cast<size_t>(cols));
        }
    });
  }

  // Rows of an f32 matrix held in memory (W_UK^T derived at load), in the type `like` converts to.
  void F32Rows(const std::string& name, const std::vector<float>& data, std::vector<int64_t> shape, DType like) {
    const int64_t cols = shape.back(), rows = static_cast<int64_t>(data.size()) / cols;
    const DType t = OutType(like, cols);
    gw_.AddTensor(name, t, shape, [&data, t, rows, cols](std::vector<uint8_t>* out) {
      const size_t out_row = DTypeBytes(t, static_cast<size_t>(cols));
      for (int64_t r = 0; r < rows; ++r) QuantizeRow(t, data.data() + r * cols, out->data() + r * out_row, static_cast<size_t>(cols));
    });
  }

  // A {1, n} weight (Qwen2-MoE's shared-expert gate) as the f32 vector {n} llama.cpp expects.
  void VectorFrom(const std::string& name, const TensorView& t) {
    std::vector<float> v(static_cast<size_t>(t.cols()));
    t.RowToF32(0, v.data());
    Vector(name, v);
  }

  void Vector(const std::string& name, const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * sizeof(float));
    std::memcpy(b.data(), v.data(), b.size());
    gw_.AddTensor(name, DType::kF32, {static_cast<int64_t>(v.size())}, std::move(b));
  }

 private:
  GgufWriter& gw_;
  DType outtype_;
};

Status CheckConvertible(const ModelConfig& c, const std::string& dir) {
  const ArchSpec& a = GetArch(c.arch);
  if (!a.gguf_convertible) return Status::Ok();
  Status s = a.gguf_convertible(c);
  if (s.ok()) return s;
  return Status(s.code(), dir + ": cannot convert to GGUF: " + s.message());
}

void WriteMetadata(const Model& m, const std::string& ga, int blocks, GgufWriter& gw) {
  const ModelConfig& c = m.config;
  const ArchSpec& a = GetArch(c.arch);
  auto k = [&](const char* key) { return ga + "." + key; };
  gw.SetString("general.architecture", ga);
  gw.SetString("general.name", m.source.substr(m.source.find_last_of('/') + 1));
  gw.SetU32("general.alignment", 32);
  gw.SetU32(k("context_length"), c.max_ctx);
  gw.SetU32(k("embedding_length"), c.hidden);
  gw.SetU32(k("block_count"), blocks);
  gw.SetU32(k("feed_forward_length"), c.intermediate);
  gw.SetU32(k("attention.head_count"), c.n_heads);
  gw.SetF32(k("rope.freq_base"), static_cast<float>(c.rope_theta));
  gw.SetF32(k("attention.layer_norm_rms_epsilon"), c.rms_eps);
  gw.SetU32(k("vocab_size"), c.vocab_size);
  if (!c.mla) {  // MLA families write their attention keys themselves
    gw.SetU32(k("attention.head_count_kv"), c.n_kv_heads);
    gw.SetU32(k("attention.key_length"), c.head_dim);
    gw.SetU32(k("attention.value_length"), c.head_dim);
    gw.SetU32(k("rope.dimension_count"), c.head_dim);
  }
  if (a.gguf_metadata) a.gguf_metadata(c, ga + ".", gw);
  if (c.n_mtp > 0 && blocks > c.n_layers) gw.SetU32(k("nextn_predict_layers"), blocks - c.n_layers);
}

void WriteLayer(const ModelConfig& c, const LayerWeights& L, int l, TensorEmitter& out) {
  const ArchSpec& a = GetArch(c.arch);
  auto N = [&](TensorId id) { return TensorName(a, WeightFormat::kGguf, id, l); };
  out.Vector(N(TensorId::kAttnNorm), L.attn_norm);
  if (c.mla) {
    const MlaWeights& W = L.mla;
    if (c.q_lora_rank > 0) {
      out.Matrix(N(TensorId::kAttnQA), W.wq_a);
      out.Vector(N(TensorId::kAttnQANorm), W.q_a_norm);
      out.Matrix(N(TensorId::kAttnQB), W.wq_b);
    } else {
      out.Matrix(N(TensorId::kAttnQ), W.wq);
    }
    out.Matrix(N(TensorId::kAttnKvA), W.wkv_a);
    out.Vector(N(TensorId::kAttnKvANorm), W.kv_a_norm);
    // k_b = W_UK^T per head {H, kv_lora, nope} (the loader's uk_t), v_b = W_UV {H, v, kv_lora}.
    const int64_t H = c.n_heads, kvl = c.kv_lora_rank, nope = c.qk_nope_dim, vd = c.v_head_dim;
    out.F32Rows(N(TensorId::kAttnKB), W.uk_t, {H, kvl, nope}, W.wkv_b.data ? W.wkv_b.dtype : W.wv_b.dtype);
    std::vector<TensorView> uv(static_cast<size_t>(H));
    for (int64_t hh = 0; hh < H; ++hh)
      uv[static_cast<size_t>(hh)] = W.wv_b.data ? RowSlice(W.wv_b, hh * vd, vd) : RowSlice(W.wkv_b, hh * (nope + vd) + nope, vd);
    out.Stacked(N(TensorId::kAttnVB), uv);
    out.Matrix(N(TensorId::kAttnOut), W.wo);
  } else {
    const GqaWeights& W = L.gqa;
    const bool pairs = a.gguf_permutes_qk();  // GGUF llama: adjacent-pair RoPE rows
    out.Matrix(N(TensorId::kAttnQ), W.wq, pairs ? c.n_heads : 0);
    out.Matrix(N(TensorId::kAttnK), W.wk, pairs ? c.n_kv_heads : 0);
    out.Matrix(N(TensorId::kAttnV), W.wv);
    if (!W.bq.empty()) {
      out.Vector(N(TensorId::kAttnQBias), W.bq);
      out.Vector(N(TensorId::kAttnKBias), W.bk);
      out.Vector(N(TensorId::kAttnVBias), W.bv);
    }
    if (!W.q_norm.empty()) {
      out.Vector(N(TensorId::kAttnQNorm), W.q_norm);
      out.Vector(N(TensorId::kAttnKNorm), W.k_norm);
    }
    out.Matrix(N(TensorId::kAttnOut), W.wo);
  }
  out.Vector(N(TensorId::kFfnNorm), L.ffn_norm);
  if (!L.is_moe()) {
    out.Matrix(N(TensorId::kFfnGate), L.mlp.gate);
    out.Matrix(N(TensorId::kFfnUp), L.mlp.up);
    out.Matrix(N(TensorId::kFfnDown), L.mlp.down);
    return;
  }
  const MoeWeights& W = L.moe;
  out.Matrix(N(TensorId::kFfnRouter), W.router);
  if (!W.exp_probs_bias.empty()) out.Vector(N(TensorId::kFfnExpProbsBias), W.exp_probs_bias);
  out.Stacked(N(TensorId::kFfnGateExps), W.gate);
  out.Stacked(N(TensorId::kFfnUpExps), W.up);
  out.Stacked(N(TensorId::kFfnDownExps), W.down);
  if (!W.shared.empty()) {
    out.Matrix(N(TensorId::kFfnGateShexp), W.shared.gate);
    out.Matrix(N(TensorId::kFfnUpShexp), W.shared.up);
    out.Matrix(N(TensorId::kFfnDownShexp), W.shared.down);
  }
  if (W.shared_gate.data) out.VectorFrom(N(TensorId::kFfnShexpGate), W.shared_gate);
}

}  // namespace

Status ConvertHfToGguf(const std::string& hf_dir, const std::string& out, const ConvertOptions& opts) {
  if (opts.outtype != DType::kInvalid && opts.outtype != DType::kF32 && opts.outtype != DType::kF16 &&
      opts.outtype != DType::kBF16 && opts.outtype != DType::kQ8_0 && opts.outtype != DType::kQ4_0)
    return InvalidArgument(std::string("convert: unsupported output type ") + DTypeName(opts.outtype));
  LoadOptions lo;
  lo.placement = WeightPlacement::kMmap;
  lo.progress = false;
  DI_ASSIGN_OR_RETURN(std::unique_ptr<Model> m, LoadModelFromPath(hf_dir, lo));
  if (m->format != "hf") return InvalidArgument(hf_dir + ": convert reads a Hugging Face model directory");
  const ModelConfig& c = m->config;
  DI_RETURN_IF_ERROR(CheckConvertible(c, hf_dir));
  if (c.mla && c.n_experts > 0 && !c.router_sigmoid && c.n_group > 1)
    DI_LOG_WARN("%s: llama.cpp ranks expert groups by their top-2 sum; this V2-style router ranks by the best score",
                hf_dir.c_str());

  GgufWriter gw;
  const ArchSpec& arch = GetArch(c.arch);
  const std::string ga = arch.gguf_arch;
  const int n_mtp = opts.mtp ? static_cast<int>(m->mtp.size()) : 0;
  WriteMetadata(*m, ga, c.n_layers + n_mtp, gw);
  DI_RETURN_IF_ERROR(ExportHfTokenizerToGguf(hf_dir, c.vocab_size, gw));

  TensorEmitter emit(gw, opts.outtype);
  auto N = [&](TensorId id, int layer = -1) { return TensorName(arch, WeightFormat::kGguf, id, layer); };
  emit.Matrix(N(TensorId::kTokEmbd), m->tok_embd);
  if (!c.rope_freq_factors.empty()) emit.Vector(N(TensorId::kRopeFreqs), c.rope_freq_factors);
  for (int l = 0; l < c.n_layers; ++l) WriteLayer(c, m->layers[l], l, emit);
  for (int k = 0; k < n_mtp; ++k) {
    const MtpWeights& P = m->mtp[k];
    const int l = c.n_layers + k;
    WriteLayer(c, P.layer, l, emit);
    emit.Vector(N(TensorId::kMtpENorm, l), P.enorm);
    emit.Vector(N(TensorId::kMtpHNorm, l), P.hnorm);
    emit.Matrix(N(TensorId::kMtpEhProj, l), P.eh_proj);
    emit.Vector(N(TensorId::kMtpHeadNorm, l), P.head_norm);
    if (P.embed.data != m->tok_embd.data) emit.Matrix(N(TensorId::kMtpEmbd, l), P.embed);
    if (P.head.data != m->lm_head.data) emit.Matrix(N(TensorId::kMtpHead, l), P.head);
  }
  emit.Vector(N(TensorId::kOutputNorm), m->out_norm);
  if (!c.tie_embeddings) emit.Matrix(N(TensorId::kOutput), m->lm_head);

  std::unique_ptr<ProgressBar> bar;
  DI_RETURN_IF_ERROR(gw.Write(out, [&](size_t done, size_t total) {
    if (!opts.progress) return;
    if (!bar) bar = std::make_unique<ProgressBar>("convert", total, "B");
    bar->Update(done);
  }));
  if (bar) bar->Finish();
  DI_LOG_INFO("wrote %s (%s, %d layers%s)", out.c_str(), ga.c_str(), c.n_layers, n_mtp ? " + MTP" : "");
  return Status::Ok();
}

}  // namespace deepinfer
