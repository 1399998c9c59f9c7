#include "engine/kv_identity.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "kv/kv_tier_format.h"

namespace deepinfer {
namespace {

// Accumulates values into one 64-bit digest (each value's checksum folded in order).
class Digest {
 public:
  void Bytes(const void* p, size_t n) { Mix(Checksum64(p, n) ^ n); }
  template <typename T>
  void Pod(const T& v) {
    Bytes(&v, sizeof v);
  }
  void Str(const std::string& s) { Bytes(s.data(), s.size()); }
  void Tensor(const TensorView& t) {
    Pod(static_cast<int>(t.dtype));
    Pod(t.nbytes);
    for (int64_t d : t.shape) Pod(d);
    if (!t.data || t.nbytes == 0) return;
    const auto* b = static_cast<const uint8_t*>(t.data);
    const size_t k = std::min<size_t>(256, t.nbytes);
    Bytes(b, k);
    Bytes(b + (t.nbytes - k) / 2, k);
    Bytes(b + t.nbytes - k, k);
  }
  uint64_t value() const { return h_; }

 private:
  void Mix(uint64_t v) {
    uint64_t x = h_ ^ (v + 0x9e3779b97f4a7c15ull + (h_ << 6) + (h_ >> 2));
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    h_ = x ^ (x >> 31);
  }
  uint64_t h_ = 0x6465657069666572ull;
};

}  // namespace

uint64_t ModelKvDigest(const Model& m, const KvLayout& layout, DType kv_dtype, int block_size, int rank) {
  Digest d;
  d.Pod(kKvLayoutVersion);
  const ModelConfig& c = m.config;
  d.Pod(static_cast<int>(c.arch));
  for (int v : {c.vocab_size, c.hidden, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.intermediate,
                c.sliding_window, c.q_lora_rank, c.kv_lora_rank, c.qk_nope_dim, c.qk_rope_dim, c.v_head_dim})
    d.Pod(v);
  d.Pod(c.mla);
  for (double v : {c.rope_theta, c.rope_theta_swa, c.rope_linear_factor}) d.Pod(v);
  d.Pod(static_cast<int>(c.rope_style));
  // Everything else that changes a K/V row's bits: YaRN (an HF gpt-oss with truncate: false and its GGUF
  // conversion hold the same weights but rotate differently), the windowed layers' RoPE scaling, norms.
  for (double v : {c.yarn.factor, c.yarn.original_ctx, c.yarn.beta_fast, c.yarn.beta_slow, c.dsv4.compress_rope_theta})
    d.Pod(v);
  d.Pod(c.yarn.mscale);
  d.Pod(c.yarn.truncate);
  d.Pod(c.swa_rope_scaled);
  d.Pod(c.rms_eps);
  d.Pod(c.query_pre_attn_scalar);
  d.Pod(static_cast<int>(c.qk_norm));
  if (!c.rope_freq_factors.empty())
    d.Bytes(c.rope_freq_factors.data(), c.rope_freq_factors.size() * sizeof(float));
  for (int l = 0; l < c.n_layers; ++l) d.Pod(c.LayerWindow(l));
  if (m.tokenizer) {
    d.Pod(m.tokenizer->vocab_size());
    for (int i = 0; i < m.tokenizer->vocab_size(); ++i) d.Str(m.tokenizer->piece(i));
  }
  d.Tensor(m.tok_embd);
  d.Tensor(m.lm_head);
  if (!m.out_norm.empty()) d.Bytes(m.out_norm.data(), m.out_norm.size() * sizeof(float));
  for (const LayerWeights& lw : m.layers) {
    if (!lw.attn_norm.empty()) d.Bytes(lw.attn_norm.data(), lw.attn_norm.size() * sizeof(float));
    for (const TensorView* t : lw.Matrices()) d.Tensor(*t);
  }
  // The cache format.
  d.Pod(layout.num_layers);
  d.Pod(layout.k_elems);
  d.Pod(layout.v_elems);
  d.Pod(layout.num_planes());
  for (int g = 0; g < layout.num_groups(); ++g) d.Pod(layout.window(g));
  if (layout.packed())  // where each sparse layer's rows sit in a block
    for (int l = 0; l < layout.num_layers; ++l) {
      d.Pod(layout.group_of(l));
      d.Pod(layout.plane_of(l));
      d.Pod(layout.offset_of(l));
      d.Pod(layout.ratio_of(l));
      d.Pod(layout.elems_of(l));
    }
  d.Pod(static_cast<int>(kv_dtype));
  d.Pod(block_size);
  d.Str(OpsFor(m.tok_embd.device).kernels());  // the kernel set (ISA) that wrote the K/V
  // The shard.
  d.Pod(m.shard.tp);
  d.Pod(m.shard.tp_rank);
  d.Pod(rank);
  return d.value();
}

}  // namespace deepinfer
