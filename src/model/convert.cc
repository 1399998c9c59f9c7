#include "model/convert.h"

#include <cmath>
#include <cstring>
#include <memory>

#include "base/logging.h"
#include "base/progress.h"
#include "format/gguf.h"
#include "model/model.h"
#include "tokenizer/gguf_vocab_export.h"

namespace deepinfer {
namespace {

const char* GgufArch(Arch a) {
  switch (a) {
    case Arch::kLlama:
    case Arch::kMistral: return "llama";  // llama.cpp has no "mistral" architecture
    case Arch::kQwen2: return "qwen2";
    case Arch::kQwen3: return "qwen3";
    case Arch::kQwen3Moe: return "qwen3moe";
    case Arch::kDeepseekV3: return "deepseek2";
  }
  return "";
}

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
  auto refuse = [&](const std::string& why) { return Unimplemented(dir + ": cannot convert to GGUF: " + why); };
  if (c.arch == Arch::kQwen3Moe) {
    if (c.decoder_sparse_step != 1 || !c.mlp_only_layers.empty())
      return refuse("llama.cpp's qwen3moe routes every layer (decoder_sparse_step 1, no mlp_only_layers)");
    if (!c.norm_topk_prob) return refuse("llama.cpp's qwen3moe always renormalizes the top-k weights (norm_topk_prob false)");
  }
  if (c.arch == Arch::kDeepseekV3 && c.n_experts > 0 && c.decoder_sparse_step != 1)
    return refuse("llama.cpp's deepseek2 has no moe_layer_freq other than 1");
  if (c.arch == Arch::kDeepseekV3 && c.yarn.factor > 1 && std::fabs(c.yarn.mscale - 1.f) > 1e-6f)
    return refuse("YaRN with mscale != mscale_all_dim has no GGUF representation");
  return Status::Ok();
}

void WriteMetadata(const Model& m, const std::string& ga, int blocks, GgufWriter& gw) {
  const ModelConfig& c = m.config;
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
  if (c.n_experts > 0) {
    gw.SetU32(k("expert_count"), c.n_experts);
    gw.SetU32(k("expert_used_count"), c.n_experts_used);
    gw.SetU32(k("expert_feed_forward_length"), c.moe_intermediate);
  }
  if (c.arch != Arch::kDeepseekV3) {
    gw.SetU32(k("attention.head_count_kv"), c.n_kv_heads);
    gw.SetU32(k("attention.key_length"), c.head_dim);
    gw.SetU32(k("attention.value_length"), c.head_dim);
    gw.SetU32(k("rope.dimension_count"), c.head_dim);
    return;
  }
  // deepseek2 in llama.cpp's current MLA layout (MQA over the latent; per-head sizes in *_mla).
  gw.SetU32(k("attention.head_count_kv"), 1);
  gw.SetU32(k("attention.key_length"), c.kv_lora_rank + c.qk_rope_dim);
  gw.SetU32(k("attention.value_length"), c.kv_lora_rank);
  gw.SetU32(k("attention.key_length_mla"), c.qk_nope_dim + c.qk_rope_dim);
  gw.SetU32(k("attention.value_length_mla"), c.v_head_dim);
  gw.SetU32(k("rope.dimension_count"), c.qk_rope_dim);
  gw.SetU32(k("attention.q_lora_rank"), c.q_lora_rank);  // 0 = no q compression; llama.cpp requires the key
  gw.SetU32(k("attention.kv_lora_rank"), c.kv_lora_rank);
  gw.SetU32(k("leading_dense_block_count"), c.n_experts > 0 ? c.first_k_dense : c.n_layers);
  gw.SetU32(k("expert_shared_count"), c.n_shared_experts);
  if (c.n_experts > 0) {
    gw.SetF32(k("expert_weights_scale"), c.routed_scaling_factor);
    if (c.norm_topk_prob) gw.SetBool(k("expert_weights_norm"), true);
    gw.SetU32(k("expert_gating_func"), c.router_sigmoid ? 2 : 1);
    gw.SetU32(k("expert_group_count"), c.n_group);
    gw.SetU32(k("expert_group_used_count"), c.topk_group);
  }
  if (c.yarn.factor > 1) {
    gw.SetString(k("rope.scaling.type"), "yarn");
    gw.SetF32(k("rope.scaling.factor"), static_cast<float>(c.yarn.factor));
    gw.SetU32(k("rope.scaling.original_context_length"), static_cast<uint32_t>(c.yarn.original_ctx));
    gw.SetF32(k("rope.scaling.yarn_beta_fast"), static_cast<float>(c.yarn.beta_fast));
    gw.SetF32(k("rope.scaling.yarn_beta_slow"), static_cast<float>(c.yarn.beta_slow));
    // llama.cpp stores 0.1 * mscale_all_dim; attn_scale_mult = (0.1 * mscale_all_dim * ln(factor) + 1)^2.
    const double mscale_all = (std::sqrt(c.attn_scale_mult) - 1.0) / (0.1 * std::log(c.yarn.factor));
    gw.SetF32(k("rope.scaling.yarn_log_multiplier"), static_cast<float>(0.1 * mscale_all));
  }
  if (c.n_mtp > 0 && blocks > c.n_layers) gw.SetU32(k("nextn_predict_layers"), blocks - c.n_layers);
}

void WriteLayer(const ModelConfig& c, const LayerWeights& L, const std::string& g, TensorEmitter& out) {
  const bool pairs = c.arch == Arch::kLlama || c.arch == Arch::kMistral;  // GGUF llama: adjacent-pair RoPE rows
  out.Vector(g + "attn_norm.weight", L.attn_norm);
  if (c.mla) {
    if (c.q_lora_rank > 0) {
      out.Matrix(g + "attn_q_a.weight", L.wq_a);
      out.Vector(g + "attn_q_a_norm.weight", L.q_a_norm);
      out.Matrix(g + "attn_q_b.weight", L.wq_b);
    } else {
      out.Matrix(g + "attn_q.weight", L.wq);
    }
    out.Matrix(g + "attn_kv_a_mqa.weight", L.wkv_a);
    out.Vector(g + "attn_kv_a_norm.weight", L.kv_a_norm);
    // k_b = W_UK^T per head {H, kv_lora, nope} (the loader's uk_t), v_b = W_UV {H, v, kv_lora}.
    const int64_t H = c.n_heads, kvl = c.kv_lora_rank, nope = c.qk_nope_dim, vd = c.v_head_dim;
    out.F32Rows(g + "attn_k_b.weight", L.uk_t, {H, kvl, nope}, L.wkv_b.data ? L.wkv_b.dtype : L.wv_b.dtype);
    std::vector<TensorView> uv(static_cast<size_t>(H));
    for (int64_t hh = 0; hh < H; ++hh) {
      TensorView v = L.wv_b.data ? L.wv_b : L.wkv_b;
      const int64_t r0 = L.wv_b.data ? hh * vd : hh * (nope + vd) + nope;
      v.shape = {vd, kvl};
      v.data = (L.wv_b.data ? L.wv_b : L.wkv_b).row(r0);
      v.nbytes = static_cast<size_t>(vd) * v.row_bytes();
      v.scale_row0 += r0;
      uv[static_cast<size_t>(hh)] = v;
    }
    out.Stacked(g + "attn_v_b.weight", uv);
  } else {
    out.Matrix(g + "attn_q.weight", L.wq, pairs ? c.n_heads : 0);
    out.Matrix(g + "attn_k.weight", L.wk, pairs ? c.n_kv_heads : 0);
    out.Matrix(g + "attn_v.weight", L.wv);
    if (!L.bq.empty()) {
      out.Vector(g + "attn_q.bias", L.bq);
      out.Vector(g + "attn_k.bias", L.bk);
      out.Vector(g + "attn_v.bias", L.bv);
    }
    if (!L.q_norm.empty()) {
      out.Vector(g + "attn_q_norm.weight", L.q_norm);
      out.Vector(g + "attn_k_norm.weight", L.k_norm);
    }
  }
  out.Matrix(g + "attn_output.weight", L.wo);
  out.Vector(g + "ffn_norm.weight", L.ffn_norm);
  if (!L.moe()) {
    out.Matrix(g + "ffn_gate.weight", L.w_gate);
    out.Matrix(g + "ffn_up.weight", L.w_up);
    out.Matrix(g + "ffn_down.weight", L.w_down);
    return;
  }
  out.Matrix(g + "ffn_gate_inp.weight", L.router);
  if (!L.exp_bias.empty()) out.Vector(g + "exp_probs_b.bias", L.exp_bias);
  out.Stacked(g + "ffn_gate_exps.weight", L.exp_gate);
  out.Stacked(g + "ffn_up_exps.weight", L.exp_up);
  out.Stacked(g + "ffn_down_exps.weight", L.exp_down);
  if (L.sh_gate.data) {
    out.Matrix(g + "ffn_gate_shexp.weight", L.sh_gate);
    out.Matrix(g + "ffn_up_shexp.weight", L.sh_up);
    out.Matrix(g + "ffn_down_shexp.weight", L.sh_down);
  }
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
  if (c.arch == Arch::kDeepseekV3 && !c.router_sigmoid && c.n_group > 1)
    DI_LOG_WARN("%s: llama.cpp ranks expert groups by their top-2 sum; this V2-style router ranks by the best score",
                hf_dir.c_str());

  GgufWriter gw;
  const std::string ga = GgufArch(c.arch);
  const int n_mtp = opts.mtp ? static_cast<int>(m->mtp.size()) : 0;
  WriteMetadata(*m, ga, c.n_layers + n_mtp, gw);
  DI_RETURN_IF_ERROR(ExportHfTokenizerToGguf(hf_dir, c.vocab_size, gw));

  TensorEmitter emit(gw, opts.outtype);
  emit.Matrix("token_embd.weight", m->tok_embd);
  if (!c.rope_freq_factors.empty()) emit.Vector("rope_freqs.weight", c.rope_freq_factors);
  for (int l = 0; l < c.n_layers; ++l) WriteLayer(c, m->layers[l], "blk." + std::to_string(l) + ".", emit);
  for (int k = 0; k < n_mtp; ++k) {
    const MtpWeights& P = m->mtp[k];
    const std::string g = "blk." + std::to_string(c.n_layers + k) + ".";
    WriteLayer(c, P.layer, g, emit);
    emit.Vector(g + "nextn.enorm.weight", P.enorm);
    emit.Vector(g + "nextn.hnorm.weight", P.hnorm);
    emit.Matrix(g + "nextn.eh_proj.weight", P.eh_proj);
    emit.Vector(g + "nextn.shared_head_norm.weight", P.head_norm);
    if (P.embed.data != m->tok_embd.data) emit.Matrix(g + "nextn.embed_tokens.weight", P.embed);
    if (P.head.data != m->lm_head.data) emit.Matrix(g + "nextn.shared_head_head.weight", P.head);
  }
  emit.Vector("output_norm.weight", m->out_norm);
  if (!c.tie_embeddings) emit.Matrix("output.weight", m->lm_head);

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
