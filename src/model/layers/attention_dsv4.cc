#include "model/layers/attention_dsv4.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "model/layers/linear.h"

namespace deepinfer {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The slot of position p in a sequence's view of a KV group.
int32_t SlotOf(const AttnSeq& s, int p) { return s.rows[p - s.rows_first]; }

}  // namespace

Dsv4Attention::Dsv4Attention(const Ops& ops, const ModelConfig& c, int max_tokens)
    : ops_(ops), c_(c), kv_layers_(c.Dsv4KvLayers()), heads_(c.n_heads), hd_(c.head_dim), rope_(c.qk_rope_dim),
      q_lora_(c.q_lora_rank), groups_(c.dsv4.o_groups), o_lora_(c.dsv4.o_lora_rank), idx_heads_(c.dsv4.index_heads),
      idx_hd_(c.dsv4.index_head_dim), idx_topk_(c.dsv4.index_topk), window_(c.sliding_window), eps_(c.rms_eps),
      scale_(1.f / std::sqrt(static_cast<float>(c.head_dim))) {
  // Window-only layers rotate with the plain base and no YaRN; compressed layers, their compressors and the
  // indexer with the compressed base and YaRN's frequencies (magnitude 1: llama.cpp's attn_factor cancels its
  // mscale, and transformers forces attention_factor 1 for this model).
  // MTP block k: window-only, its K=V rows in layer k of the MTP cache (Transformer::MtpKvLayout), or in the
  // main cache's MTP plane where its layout has one (KvLayout::mtp_first_layer, Forward).
  for (int k = 0; k < c.n_mtp; ++k) kv_layers_.push_back(Dsv4KvLayer{.raw = k});
  rope_plain_ = RopeTable::Make(RopeStyle::kAdjacentPairs, rope_, c.rope_theta, {});
  YarnParams yarn = c.yarn;
  yarn.mscale = 1.f;
  rope_compress_ = RopeTable::Make(RopeStyle::kAdjacentPairs, rope_, c.dsv4.compress_rope_theta, {}, yarn);
  rope_compress_.mscale = 1.f;
  const size_t m = static_cast<size_t>(max_tokens);
  ones_.assign(static_cast<size_t>(std::max(hd_, idx_hd_)), 1.f);
  qr_.resize(m * q_lora_);
  q_.resize(m * heads_ * hd_);
  kv_.resize(m * hd_);
  int ring_planes = 0;
  for (const Dsv4KvLayer& k : kv_layers_) ring_planes = std::max(ring_planes, k.ring_planes);
  ring_.resize(m * std::max(1, ring_planes) * hd_);
  const size_t widest = static_cast<size_t>(std::max(hd_, idx_hd_));
  comp_.resize(widest);
  packed_.resize(m * std::max(1, ring_planes) * hd_);
  tmp_.resize(m * 2 * widest);  // CSA's compressor: 2 hd; the indexer's: 2 index_head_dim
  cand_vals_.resize(128 * widest);  // HCA's 128 positions (CSA: 2 x 4)
  cand_scores_.resize(cand_vals_.size());
  o_.resize(q_.size());
  z_.resize(m * groups_ * o_lora_);
  idx_q_.resize(m * std::max(1, idx_heads_ * idx_hd_));
  idx_w_.resize(m * std::max(1, idx_heads_));
  row_a_.resize(static_cast<size_t>(std::max(1, ring_planes) * hd_));
  row_b_.resize(row_a_.size());
}

void Dsv4Attention::TailRope(const RopeTable& t, float* x, int n, int heads, int hd, const int32_t* pos, bool inverse) const {
  const int half = t.rot_dim / 2, off = hd - t.rot_dim;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < half; ++j) {
      const double a = static_cast<double>(pos[i]) * t.inv_freq[j];
      const float cs = static_cast<float>(std::cos(a)) * t.mscale;
      const float sn = static_cast<float>(std::sin(a)) * t.mscale * (inverse ? -1.f : 1.f);
      for (int h = 0; h < heads; ++h) {
        float* v = x + (static_cast<int64_t>(i) * heads + h) * hd + off;
        const float x0 = v[2 * j], x1 = v[2 * j + 1];
        v[2 * j] = x0 * cs - x1 * sn;
        v[2 * j + 1] = x0 * sn + x1 * cs;
      }
    }
  }
}

