#include "model/make_tiny.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "base/progress.h"
#include "format/gguf.h"
#include "format/safetensors.h"
#include "model/arch/arch.h"
#include "model/arch/model_tensors.h"
#include "model/model.h"
#include "tensor/mxfp4_hf.h"

namespace deepinfer {
namespace fs = std::filesystem;

bool TinyPreset(const std::string& name, TinySpec* s) {
  if (name == "llama-3.2-1b") {
    s->arch = Arch::kLlama;
    s->vocab = 128256; s->hidden = 2048; s->layers = 16; s->heads = 32; s->kv_heads = 8; s->head_dim = 64;
    s->intermediate = 8192; s->ctx = 131072; s->rope_theta = 500000; s->tie_embeddings = true; s->llama3_rope_scaling = true;
  } else if (name == "qwen3-0.6b") {
    s->arch = Arch::kQwen3;
    s->vocab = 151936; s->hidden = 1024; s->layers = 28; s->heads = 16; s->kv_heads = 8; s->head_dim = 128;
    s->intermediate = 3072; s->ctx = 40960; s->rope_theta = 1000000; s->tie_embeddings = true;
  } else if (name == "qwen2.5-0.5b") {
    s->arch = Arch::kQwen2;
    s->vocab = 151936; s->hidden = 896; s->layers = 24; s->heads = 14; s->kv_heads = 2; s->head_dim = 64;
    s->intermediate = 4864; s->ctx = 32768; s->rope_theta = 1000000; s->tie_embeddings = true;
  } else if (name == "gemma-3-1b") {  // Gemma3ForCausalLM: MQA, window 512, no RoPE scaling
    s->arch = Arch::kGemma3;
    s->vocab = 262144; s->hidden = 1152; s->layers = 26; s->heads = 4; s->kv_heads = 1; s->head_dim = 256;
    s->intermediate = 6912; s->ctx = 32768; s->rope_theta = 1000000; s->tie_embeddings = true;
    s->window = 512; s->swa_period = 6;
  } else if (name == "gemma-3-4b") {  // the text model of Gemma3ForConditionalGeneration 4B
    s->arch = Arch::kGemma3;
    s->vocab = 262208; s->hidden = 2560; s->layers = 34; s->heads = 8; s->kv_heads = 4; s->head_dim = 256;
    s->intermediate = 10240; s->ctx = 131072; s->rope_theta = 1000000; s->tie_embeddings = true;
    s->window = 1024; s->swa_period = 6; s->rope_linear = 8.0;
  } else if (name == "gpt-oss-20b" || name == "gpt-oss-120b") {  // GptOssForCausalLM: q width 4096 != hidden 2880
    const bool big = name == "gpt-oss-120b";
    s->arch = Arch::kGptOss;
    s->vocab = 201088; s->hidden = 2880; s->layers = big ? 36 : 24; s->heads = 64; s->kv_heads = 8; s->head_dim = 64;
    s->intermediate = 2880; s->ctx = 131072; s->rope_theta = 150000;
    s->experts = big ? 128 : 32; s->experts_used = 4; s->moe_intermediate = 2880;
    s->window = 128; s->swa_period = 2;
  } else {
    return false;
  }
  return true;
}

namespace {

uint64_t SplitMix(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t HashName(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Values uniform in [center - a, center + a] with std = a / sqrt(3): cheap and deterministic.
std::vector<float> RandomTensor(uint64_t seed, const std::string& name, size_t n, float std, float center) {
  std::vector<float> v(n);
  uint64_t st = seed ^ HashName(name);
  const float a = std * 1.7320508f;
  for (auto& x : v) x = center + a * (static_cast<float>(SplitMix(st) >> 40) * (2.0f / 16777216.0f) - 1.0f);
  return v;
}

std::vector<uint8_t> Encode(DType t, const std::vector<float>& v) {
  std::vector<uint8_t> b(DTypeBytes(t, v.size()));
  QuantizeRow(t, v.data(), b.data(), v.size());
  return b;
}

// The values as the stored type represents them (what both formats hold).
std::vector<float> RoundTrip(DType t, const std::vector<float>& v) {
  std::vector<float> out(v.size());
  auto b = Encode(t, v);
  DequantizeRow(t, b.data(), out.data(), v.size());
  return out;
}

// llama.cpp's converter permutes q/k rows so rotate-half RoPE becomes adjacent-pair RoPE.
std::vector<float> PermuteQK(const std::vector<float>& w, int n_head, int64_t cols) {
  const int64_t rows = static_cast<int64_t>(w.size()) / cols, hd = rows / n_head, half = hd / 2;
  std::vector<float> out(w.size());
  for (int h = 0; h < n_head; ++h)
    for (int s = 0; s < 2; ++s)
      for (int64_t i = 0; i < half; ++i) {
        const int64_t src = h * hd + s * half + i, dst = h * hd + 2 * i + s;
        std::copy(w.begin() + src * cols, w.begin() + (src + 1) * cols, out.begin() + dst * cols);
      }
  return out;
}

// A byte-level BPE vocabulary: 256 byte symbols, seeded merges biased toward text, then bos/eos.
struct TinyVocab {
  std::vector<std::string> tokens;
  std::vector<std::string> merges;
  int bos = 0, eos = 0;
};

std::string CodepointUtf8(uint32_t cp) {
  std::string o;
  if (cp < 0x80) o += static_cast<char>(cp);
  else {
    o += static_cast<char>(0xC0 | (cp >> 6));
    o += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return o;
}

TinyVocab MakeVocab(int vocab, uint64_t seed) {
  TinyVocab v;
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    v.tokens.push_back(CodepointUtf8(printable ? b : 256 + n++));
  }
  std::set<std::string> have(v.tokens.begin(), v.tokens.end());
  // Seed symbols: lower-case letters, the space marker (U+0120 'Ġ') and a few punctuation marks.
  std::vector<int> pool;
  for (int c = 'a'; c <= 'z'; ++c) pool.push_back(c);
  const int space_id = [&] {
    for (int b = 0; b < 256; ++b)
      if (v.tokens[b] == "\xC4\xA0") return b;
    return 32;
  }();
  pool.push_back(space_id);
  pool.push_back(space_id);
  pool.push_back(space_id);
  uint64_t st = seed * 7919 + 17;
  const int target = vocab - 2;
  int guard = 0;
  while (static_cast<int>(v.tokens.size()) < target && guard++ < target * 50) {
    const int a = pool[SplitMix(st) % pool.size()], b = pool[SplitMix(st) % pool.size()];
    std::string s = v.tokens[a] + v.tokens[b];
    if (s.size() > 24 || have.count(s)) continue;
    // A merge must not put a space marker in the middle of a token: GPT-2 splitting never produces that.
    if (s.find("\xC4\xA0", 1) != std::string::npos) continue;
    have.insert(s);
    v.merges.push_back(v.tokens[a] + " " + v.tokens[b]);
    pool.push_back(static_cast<int>(v.tokens.size()));
    v.tokens.push_back(s);
  }
  for (int i = 0; static_cast<int>(v.tokens.size()) < target; ++i) v.tokens.push_back("<|unused_" + std::to_string(i) + "|>");
  v.bos = static_cast<int>(v.tokens.size());
  v.tokens.push_back("<|begin_of_text|>");
  v.eos = static_cast<int>(v.tokens.size());
  v.tokens.push_back("<|end_of_text|>");
  return v;
}

// FP8 in 128x128 blocks: q = e4m3(w / scale) with the block's scale from its amax (`scale_of`). Replaces *v by the
// values the checkpoint represents (e4m3(q) * scale in f32, exactly what the loader computes) and returns (q
// bytes, the blocks' scales).
template <class ScaleOf>
std::pair<std::vector<uint8_t>, std::vector<float>> Fp8Blocks(std::vector<float>* v, int64_t rows, int64_t cols, ScaleOf scale_of) {
  const int64_t B = TensorView::kFp8Block, br = (rows + B - 1) / B, bc = (cols + B - 1) / B;
  std::vector<uint8_t> q(static_cast<size_t>(rows * cols));
  std::vector<float> scales(static_cast<size_t>(br * bc));
  for (int64_t bi = 0; bi < br; ++bi)
    for (int64_t bj = 0; bj < bc; ++bj) {
      float amax = 0;
      for (int64_t r = bi * B; r < std::min(rows, (bi + 1) * B); ++r)
        for (int64_t c = bj * B; c < std::min(cols, (bj + 1) * B); ++c) amax = std::max(amax, std::fabs((*v)[r * cols + c]));
      const float scale = scale_of(amax);
      scales[bi * bc + bj] = scale;
      for (int64_t r = bi * B; r < std::min(rows, (bi + 1) * B); ++r)
        for (int64_t c = bj * B; c < std::min(cols, (bj + 1) * B); ++c) {
          float& x = (*v)[r * cols + c];
          q[r * cols + c] = F32ToFp8E4M3(x / scale);
          x = Fp8E4M3ToF32(q[r * cols + c]) * scale;
        }
    }
  return {std::move(q), std::move(scales)};
}

// DeepSeek-V3's FP8: scale = amax / 448, stored as f32 ('<name>_scale_inv').
std::pair<std::vector<uint8_t>, std::vector<float>> Fp8BlockQuantize(std::vector<float>* v, int64_t rows, int64_t cols) {
  return Fp8Blocks(v, rows, cols, [](float amax) { return amax > 0 ? amax / 448.f : 1.f; });
}

// DeepSeek-V4's FP8: power-of-two scales, 2^ceil(log2(amax / 448)) (so |q| <= 448), stored as E8M0 exponent bytes
// (b = exponent + 127). Returns (q bytes, scale bytes).
std::pair<std::vector<uint8_t>, std::vector<uint8_t>> Fp8E8M0BlockQuantize(std::vector<float>* v, int64_t rows, int64_t cols) {
  auto [q, scales] = Fp8Blocks(v, rows, cols, [](float amax) {
    return std::ldexp(1.f, amax > 0 ? static_cast<int>(std::ceil(std::log2(amax / 448.f))) : 0);
  });
  std::vector<uint8_t> bytes(scales.size());
  for (size_t i = 0; i < scales.size(); ++i) bytes[i] = static_cast<uint8_t>(std::ilogb(scales[i]) + 127);
  return {std::move(q), std::move(bytes)};
}

// `<base>.weight` -> `<base>.scale` (DeepSeek-V4's scale tensors).
std::string TinyScaleName(const std::string& weight) { return weight.substr(0, weight.size() - 7) + ".scale"; }

// DeepSeek's FP8 checkpoints keep the embeddings, heads and routers in full precision; every other linear weight
// is e4m3 with block scales.
bool KeepsFullPrecision(TensorId id) {
  return id == TensorId::kTokEmbd || id == TensorId::kOutput || id == TensorId::kMtpEmbd || id == TensorId::kMtpHead ||
         id == TensorId::kFfnRouter;
}

// llama.cpp's split of MLA's kv_b {H (nope + v), kv_lora}: k_b[h][c][d] = W_UK[h][d][c] ({H, kv_lora, nope}) or
// v_b[h][d][c] = W_UV[h][d][c] ({H, v, kv_lora}).
std::vector<float> SplitKvB(const ModelConfig& cfg, const std::vector<float>& kv_b, TensorForm part) {
  const int64_t H = cfg.n_heads, nope = cfg.qk_nope_dim, vh = cfg.v_head_dim, kvl = cfg.kv_lora_rank;
  const bool k = part == TensorForm::kMlaKB;
  std::vector<float> out(static_cast<size_t>(H * kvl * (k ? nope : vh)));
  for (int64_t hh = 0; hh < H; ++hh)
    for (int64_t c = 0; c < kvl; ++c) {
      if (k)
        for (int64_t d = 0; d < nope; ++d) out[(hh * kvl + c) * nope + d] = kv_b[(hh * (nope + vh) + d) * kvl + c];
      else
        for (int64_t d = 0; d < vh; ++d) out[(hh * vh + d) * kvl + c] = kv_b[(hh * (nope + vh) + nope + d) * kvl + c];
    }
  return out;
}

// gpt-oss's fused HF experts (ArchSpec::hf_oai_experts). The values are drawn under the names of unfused HF
// experts and biases (mlp.experts.{e}.gate_proj.weight, mlp.experts.gate_bias, ...), so the GGUF is the same
// whichever way the HF copy packs them.
std::string OaiSeedName(TensorId id, int layer, int expert) {
  const std::string p = "model.layers." + std::to_string(layer) + ".mlp.experts.";
  switch (id) {
    case TensorId::kFfnGateExps: return p + std::to_string(expert) + ".gate_proj.weight";
    case TensorId::kFfnUpExps: return p + std::to_string(expert) + ".up_proj.weight";
    case TensorId::kFfnDownExps: return p + std::to_string(expert) + ".down_proj.weight";
    case TensorId::kFfnGateExpsBias: return p + "gate_bias";
    case TensorId::kFfnUpExpsBias: return p + "up_bias";
    default: return p + "down_bias";
  }
}

// HF's fused expert tensors from `parts` (gate and up, or down alone), each E stacked {rows, cols} matrices:
// the file's row r of expert e is row r / parts of part r % parts. MXFP4 (`encoded`: each part's GGUF bytes):
// `<name>_blocks` U8 [E, R, cols / 32, 16] and `<name>_scales` U8 [E, R, cols / 32] in HF's nibble order; other
// types: `<name>` [E, cols, R] (x @ W) in `hf_type`, holding the values.
void AddOaiExperts(const std::string& name, int64_t E, int64_t rows, int64_t cols, DType type,
                   const std::vector<const std::vector<float>*>& parts, const std::vector<const std::vector<uint8_t>*>& encoded,
                   DType hf_type, std::vector<SafetensorsEntry>* st) {
  const int64_t np = static_cast<int64_t>(parts.size()), R = rows * np;
  if (type == DType::kMXFP4) {
    const int64_t nb = cols / 32;
    std::vector<uint8_t> blocks(static_cast<size_t>(E * R * nb * 16)), scales(static_cast<size_t>(E * R * nb));
    for (int64_t e = 0; e < E; ++e)
      for (int64_t r = 0; r < R; ++r) {
        const auto* src = reinterpret_cast<const BlockMXFP4*>(encoded[static_cast<size_t>(r % np)]->data()) + (e * rows + r / np) * nb;
        BlocksToHfMxfp4(src, blocks.data() + (e * R + r) * nb * 16, scales.data() + (e * R + r) * nb, static_cast<size_t>(nb));
      }
    st->push_back({name + "_blocks", DType::kU8, {E, R, nb, 16}, std::move(blocks)});
    st->push_back({name + "_scales", DType::kU8, {E, R, nb}, std::move(scales)});
    return;
  }
  std::vector<float> t(static_cast<size_t>(E * R * cols));
  for (int64_t e = 0; e < E; ++e)
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < cols; ++c)
        t[static_cast<size_t>((e * cols + c) * R + r)] = (*parts[static_cast<size_t>(r % np)])[static_cast<size_t>((e * rows + r / np) * cols + c)];
  st->push_back({name, hf_type, {E, cols, R}, Encode(hf_type, t)});
}

Status WriteText(const fs::path& p, const std::string& s) {
  std::ofstream out(p);
  out << s;
  return out ? Status::Ok() : IoError(p.string() + ": write failed");
}

}  // namespace

Status MakeTinyModel(const TinySpec& spec, TinyFormat format, const std::string& out, bool quiet) {
  TinySpec s = spec;
  if (s.head_dim == 0) s.head_dim = s.hidden / s.heads;
  if (s.vocab < 260) return InvalidArgument("make-tiny: vocab must be at least 260");
  if (s.heads % s.kv_heads || s.head_dim % 2) return InvalidArgument("make-tiny: heads must be a multiple of kv_heads; head_dim even");
  if (s.dtype == DType::kI32 || s.dtype == DType::kInvalid || !CanQuantizeRow(s.dtype))
    return InvalidArgument("make-tiny: unsupported dtype");
  const int blk = GetDTypeInfo(s.dtype).block_elems;  // 1 for f8_e4m3
  if (s.hidden % blk || s.intermediate % blk || (s.heads * s.head_dim) % blk)
    return InvalidArgument(std::string("make-tiny: dimensions must be multiples of ") + std::to_string(blk) + " for " + DTypeName(s.dtype));
  const bool quant = blk > 1;
  // FP8 (DeepSeek's checkpoint format): HF linear weights are e4m3 with 128x128 block scales ('<name>_scale_inv');
  // everything else, and the whole GGUF (llama.cpp has no FP8), holds f32 = the dequantized values.
  const bool fp8 = s.dtype == DType::kF8E4M3;
  // The family as its HF directory is spelled (ArchSpec::hf_layout): its own layout or its other one.
  const ArchSpec* layout = &GetArch(s.arch);
  if (!s.hf_layout.empty() && !(layout = FindHfLayout(GetArch(s.arch), s.hf_layout)))
    return InvalidArgument("make-tiny: " + std::string(GetArch(s.arch).name) + " has no HF layout '" + s.hf_layout + "'");
  const ArchSpec& family = *layout;
  if (family.hf_fused_experts && (fp8 || (s.expert_dtype != DType::kInvalid && s.expert_dtype != s.dtype) || s.mtp))
    return InvalidArgument(std::string("make-tiny: the ") + family.hf_layout + " layout of " + family.name +
                           " is written in float types, without an MTP block (its layout has none): drop --dtype f8_e4m3, "
                           "--expert-dtype and --mtp");
  if (fp8 && !family.mla && !family.hf_e8m0_scales) return InvalidArgument("make-tiny: --dtype f8_e4m3 is for deepseek_v3 and deepseek_v4 (HF format)");
  const DType store_dtype = fp8 ? DType::kF32 : s.dtype;  // what the values are rounded to (fp8 rounds itself)
  const DType hf_dtype = quant || fp8 ? DType::kF32 : s.dtype;  // safetensors has no q8_0: it holds the dequantized values
  const DType vec_dtype = hf_dtype;                       // norms/biases in HF; GGUF keeps them f32
  const bool ds = family.mla;  // MLA attention and DeepSeekMoE layers
  const bool moe = family.moe;
  const std::string arch = family.name;
  const std::string gguf_arch = family.gguf_arch;
  if (ds && (s.kv_lora <= 0 || s.qk_nope <= 0 || s.qk_rope <= 0 || s.qk_rope % 2 || s.v_head <= 0 || s.q_lora < 0 ||
             s.experts % s.n_group || s.topk_group > s.n_group || s.first_dense >= s.layers))
    return InvalidArgument("make-tiny: deepseek_v3 needs positive MLA sizes, experts divisible by groups, a MoE layer");
  if (family.hf_weights_unsupported && format != TinyFormat::kGguf)
    return Unimplemented("make-tiny: " + arch + " is written as GGUF only (--format gguf): " + family.hf_weights_unsupported);
  if (family.tiny_adjust) family.tiny_adjust(&s);
  // The routed experts' type (gpt_oss may hold them in another type than the rest, as the released GGUFs do).
  const DType expert_dtype = s.expert_dtype == DType::kInvalid ? store_dtype : s.expert_dtype;
  if (expert_dtype != store_dtype) {
    const int eblk = GetDTypeInfo(expert_dtype).block_elems;
    if (!family.hf_oai_experts && !(family.hf_e8m0_scales && expert_dtype == DType::kMXFP4))
      return InvalidArgument("make-tiny: --expert-dtype is for gpt_oss (and mxfp4 for deepseek_v4)");
    if (expert_dtype == DType::kF8E4M3 || !CanQuantizeRow(expert_dtype) || s.hidden % eblk || s.moe_intermediate % eblk)
      return InvalidArgument(std::string("make-tiny: --expert-dtype ") + DTypeName(expert_dtype) + " needs hidden and the expert FFN multiples of " + std::to_string(eblk));
  }
  // HF's float experts hold the values in the HF type (f32 when the experts are quantized but not MXFP4).
  const DType hf_expert_dtype = GetDTypeInfo(expert_dtype).block_elems > 1 ? DType::kF32 : hf_dtype;
  if (moe && (s.experts < 1 || s.experts_used < 1 || s.experts_used > s.experts || s.moe_intermediate % blk))
    return InvalidArgument("make-tiny: experts_used must be in [1, experts] and the expert FFN a multiple of the block");

  const TinyVocab vocab = MakeVocab(s.vocab, s.vocab_seed ? s.vocab_seed : s.seed);
  const bool add_bos = family.adds_bos;
  nlohmann::json cfg = {
      {"architectures", {family.hf_class}}, {"model_type", arch}, {"vocab_size", s.vocab},
      {"hidden_size", s.hidden}, {"num_hidden_layers", s.layers}, {"num_attention_heads", s.heads},
      {"num_key_value_heads", s.kv_heads}, {"head_dim", s.head_dim}, {"intermediate_size", s.intermediate},
      {"max_position_embeddings", s.ctx}, {"rms_norm_eps", 1e-5}, {"rope_theta", s.rope_theta},
      {"tie_word_embeddings", s.tie_embeddings}, {"hidden_act", "silu"}, {"bos_token_id", vocab.bos},
      {"eos_token_id", vocab.eos}, {"torch_dtype", hf_dtype == DType::kBF16 ? "bfloat16" : hf_dtype == DType::kF16 ? "float16" : "float32"}};
  if (family.tiny_hf_config) family.tiny_hf_config(s, &cfg);
  if (family.hf_oai_experts && expert_dtype == DType::kMXFP4)  // as openai/gpt-oss-20b's config.json
    cfg["quantization_config"] = {{"quant_method", "mxfp4"},
                                  {"modules_to_not_convert", {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}}};
  if (s.rope_linear != 1.0) cfg["rope_scaling"] = {{"rope_type", "linear"}, {"factor", s.rope_linear}};
  if (s.llama3_rope_scaling)
    cfg["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 32.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                           {"original_max_position_embeddings", 8192}};
  // The tensors follow from the configuration the loader will read back (in either format), declared by the
  // family (model/arch/): make-tiny writes exactly what the loader asks for.
  DI_ASSIGN_OR_RETURN(const ModelConfig c, ParseHfConfig(cfg.dump(), "make-tiny: " + arch + " config.json"));
  const int all_layers = c.n_layers + c.n_mtp;
  // File order: the embedding, each layer (an MTP module's own tensors before its decoder layer), final norm and
  // head. `scratch` only gives the declarations' members somewhere to point: make-tiny writes values, not views.
  Model scratch;
  const ModelTensors plan = DeclareModelTensors(c, scratch);
  std::vector<const TensorList*> lists = {&plan.embedding};
  for (const TensorList& layer : plan.layers) lists.push_back(&layer);
  for (const ModelTensors::Mtp& p : plan.mtp) lists.insert(lists.end(), {&p.own, &p.layer});
  lists.push_back(&plan.head);

  std::vector<SafetensorsEntry> st;
  GgufWriter gw;
  const bool want_hf = format != TinyFormat::kGguf, want_gguf = format != TinyFormat::kHf;
  size_t n_tensors = 0, done = 0;
  for (const TensorList* t : lists) n_tensors += t->size();
  if (quiet) setenv("DEEPINFER_NO_PROGRESS", "1", 0);
  ProgressBar bar("make-tiny", n_tensors, "tensors");

  // One tensor of the HF directory: drawn (seeded by its name), rounded to the stored type and written; returns
  // the values both files hold (FP8: what e4m3 and the block scales represent).
  // `seed`: the name the values are drawn under (the HF name, or the shared table's for
  // ArchSpec::tiny_seeds_by_shared_names); `name`: the HF tensor written (none when empty).
  auto hf_tensor = [&](const TensorDecl& d, const std::string& seed, const std::string& name, const std::vector<int64_t>& shape) {
    const bool is_vector = d.form == TensorForm::kVector || d.form == TensorForm::kExpertVectors;
    size_t n = 1;
    for (auto dim : shape) n *= static_cast<size_t>(dim);
    std::vector<float> v = RoundTrip(is_vector ? vec_dtype : store_dtype, RandomTensor(s.seed, seed, n, d.tiny_std, d.tiny_center - (d.norm ? family.hf_norm_offset : 0.f)));
    if (fp8 && !is_vector && shape.size() == 2 && !KeepsFullPrecision(d.id) && family.hf_e8m0_scales) {
      auto [bytes, scales] = Fp8E8M0BlockQuantize(&v, shape[0], shape[1]);
      if (want_hf && !name.empty()) {
        const int64_t B = TensorView::kFp8Block;
        st.push_back({name, DType::kF8E4M3, shape, std::move(bytes)});
        st.push_back({TinyScaleName(name), DType::kU8, {(shape[0] + B - 1) / B, (shape[1] + B - 1) / B}, std::move(scales), "F8_E8M0"});
      }
    } else if (fp8 && !is_vector && shape.size() == 2 && !KeepsFullPrecision(d.id)) {
      auto [bytes, scales] = Fp8BlockQuantize(&v, shape[0], shape[1]);
      if (want_hf) {
        st.push_back({name, DType::kF8E4M3, shape, std::move(bytes)});
        const int64_t B = TensorView::kFp8Block;
        std::vector<uint8_t> sb(scales.size() * 4);
        std::memcpy(sb.data(), scales.data(), sb.size());
        st.push_back({name + "_scale_inv", DType::kF32, {(shape[0] + B - 1) / B, (shape[1] + B - 1) / B}, std::move(sb)});
      }
    } else if (want_hf && !name.empty()) {
      st.push_back({name, is_vector ? vec_dtype : hf_dtype, shape, Encode(is_vector ? vec_dtype : hf_dtype, v)});
    }
    return v;
  };
  // The name values are drawn under.
  auto seed_name = [&](const TensorDecl& d, int expert) {
    return family.tiny_seeds_by_shared_names ? SharedTensorName(WeightFormat::kHf, d.id, d.layer, expert)
                                             : TensorName(family, WeightFormat::kHf, d.id, d.layer, expert, d.mtp);
  };
  // A tensor only HF stores that stands in for another where absent (DeepSeek-V4's MTP hc head): drawn as that one
  // is, so both files hold the same model.
  auto stands_for = [&](const TensorDecl& d) -> const TensorDecl* {
    if (!d.fallback_vector && !d.fallback_matrix) return nullptr;
    for (const TensorList* list : lists)
      for (const TensorDecl& o : *list)
        if (&o != &d && ((d.fallback_vector && o.vector == d.fallback_vector) || (d.fallback_matrix && o.matrix == d.fallback_matrix)))
          return &o;
    return nullptr;
  };
  for (const TensorList* list : lists) {
    std::vector<float> kv_b;  // MLA: kv_b's values, which the GGUF may hold split (k_b, v_b follow it)
    std::vector<float> oai_gate, oai_gate_bias;  // gpt-oss: gate's values, written to HF fused with up's
    std::vector<uint8_t> oai_gate_bytes;
    std::vector<float> fused_gate;  // transformers' experts: gate's values, written with up's as gate_up_proj
    for (const TensorDecl& d : *list) {
      bar.Update(++done);
      if (d.presence == Presence::kNotStored || d.presence == Presence::kIfPresent) continue;
      const std::string hf = TensorName(family, WeightFormat::kHf, d.id, d.layer, -1, d.mtp);
      const std::string gg = TensorName(family, WeightFormat::kGguf, d.id, d.layer);
      std::string seed = seed_name(d, -1);
      if (gg.empty())  // HF only
        if (const TensorDecl* o = stands_for(d)) seed = seed_name(*o, -1);
      if (hf.empty() && gg.empty()) continue;
      if (family.hf_oai_experts && d.form == TensorForm::kExperts) {
        const int64_t E = d.shape[0], rows = d.shape[1], cols = d.shape[2];
        std::vector<float> stacked;
        for (int e = 0; e < E; ++e) {
          const std::vector<float> v = RoundTrip(expert_dtype, RandomTensor(s.seed, OaiSeedName(d.id, d.layer, e), static_cast<size_t>(rows * cols), d.tiny_std, d.tiny_center));
          stacked.insert(stacked.end(), v.begin(), v.end());
        }
        std::vector<uint8_t> bytes = Encode(expert_dtype, stacked);
        if (want_gguf) gw.AddTensor(gg, expert_dtype, d.shape, bytes);
        if (d.id == TensorId::kFfnGateExps) {
          oai_gate = std::move(stacked);
          oai_gate_bytes = std::move(bytes);
        } else if (want_hf && d.id == TensorId::kFfnUpExps) {
          AddOaiExperts(hf, E, rows, cols, expert_dtype, {&oai_gate, &stacked}, {&oai_gate_bytes, &bytes}, hf_expert_dtype, &st);
        } else if (want_hf) {
          AddOaiExperts(hf, E, rows, cols, expert_dtype, {&stacked}, {&bytes}, hf_expert_dtype, &st);
        }
        continue;
      }
      if (family.hf_oai_experts && d.form == TensorForm::kExpertVectors) {
        const int64_t E = d.shape[0], n = d.shape[1];
        const std::vector<float> v = RoundTrip(vec_dtype, RandomTensor(s.seed, OaiSeedName(d.id, d.layer, -1), static_cast<size_t>(E * n), d.tiny_std, d.tiny_center));
        if (want_gguf) gw.AddTensor(gg, DType::kF32, d.shape, Encode(DType::kF32, v));
        if (d.id == TensorId::kFfnGateExpsBias) {
          oai_gate_bias = v;
        } else if (want_hf && d.id == TensorId::kFfnUpExpsBias) {  // [E, 2n], gate and up interleaved
          std::vector<float> both(static_cast<size_t>(E * 2 * n));
          for (int64_t i = 0; i < E * n; ++i) {
            both[static_cast<size_t>(2 * i)] = oai_gate_bias[static_cast<size_t>(i)];
            both[static_cast<size_t>(2 * i + 1)] = v[static_cast<size_t>(i)];
          }
          st.push_back({hf, vec_dtype, {E, 2 * n}, Encode(vec_dtype, both)});
        } else if (want_hf) {
          st.push_back({hf, vec_dtype, d.shape, Encode(vec_dtype, v)});
        }
        continue;
      }
      switch (d.form) {
        case TensorForm::kMatrix:
        case TensorForm::kVector:
        case TensorForm::kExpertVectors: {
          std::vector<float> v = hf_tensor(d, seed, hf, d.shape);
          if (d.norm && family.hf_norm_offset != 0.f)  // HF holds the offset from it (drawn around 0), GGUF the weight
            for (float& x : v) x += family.hf_norm_offset;
          const DType t = d.form == TensorForm::kMatrix ? store_dtype : DType::kF32;
          if (want_gguf && !gg.empty())
            gw.AddTensor(gg, t, d.shape, Encode(t, d.gguf_permute_heads ? PermuteQK(v, d.gguf_permute_heads, d.shape.back()) : v));
          break;
        }
        case TensorForm::kGateVector: {  // HF a {1, n} linear, GGUF an f32 vector {n}
          const std::vector<float> v = hf_tensor(d, seed, hf, d.shape);
          if (want_gguf) gw.AddTensor(gg, DType::kF32, {d.shape.back()}, Encode(DType::kF32, v));
          break;
        }
        case TensorForm::kInputHalves: {  // drawn whole (as one matrix); HF its two input halves, each scaled alone
          const int64_t rows = d.shape[0], cols = d.shape[1], half = cols / 2;
          const std::vector<float> whole = RoundTrip(store_dtype, RandomTensor(s.seed, seed, static_cast<size_t>(rows * cols), d.tiny_std, d.tiny_center));
          std::vector<float> joined(whole.size());
          for (int p = 0; p < 2; ++p) {
            std::vector<float> v(static_cast<size_t>(rows * half));
            for (int64_t r = 0; r < rows; ++r) std::copy_n(whole.begin() + r * cols + p * half, half, v.begin() + r * half);
            const std::string name = TensorName(family, WeightFormat::kHf, p ? TensorId::kMtpHProj : TensorId::kMtpEProj, d.layer, -1, d.mtp);
            if (fp8 && family.hf_e8m0_scales) {
              auto [bytes, scales] = Fp8E8M0BlockQuantize(&v, rows, half);
              const int64_t B = TensorView::kFp8Block;
              if (want_hf) {
                st.push_back({name, DType::kF8E4M3, {rows, half}, std::move(bytes)});
                st.push_back({TinyScaleName(name), DType::kU8, {(rows + B - 1) / B, (half + B - 1) / B}, std::move(scales), "F8_E8M0"});
              }
            } else if (want_hf) {
              st.push_back({name, hf_dtype, {rows, half}, Encode(hf_dtype, v)});
            }
            for (int64_t r = 0; r < rows; ++r) std::copy_n(v.begin() + r * half, half, joined.begin() + r * cols + p * half);
          }
          if (want_gguf) gw.AddTensor(gg, store_dtype, d.shape, Encode(store_dtype, joined));
          break;
        }
        case TensorForm::kExperts: {  // HF one tensor per expert, GGUF them stacked: the same values
          std::vector<float> stacked;
          const int64_t rows = d.shape[1], cols = d.shape[2];
          if (family.hf_fused_experts) {  // HF: gate_up_proj [E, 2F, D] (each expert's gate rows, then its up rows), down_proj
            for (int e = 0; e < d.shape[0]; ++e) {
              const std::vector<float> v = hf_tensor(d, seed_name(d, e), "", {rows, cols});
              stacked.insert(stacked.end(), v.begin(), v.end());
            }
            if (want_gguf) gw.AddTensor(gg, store_dtype, d.shape, Encode(store_dtype, stacked));
            if (d.id == TensorId::kFfnGateExps) {
              fused_gate = std::move(stacked);
            } else if (want_hf && d.id == TensorId::kFfnUpExps) {
              const size_t block = static_cast<size_t>(rows * cols);
              std::vector<float> both;
              for (int64_t e = 0; e < d.shape[0]; ++e)
                for (const std::vector<float>* part : {&fused_gate, &stacked})
                  both.insert(both.end(), part->begin() + e * block, part->begin() + (e + 1) * block);
              st.push_back({hf, hf_dtype, {d.shape[0], 2 * rows, cols}, Encode(hf_dtype, both)});
            } else if (want_hf) {
              st.push_back({hf, hf_dtype, d.shape, Encode(hf_dtype, stacked)});
            }
            break;
          }
          for (int e = 0; e < d.shape[0]; ++e) {
            const std::string name = TensorName(family, WeightFormat::kHf, d.id, d.layer, e, d.mtp);
            if (expert_dtype == DType::kMXFP4) {  // DeepSeek-V4: packed per expert, E8M0 scales per 32 values
              const std::vector<float> v = RoundTrip(DType::kMXFP4, RandomTensor(s.seed, seed_name(d, e), static_cast<size_t>(rows * cols), d.tiny_std, d.tiny_center));
              if (want_hf) {
                const std::vector<uint8_t> blocks = Encode(DType::kMXFP4, v);
                const int64_t nb = cols / 32;
                std::vector<uint8_t> packed(static_cast<size_t>(rows * cols / 2)), scales(static_cast<size_t>(rows * nb));
                for (int64_t r = 0; r < rows; ++r)
                  BlocksToHfMxfp4(reinterpret_cast<const BlockMXFP4*>(blocks.data()) + r * nb, packed.data() + r * nb * 16,
                                  scales.data() + r * nb, static_cast<size_t>(nb));
                st.push_back({name, DType::kU8, {rows, cols / 2}, std::move(packed), "I8"});
                st.push_back({TinyScaleName(name), DType::kU8, {rows, nb}, std::move(scales), "F8_E8M0"});
              }
              stacked.insert(stacked.end(), v.begin(), v.end());
              continue;
            }
            const std::vector<float> v = hf_tensor(d, seed_name(d, e), name, {rows, cols});
            stacked.insert(stacked.end(), v.begin(), v.end());
          }
          if (want_gguf) gw.AddTensor(gg, expert_dtype == DType::kMXFP4 ? DType::kMXFP4 : store_dtype, d.shape,
                                      Encode(expert_dtype == DType::kMXFP4 ? DType::kMXFP4 : store_dtype, stacked));
          break;
        }
        case TensorForm::kMlaKvB:
          kv_b = hf_tensor(d, seed, hf, d.shape);
          if (want_gguf && !s.split_kv_b) gw.AddTensor(gg, store_dtype, d.shape, Encode(store_dtype, kv_b));
          break;
        case TensorForm::kTokenExperts: {  // k distinct experts per token from a seeded start, I32 in both
          const int64_t V = d.shape[0], K = d.shape[1];
          std::vector<int32_t> ids(static_cast<size_t>(V * K));
          uint64_t rng = s.seed ^ HashName(gg);
          for (int64_t t = 0; t < V; ++t) {
            const int64_t first = static_cast<int64_t>(SplitMix(rng) % static_cast<uint64_t>(c.n_experts));
            for (int64_t j = 0; j < K; ++j) ids[static_cast<size_t>(t * K + j)] = static_cast<int32_t>((first + j) % c.n_experts);
          }
          std::vector<uint8_t> b(ids.size() * sizeof(int32_t));
          std::memcpy(b.data(), ids.data(), b.size());
          if (want_hf) st.push_back({hf, DType::kI32, d.shape, b});
          if (want_gguf) gw.AddTensor(gg, DType::kI32, d.shape, std::move(b));
          break;
        }
        case TensorForm::kMlaKB:
        case TensorForm::kMlaVB:
          if (want_gguf && s.split_kv_b) gw.AddTensor(gg, store_dtype, d.shape, Encode(store_dtype, SplitKvB(c, kv_b, d.form)));
          break;
      }
    }
  }
  bar.Finish();

  std::vector<float> freq_factors;
  if (s.llama3_rope_scaling) freq_factors = Llama3FreqFactors(s.head_dim, s.rope_theta, 32.0, 1.0, 4.0, 8192.0);

  if (want_gguf) {
    gw.SetString("general.architecture", gguf_arch);
    gw.SetString("general.name", "deepinfer-tiny-" + arch);
    gw.SetU32("general.alignment", 32);
    gw.SetU32(gguf_arch + ".context_length", s.ctx);
    gw.SetU32(gguf_arch + ".embedding_length", s.hidden);
    gw.SetU32(gguf_arch + ".block_count", all_layers);
    gw.SetU32(gguf_arch + ".feed_forward_length", s.intermediate);
    gw.SetU32(gguf_arch + ".attention.head_count", s.heads);
    if (ds && s.split_kv_b) {  // MQA form: one latent "head" of kv_lora + rope (V = the latent)
      gw.SetU32(gguf_arch + ".attention.head_count_kv", 1);
      gw.SetU32(gguf_arch + ".attention.key_length", s.kv_lora + s.qk_rope);
      gw.SetU32(gguf_arch + ".attention.value_length", s.kv_lora);
      gw.SetU32(gguf_arch + ".attention.key_length_mla", s.head_dim);
      gw.SetU32(gguf_arch + ".attention.value_length_mla", s.v_head);
    } else {
      gw.SetU32(gguf_arch + ".attention.head_count_kv", s.kv_heads);
      gw.SetU32(gguf_arch + ".attention.key_length", s.head_dim);
      gw.SetU32(gguf_arch + ".attention.value_length", ds ? s.v_head : s.head_dim);
    }
    if (c.n_mtp > 0) gw.SetU32(gguf_arch + ".nextn_predict_layers", static_cast<uint32_t>(c.n_mtp));
    // MLA and DeepSeek-V4 rotate only a part of each head.
    gw.SetU32(gguf_arch + ".rope.dimension_count", ds || s.arch == Arch::kDeepseekV4 ? s.qk_rope : s.head_dim);
    gw.SetF32(gguf_arch + ".rope.freq_base", static_cast<float>(s.rope_theta));
    gw.SetF32(gguf_arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
    gw.SetU32(gguf_arch + ".vocab_size", s.vocab);
    if (s.rope_linear != 1.0) {
      gw.SetString(gguf_arch + ".rope.scaling.type", "linear");
      gw.SetF32(gguf_arch + ".rope.scaling.factor", static_cast<float>(s.rope_linear));
    }
    if (family.tiny_gguf_metadata) family.tiny_gguf_metadata(s, gguf_arch + ".", gw);
    if (!freq_factors.empty()) {
      std::vector<uint8_t> b(freq_factors.size() * 4);
      std::memcpy(b.data(), freq_factors.data(), b.size());
      gw.AddTensor(TensorName(family, WeightFormat::kGguf, TensorId::kRopeFreqs), DType::kF32, {static_cast<int64_t>(freq_factors.size())}, std::move(b));
    }
    gw.SetString("tokenizer.ggml.model", "gpt2");
    gw.SetString("tokenizer.ggml.pre", "gpt-2");
    gw.SetStringArray("tokenizer.ggml.tokens", vocab.tokens);
    std::vector<int32_t> types(vocab.tokens.size(), 1);
    types[vocab.bos] = types[vocab.eos] = 3;
    gw.SetI32Array("tokenizer.ggml.token_type", types);
    gw.SetStringArray("tokenizer.ggml.merges", vocab.merges);
    gw.SetU32("tokenizer.ggml.bos_token_id", vocab.bos);
    gw.SetU32("tokenizer.ggml.eos_token_id", vocab.eos);
    gw.SetBool("tokenizer.ggml.add_bos_token", add_bos);
  }
  std::string gguf_path = out;
  if (want_hf) {
    std::error_code ec;
    fs::create_directories(out, ec);
    if (ec) return IoError(out + ": cannot create directory: " + ec.message());
    DI_RETURN_IF_ERROR(WriteSafetensors((fs::path(out) / "model.safetensors").string(), st));
    DI_RETURN_IF_ERROR(WriteText(fs::path(out) / "config.json", cfg.dump(2)));
    nlohmann::json vocab_json = nlohmann::json::object();
    for (size_t i = 0; i + 2 < vocab.tokens.size(); ++i) vocab_json[vocab.tokens[i]] = i;
    nlohmann::json added = nlohmann::json::array();
    for (int id : {vocab.bos, vocab.eos})
      added.push_back({{"id", id}, {"content", vocab.tokens[id]}, {"single_word", false}, {"lstrip", false},
                       {"rstrip", false}, {"normalized", false}, {"special", true}});
    nlohmann::json tok = {
        {"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", added}, {"normalizer", nullptr},
        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
        {"post_processor", nullptr},
        {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
        {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                   {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
                   {"vocab", vocab_json}, {"merges", vocab.merges}}}};
    DI_RETURN_IF_ERROR(WriteText(fs::path(out) / "tokenizer.json", tok.dump()));
    nlohmann::json tcfg = {{"bos_token", vocab.tokens[vocab.bos]}, {"eos_token", vocab.tokens[vocab.eos]},
                           {"add_bos_token", add_bos}, {"model_max_length", s.ctx},
                           {"tokenizer_class", "PreTrainedTokenizerFast"}};
    DI_RETURN_IF_ERROR(WriteText(fs::path(out) / "tokenizer_config.json", tcfg.dump(2)));
    gguf_path = (fs::path(out) / "model.gguf").string();
  }
  if (want_gguf) DI_RETURN_IF_ERROR(gw.Write(gguf_path));
  return Status::Ok();
}

}  // namespace deepinfer
