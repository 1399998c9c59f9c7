#include "model/config.h"

#include <cmath>
#include <cstdio>

namespace deepinfer {

Status ValidateConfig(const ModelConfig& c, const std::string& file) {
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
  if (c.shared_ffn < 0) return bad("shared expert size must not be negative");
  for (int l : c.nope_layers)
    if (l < 0 || l >= c.n_layers) return bad("a layer without RoPE is out of range: " + std::to_string(l));
  if (!c.nope_layers.empty() && c.mla) return bad("MLA layers always apply RoPE");
  if (c.sliding_window < 0) return bad("sliding window must not be negative");
  if (!c.swa_layers.empty() && static_cast<int>(c.swa_layers.size()) != c.n_layers)
    return bad("the sliding-window layer pattern has " + std::to_string(c.swa_layers.size()) + " entries for " +
               std::to_string(c.n_layers) + " layers");
  if (c.sliding_window > 0 && c.mla) return bad("sliding-window attention is not supported with MLA");
  if (!(c.rope_linear_factor >= 1.0) || !(c.rope_theta_swa >= 0) || !(c.query_pre_attn_scalar >= 0.f))
    return bad("RoPE linear factor must be >= 1, local RoPE base and query_pre_attn_scalar not negative");
  return Status::Ok();
}

std::vector<Dsv4KvLayer> ModelConfig::Dsv4KvLayers(std::vector<int>* windows, bool mtp) const {
  std::vector<Dsv4KvLayer> out(static_cast<size_t>(n_layers + (mtp ? n_mtp : 0)));
  std::vector<int> win;
  auto add = [&](int planes, int window) {
    const int first = static_cast<int>(win.size());
    win.insert(win.end(), static_cast<size_t>(planes), window);
    return first;
  };
  const int d = head_dim, di = dsv4.index_head_dim;
  for (int l = 0; l < n_layers; ++l) {
    Dsv4KvLayer& k = out[static_cast<size_t>(l)];
    k.raw = add(1, sliding_window);
    const int ratio = l < static_cast<int>(dsv4.compress_ratio.size()) ? dsv4.compress_ratio[static_cast<size_t>(l)] : 0;
    if (ratio == 0) continue;
    // Per token: the compressor's kv and score projections (2d each for CSA's two halves, d for HCA), and
    // CSA's indexer compressor's (2 d_I each), packed into planes of d.
    const int ring = ratio == 4 ? 4 * d + 4 * di : 2 * d;
    k.ring_planes = (ring + d - 1) / d;
    // The block closing at p reads its own tokens and (CSA) the previous block's: positions (p - 2 ratio, p].
    k.ring_window = ratio == 4 ? 2 * ratio : ratio;
    k.ring = add(k.ring_planes, k.ring_window);
    k.comp = add(1, 0);
    if (ratio == 4) k.index_key = add(1, 0);
  }
  // MTP block k: window-only, its K=V rows in one raw plane of window W after every decoder layer's planes.
  if (mtp)
    for (int k = 0; k < n_mtp; ++k) out[static_cast<size_t>(n_layers + k)].raw = add(1, sliding_window);
  if (windows) *windows = std::move(win);
  return out;
}

KvLayout ModelConfig::Dsv4Layout(bool mtp) const {
  std::vector<int> windows;
  const std::vector<Dsv4KvLayer> layers = Dsv4KvLayers(&windows, mtp);
  KvLayout k = KvLayout::Plain(static_cast<int>(windows.size()), head_dim, 0);
  // The compressed rows and indexer keys are sparse: one row per block of `ratio` positions (the indexer's of
  // index_head_dim), which a packed layout stores as such (GroupKvLayout).
  k.layer_ratio.assign(static_cast<size_t>(k.num_layers), 1);
  k.layer_elems.assign(static_cast<size_t>(k.num_layers), 0);
  for (int l = 0; l < n_layers; ++l) {
    const Dsv4KvLayer& kl = layers[static_cast<size_t>(l)];
    if (kl.comp < 0) continue;
    const int ratio = dsv4.compress_ratio[static_cast<size_t>(l)];
    k.layer_ratio[static_cast<size_t>(kl.comp)] = ratio;
    if (kl.index_key >= 0) {
      k.layer_ratio[static_cast<size_t>(kl.index_key)] = ratio;
      k.layer_elems[static_cast<size_t>(kl.index_key)] = dsv4.index_head_dim;
    }
  }
  if (mtp && n_mtp > 0) k.mtp_first_layer = layers[static_cast<size_t>(n_layers)].raw;
  return k;
}

std::vector<int> ModelConfig::kv_layer_windows(bool dsv4_mtp) const {
  std::vector<int> windows;
  if (is_dsv4()) {
    Dsv4KvLayers(&windows, dsv4_mtp);
    return windows;
  }
  for (int l = 0; l < n_layers; ++l) windows.push_back(LayerWindow(l));
  return windows;
}

std::string ModelConfig::Summary() const {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "arch=%s vocab=%d hidden=%d layers=%d heads=%d kv_heads=%d head_dim=%d ffn=%d ctx=%d rope_theta=%g%s%s%s%s",
                ArchName(arch), vocab_size, hidden, n_layers, n_heads, n_kv_heads, head_dim, intermediate, max_ctx,
                rope_theta, rope_freq_factors.empty() ? "" : " rope_scaling=llama3", tie_embeddings ? " tied" : "",
                attn_bias ? " qkv_bias" : "",
                qk_norm == QkNorm::kPerHead ? " qk_norm" : qk_norm == QkNorm::kWhole ? " qk_norm=whole" : "");
  std::string out = buf;
  if (!nope_layers.empty()) out += " nope_layers=" + std::to_string(nope_layers.size());
  if (sliding_window > 0) {
    int windowed = 0;
    for (int l = 0; l < n_layers; ++l) windowed += LayerWindow(l) > 0;
    out += " window=" + std::to_string(sliding_window) + " swa_layers=" + std::to_string(windowed) + "/" + std::to_string(n_layers);
    if (rope_theta_swa > 0) out += " rope_theta_swa=" + std::to_string(static_cast<long long>(rope_theta_swa));
  }
  if (rope_linear_factor != 1.0) out += " rope_linear=" + std::to_string(rope_linear_factor);
  if (ffn_act == FfnAct::kGeluTanh) out += " geglu";
  if (n_experts > 0)
    out += " experts=" + std::to_string(n_experts) + " used=" + std::to_string(n_experts_used) +
           " expert_ffn=" + std::to_string(moe_intermediate) + (norm_topk_prob ? " norm_topk" : "") +
           (n_shared_experts ? " shared=" + std::to_string(n_shared_experts) : "") +
           (first_k_dense ? " dense_first=" + std::to_string(first_k_dense) : "") + (router_sigmoid ? " sigmoid" : "") +
           (n_group > 1 ? " groups=" + std::to_string(topk_group) + "/" + std::to_string(n_group) : "");
  if (mla)
    out += " mla(q_lora=" + std::to_string(q_lora_rank) + " kv_lora=" + std::to_string(kv_lora_rank) +
           " nope=" + std::to_string(qk_nope_dim) + " rope=" + std::to_string(qk_rope_dim) + " v=" + std::to_string(v_head_dim) + ")";
  return out;
}

std::vector<float> Llama3FreqFactors(int rot_dim, double theta, double factor, double low_freq_factor,
                                     double high_freq_factor, double original_max_pos) {
  std::vector<float> out(rot_dim / 2);
  const double low_wavelen = original_max_pos / low_freq_factor, high_wavelen = original_max_pos / high_freq_factor;
  for (int i = 0; i < rot_dim / 2; ++i) {
    const double freq = std::pow(theta, -2.0 * i / rot_dim);
    const double wavelen = 2 * M_PI / freq;
    double f;
    if (wavelen < high_wavelen) {
      f = 1.0;
    } else if (wavelen > low_wavelen) {
      f = factor;
    } else {
      const double smooth = (original_max_pos / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      f = 1.0 / ((1 - smooth) / factor + smooth);
    }
    out[i] = static_cast<float>(f);
  }
  return out;
}

}  // namespace deepinfer