const float* Dsv4Attention::Row(const PagedKvCache& kv, int layer, int32_t slot, float* scratch) const {
  const uint8_t* p = kv.KRow(layer, slot);
  if (kv.dtype() == DType::kF32) return reinterpret_cast<const float*>(p);
  ops_.DequantizeRow(kv.dtype(), p, scratch, static_cast<size_t>(kv.k_row_elems(layer)));
  return scratch;
}

void Dsv4Attention::CompressBlock(const PagedKvCache& kv, const Dsv4KvLayer& kl, const BatchView& b, int seq, int ratio,
                                  int block, int hd, int kv_off, int score_off, const std::vector<float>& norm, float* row) {
  // The candidates: CSA pools the previous block's tokens through the first half of the projections and its
  // own through the second; HCA its own tokens through the whole width. A block before position 0 has none.
  const bool overlap = ratio == 4;
  const int first = overlap ? ratio * block - ratio : ratio * block;
  const int count = overlap ? 2 * ratio : ratio;
  std::vector<float>& vals = cand_vals_;
  std::vector<float>& scores = cand_scores_;
  std::fill_n(vals.begin(), static_cast<size_t>(count) * hd, 0.f);
  std::fill_n(scores.begin(), static_cast<size_t>(count) * hd, kNegInf);
  const int planes = kl.ring_planes;
  for (int j = 0; j < count; ++j) {
    const int p = first + j;
    if (p < 0) continue;
    // A layer's ring planes may fall into different KV groups (the hybrid layout packs planes of one window
    // kind into groups of equal size), each with its own block table.
    for (int pl = 0; pl < planes; ++pl) {
      const int32_t slot = SlotOf(b.ForGroup(kv.group_of(kl.ring + pl)).seqs[seq], p);
      std::memcpy(row_a_.data() + static_cast<size_t>(pl) * hd_, Row(kv, kl.ring + pl, slot, row_b_.data()), sizeof(float) * hd_);
    }
    const int half = overlap && j >= ratio ? hd : 0;
    std::memcpy(vals.data() + static_cast<size_t>(j) * hd, row_a_.data() + kv_off + half, sizeof(float) * hd);
    std::memcpy(scores.data() + static_cast<size_t>(j) * hd, row_a_.data() + score_off + half, sizeof(float) * hd);
  }
  for (int ch = 0; ch < hd; ++ch) {
    float mx = kNegInf;
    for (int j = 0; j < count; ++j) mx = std::max(mx, scores[static_cast<size_t>(j) * hd + ch]);
    double sum = 0;
    float w[256];
    for (int j = 0; j < count; ++j) {
      const float s = scores[static_cast<size_t>(j) * hd + ch];
      w[j] = s == kNegInf ? 0.f : std::exp(s - mx);
      sum += w[j];
    }
    const float inv = static_cast<float>(1.0 / sum);
    float acc = 0;
    for (int j = 0; j < count; ++j) acc += vals[static_cast<size_t>(j) * hd + ch] * (w[j] * inv);
    row[ch] = acc;
  }
  ops_.RmsNorm(row, norm.data(), eps_, 1, hd, row);
  const int32_t start = ratio * block;
  TailRope(rope_compress_, row, 1, 1, hd, &start, false);
}

Status Dsv4Attention::Forward(const Dsv4AttnWeights& w, const BatchView& b, int layer, PagedKvCache& kv, const float* xn,
                              float* out) {
  const int n = b.n, H = heads_, hd = hd_;
  Dsv4KvLayer kl = kv_layers_[static_cast<size_t>(layer)];
  if (layer >= c_.n_layers && kv.layout().mtp_first_layer >= 0)
    kl.raw = kv.layout().mtp_first_layer + (layer - c_.n_layers);  // the main cache's windowed MTP plane
  const int ratio = c_.dsv4.compress_ratio[static_cast<size_t>(layer)];
  const RopeTable& rope = ratio == 0 ? rope_plain_ : rope_compress_;
  if (b.cp) return Unimplemented("DeepSeek-V4 attention does not run under context parallelism");

  // q = rope(RMSNorm_per_head(W_qb RMSNorm(W_qa x))); kv = rope(RMSNorm(W_kv x)), appended to the raw window.
  ops_.MatMul(w.wq_a, xn, n, qr_.data());
  ops_.RmsNorm(qr_.data(), w.q_a_norm.data(), eps_, n, q_lora_, qr_.data());
  ops_.MatMul(w.wq_b, qr_.data(), n, q_.data());
  ops_.RmsNorm(q_.data(), ones_.data(), eps_, n * H, hd, q_.data());
  TailRope(rope, q_.data(), n, H, hd, b.pos, false);
  ops_.MatMul(w.wkv, xn, n, kv_.data());
  ops_.RmsNorm(kv_.data(), w.kv_norm.data(), eps_, n, hd, kv_.data());
  TailRope(rope, kv_.data(), n, 1, hd, b.pos, false);
  const BatchView& raw = b.ForGroup(kv.group_of(kl.raw));
  DI_RETURN_IF_ERROR(WriteBatchKv(raw, kv, kl.raw, kv_.data(), nullptr));

  const BatchView* comp = nullptr;
  if (ratio != 0) {
    // The compressor's per-token inputs (projections and slot-biased scores; CSA also the indexer's), packed
    // into the ring planes, plane-major so that each plane's n rows are contiguous for the write.
    const int cw = (ratio == 4 ? 2 : 1) * hd, iw = 2 * idx_hd_, planes = kl.ring_planes;
    const int row_w = planes * hd;
    float* packed = packed_.data();
    float* tmp = tmp_.data();
    std::fill_n(packed, static_cast<size_t>(n) * row_w, 0.f);
    auto put = [&](const TensorView& proj, const std::vector<float>* ape, int width, int off) {
      ops_.MatMul(proj, xn, n, tmp);
      for (int i = 0; i < n; ++i) {
        float* dst = packed + static_cast<size_t>(i) * row_w + off;
        const float* src = tmp + static_cast<size_t>(i) * width;
        const float* bias = ape ? ape->data() + static_cast<size_t>(b.pos[i] % ratio) * width : nullptr;
        for (int j = 0; j < width; ++j) dst[j] = bias ? src[j] + bias[j] : src[j];
      }
    };
    put(w.comp_kv, nullptr, cw, 0);
    put(w.comp_gate, &w.comp_ape, cw, cw);
    if (ratio == 4) {
      put(w.idx_comp_kv, nullptr, iw, 2 * cw);
      put(w.idx_comp_gate, &w.idx_comp_ape, iw, 2 * cw + iw);
    }
    for (int pl = 0; pl < planes; ++pl) {
      float* plane = ring_.data() + static_cast<size_t>(pl) * n * hd;
      for (int i = 0; i < n; ++i)
        std::memcpy(plane + static_cast<size_t>(i) * hd, packed + static_cast<size_t>(i) * row_w + pl * hd, sizeof(float) * hd);
      DI_RETURN_IF_ERROR(WriteBatchKv(b.ForGroup(kv.group_of(kl.ring + pl)), kv, kl.ring + pl, plane, nullptr));
    }
    // Blocks the batch completes: their rows go to the slot of the closing token (skipped where the cache
    // already holds that position, slot -1: a prefix hit's replayed rows).
    comp = &b.ForGroup(kv.group_of(kl.comp));
    const BatchView* index = ratio == 4 ? &b.ForGroup(kv.group_of(kl.index_key)) : nullptr;
    float* key = comp_.data();
    for (int s = 0; s < b.num_seqs; ++s) {
      const AttnSeq& rs = comp->seqs[s];
      for (int i = 0; i < rs.m; ++i) {
        const int p = rs.start + i, r = static_cast<int>(rs.q_row) + i;
        if ((p + 1) % ratio != 0 || comp->kv_slots[r] < 0) continue;
        const int block = (p + 1) / ratio - 1;
        std::fill_n(key, hd, 0.f);
        CompressBlock(kv, kl, b, s, ratio, block, hd, 0, cw, w.comp_norm, key);
        kv.Write(kl.comp, key, nullptr, &comp->kv_slots[r], 1);
        if (index && index->kv_slots[r] >= 0) {
          std::fill_n(key, hd, 0.f);
          CompressBlock(kv, kl, b, s, ratio, block, idx_hd_, 2 * cw, 2 * cw + iw, w.idx_comp_norm, key);
          kv.Write(kl.index_key, key, nullptr, &index->kv_slots[r], 1);
        }
      }
    }
  }
  if (ratio == 4) {
    // The indexer's queries (rotated like the compressed keys) and per-head weights.
    ops_.MatMul(w.idx_q_b, qr_.data(), n, idx_q_.data());
    TailRope(rope_compress_, idx_q_.data(), n, idx_heads_, idx_hd_, b.pos, false);
    ops_.MatMul(w.idx_proj, xn, n, idx_w_.data());
    const float ws = 1.f / std::sqrt(static_cast<float>(idx_hd_ * idx_heads_));
    for (int i = 0; i < n * idx_heads_; ++i) idx_w_[i] *= ws;
  }

  // Attention per query row over its window and the compressed rows it may see: the row's keys are gathered
  // (converted to f32) into one matrix, and its heads' logits and outputs are two products through the ops
  // (K q_h for every head, then the softmax weights times K^T); the indexer scores every visible block the same
  // way (its heads' queries times the blocks' keys). A row's result depends on nothing but its own keys (batch-
  // and chunk-invariant). The rows go in waves whose gathered keys fit a budget, each product kind of a wave in
  // one MatMulMany (bitwise each MatMul), so rows with few heads or keys still share the threads.
  // The first n elements of a cache row, as f32 (row_b_: the conversion scratch when the cache is not f32).
  auto gather = [&](int cache_layer, int32_t slot, float* dst, int n) {
    std::memcpy(dst, Row(kv, cache_layer, slot, row_b_.data()), sizeof(float) * static_cast<size_t>(n));
  };
  auto f32_view = [](const float* data, int64_t rows, int64_t cols) {
    TensorView t;
    t.dtype = DType::kF32;
    t.shape = {rows, cols};
    t.data = data;
    t.nbytes = sizeof(float) * static_cast<size_t>(rows * cols);
    return t;
  };
  // Every sequence's indexer keys (the blocks its last row sees), gathered once: each row reads a prefix.
  idx_seq_off_.assign(static_cast<size_t>(b.num_seqs) + 1, 0);
  for (int s = 0; s < b.num_seqs; ++s) {
    const AttnSeq& rq = raw.seqs[s];
    const int visible = ratio == 4 && rq.m > 0 ? (rq.start + rq.m) / ratio : 0;
    idx_seq_off_[s + 1] = idx_seq_off_[s] + (visible > idx_topk_ ? static_cast<size_t>(visible) * idx_hd_ : 0);
  }
  idx_keys_.resize(idx_seq_off_.back());
  for (int s = 0; s < b.num_seqs; ++s) {
    const int visible = static_cast<int>((idx_seq_off_[s + 1] - idx_seq_off_[s]) / std::max(1, idx_hd_));
    if (visible == 0) continue;
    const AttnSeq& is = b.ForGroup(kv.group_of(kl.index_key)).seqs[s];
    for (int blk = 0; blk < visible; ++blk)
      gather(kl.index_key, SlotOf(is, ratio * blk + ratio - 1), idx_keys_.data() + idx_seq_off_[s] + static_cast<size_t>(blk) * idx_hd_, idx_hd_);
  }
  // Each row's shape, known before any product: its window, and the compressed rows it attends (the indexer's
  // top-k of more than k visible blocks, else every visible one).
  wave_.clear();
  for (int s = 0; s < b.num_seqs; ++s) {
    const AttnSeq& rq = raw.seqs[s];
    for (int i = 0; i < rq.m; ++i) {
      QueryRow q;
      q.s = s;
      q.p = rq.start + i;
      q.r = static_cast<int>(rq.q_row) + i;
      // Not below rows_first: an approximate replay (--swa-replay approx) restored nothing before its start.
      q.w0 = std::max(rq.rows_first, q.p - window_ + 1);
      q.visible = ratio != 0 ? (q.p + 1) / ratio : 0;
      q.indexed = ratio == 4 && q.visible > idx_topk_;
      q.nk = q.p - q.w0 + 1 + (q.indexed ? idx_topk_ : q.visible);
      wave_.push_back(q);
    }
  }
  constexpr size_t kWaveFloats = size_t{1} << 21;  // gathered keys per wave (8 MiB, and as much transposed)
  for (size_t first = 0; first < wave_.size();) {
    // The wave: rows from `first` while their keys fit (at least one row).
    size_t last = first, key_floats = 0, logit_floats = 0, dot_floats = 0;
    while (last < wave_.size() && (last == first || key_floats + static_cast<size_t>(wave_[last].nk) * hd <= kWaveFloats)) {
      QueryRow& q = wave_[last++];
      q.keys = key_floats;
      q.logits = logit_floats;
      q.dots = dot_floats;
      key_floats += static_cast<size_t>(q.nk) * hd;
      logit_floats += static_cast<size_t>(q.nk) * H;
      if (q.indexed) dot_floats += static_cast<size_t>(q.visible) * idx_heads_;
    }
    keys_.resize(key_floats);
    keys_t_.resize(key_floats);
    logits_.resize(logit_floats);
    idx_dots_.resize(dot_floats);
    views_.resize(2 * (last - first));
    jobs_.clear();
    // The indexer: S_b = sum_h w_h ReLU(q_h . k_b) for the rows with more visible blocks than k.
    for (size_t j = first; j < last; ++j) {
      const QueryRow& q = wave_[j];
      if (!q.indexed) continue;
      views_[2 * (j - first)] = f32_view(idx_keys_.data() + idx_seq_off_[q.s], q.visible, idx_hd_);
      jobs_.push_back({&views_[2 * (j - first)], idx_q_.data() + static_cast<size_t>(q.r) * idx_heads_ * idx_hd_, idx_heads_,
                       idx_dots_.data() + q.dots});
    }
    if (!jobs_.empty()) ops_.MatMulMany(jobs_.data(), static_cast<int>(jobs_.size()));
    // Each row's keys: the window, then the compressed rows (the top k by score, in block order).
    for (size_t j = first; j < last; ++j) {
      const QueryRow& q = wave_[j];
      const AttnSeq& rq = raw.seqs[q.s];
      picked_.clear();
      if (q.indexed) {
        scores_.assign(static_cast<size_t>(q.visible), 0.f);
        const float* wr = idx_w_.data() + static_cast<size_t>(q.r) * idx_heads_;
        const float* dots = idx_dots_.data() + q.dots;
        for (int blk = 0; blk < q.visible; ++blk) {
          float sc = 0;
          for (int h = 0; h < idx_heads_; ++h) sc += std::max(0.f, dots[static_cast<size_t>(h) * q.visible + blk]) * wr[h];
          scores_[blk] = sc;
        }
        picked_.resize(static_cast<size_t>(q.visible));
        std::iota(picked_.begin(), picked_.end(), 0);
        std::partial_sort(picked_.begin(), picked_.begin() + idx_topk_, picked_.end(), [&](int32_t a, int32_t c) {
          return scores_[a] > scores_[c] || (scores_[a] == scores_[c] && a < c);
        });
        picked_.resize(static_cast<size_t>(idx_topk_));
        std::sort(picked_.begin(), picked_.end());
      } else {
        for (int blk = 0; blk < q.visible; ++blk) picked_.push_back(blk);
      }
      float* keys = keys_.data() + q.keys;
      const int nw = q.p - q.w0 + 1;
      for (int j2 = 0; j2 < nw; ++j2) gather(kl.raw, SlotOf(rq, q.w0 + j2), keys + static_cast<size_t>(j2) * hd, hd);
      for (size_t j2 = 0; j2 < picked_.size(); ++j2)
        gather(kl.comp, SlotOf(comp->seqs[q.s], ratio * picked_[j2] + ratio - 1), keys + static_cast<size_t>(nw + j2) * hd, hd);
    }
    // Logits of every head (H rows of nk per query row).
    jobs_.clear();
    for (size_t j = first; j < last; ++j) {
      const QueryRow& q = wave_[j];
      views_[2 * (j - first)] = f32_view(keys_.data() + q.keys, q.nk, hd);
      jobs_.push_back({&views_[2 * (j - first)], q_.data() + static_cast<size_t>(q.r) * H * hd, H, logits_.data() + q.logits});
    }
    ops_.MatMulMany(jobs_.data(), static_cast<int>(jobs_.size()));
    // Each head's softmax with its sink, in place; the keys transposed (hd rows of nk) for the second product.
    for (size_t j = first; j < last; ++j) {
      const QueryRow& q = wave_[j];
      const int nk = q.nk;
      for (int h = 0; h < H; ++h) {
        float* lh = logits_.data() + q.logits + static_cast<size_t>(h) * nk;
        const float sink = w.sinks[h];
        float mx = sink;
        for (int k = 0; k < nk; ++k) mx = std::max(mx, lh[k] *= scale_);
        double sum = std::exp(sink - mx);
        for (int k = 0; k < nk; ++k) sum += lh[k] = std::exp(lh[k] - mx);
        const float inv = static_cast<float>(1.0 / sum);
        for (int k = 0; k < nk; ++k) lh[k] *= inv;
      }
      const float* keys = keys_.data() + q.keys;
      float* keys_t = keys_t_.data() + q.keys;
      for (int k = 0; k < nk; ++k)
        for (int e = 0; e < hd; ++e) keys_t[static_cast<size_t>(e) * nk + k] = keys[static_cast<size_t>(k) * hd + e];
    }
    // o_h = sum_k p_hk key_k: the weights times K^T.
    jobs_.clear();
    for (size_t j = first; j < last; ++j) {
      const QueryRow& q = wave_[j];
      views_[2 * (j - first) + 1] = f32_view(keys_t_.data() + q.keys, hd, q.nk);
      jobs_.push_back({&views_[2 * (j - first) + 1], logits_.data() + q.logits, H, o_.data() + static_cast<size_t>(q.r) * H * hd});
    }
    ops_.MatMulMany(jobs_.data(), static_cast<int>(jobs_.size()));
    first = last;
  }
  // Undo the rotation the values carried, then the grouped low-rank output: z_g = W_oa[g] o_g, out = W_ob z.
  TailRope(rope, o_.data(), n, H, hd, b.pos, true);
  HeadsMatMul g;
  g.heads = groups_;
  g.rows = n;
  g.head_weight = [&](int grp) { return RowSlice(w.wo_a, static_cast<int64_t>(grp) * o_lora_, o_lora_); };
  g.x = o_.data();
  g.x_stride = static_cast<int64_t>(H) * hd;
  g.x_head_offset = static_cast<int64_t>(H / groups_) * hd;
  g.in_width = H / groups_ * hd;
  g.y = z_.data();
  g.y_stride = static_cast<int64_t>(groups_) * o_lora_;
  g.y_head_offset = o_lora_;
  g.out_width = o_lora_;
  ops_.MatMulHeads(g);
  ops_.MatMul(w.wo_b, z_.data(), n, out);
  return Status::Ok();
}

}  // namespace deepinfer
