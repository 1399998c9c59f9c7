// What the paged KV cache needs to know about a model: how many layers it stores, how many elements one
// token's K and V rows hold in each, and (hybrid caches) how its layers fall into KV groups. The cache is sized
// from this alone, never from a whole model configuration, so kv/ does not depend on model/
// (ModelConfig::kv_layout() builds the single-group layout, kv_groups.h the hybrid one).
//
// KV groups (docs/architecture.md, "Hybrid KV cache"): layers that attend alike (full attention, or one
// sliding window W) share a block table per sequence, so a sliding-window group can drop the blocks that left
// its window while the full-attention group keeps every block. All groups page one pool: a block id is one
// page of `planes` K/V planes, and a group's layers occupy planes 0, 1, ... of the blocks it owns.
//
// Sparse layers (DeepSeek-V4's compressed rows: one row per `ratio` positions, stored for the position that
// closes the block; rows narrower than k_elems) are packed: such a layer takes only the rows its positions need
// within a block's region of a plane, (block_size - 1) / ratio + 1 rows of its own width, at an element offset,
// so several share one plane (GroupKvLayout packs them; docs/design/deepseek_v4.md, "KV cache").
#pragma once
#include <algorithm>
#include <vector>

namespace deepinfer {

struct KvLayout {
  int num_layers = 0;
  int k_elems = 0;  // per token per layer (MLA: kv_lora_rank + qk_rope_dim)
  int v_elems = 0;  // per token per layer (MLA: 0, V is read from the latent in K)
  // Hybrid caches only; empty: one full-attention group holding layer l in plane l (planes = num_layers).
  std::vector<int> group_window;  // per group: 0 = full attention, else the window W its layers share
  std::vector<int> layer_group;   // per layer
  std::vector<int> layer_plane;   // per layer: its plane within its group's blocks
  int planes = 0;
  // Sparse layers, declared by the model (empty: every layer stores a k_elems row for every position).
  std::vector<int> layer_ratio;   // per layer: positions per stored row (0 or 1: every position)
  std::vector<int> layer_elems;   // per layer: K elements per row (0: k_elems); packed layers have no V row
  // Set by GroupKvLayout when it packs (empty: every layer has its plane to itself and rows at their slots): the
  // element offset of the layer's rows within its plane's region of a block (block_size x k_elems elements).
  std::vector<int> layer_offset;
  // The cache layer holding MTP block 0's K=V rows (block k's: this + k), where the model's layout carries them
  // (DeepSeek-V4 under --speculative mtp: ModelConfig::Dsv4Layout(true)); -1: an MTP module, if any, has a cache of
  // its own (Transformer::MtpKvLayout) or there is none.
  int mtp_first_layer = -1;

  // One group holding every layer (what a model without windows gets).
  static KvLayout Plain(int num_layers, int k_elems, int v_elems) {
    KvLayout k;
    k.num_layers = num_layers;
    k.k_elems = k_elems;
    k.v_elems = v_elems;
    return k;
  }
  int num_groups() const { return group_window.empty() ? 1 : static_cast<int>(group_window.size()); }
  int num_planes() const { return layer_plane.empty() ? num_layers : planes; }
  int group_of(int layer) const { return layer_group.empty() ? 0 : layer_group[layer]; }
  int plane_of(int layer) const { return layer_plane.empty() ? layer : layer_plane[layer]; }
  int window(int group) const { return group_window.empty() ? 0 : group_window[group]; }
  int ratio_of(int layer) const { return layer_ratio.empty() ? 1 : std::max(1, layer_ratio[layer]); }
  int elems_of(int layer) const { return layer_elems.empty() || layer_elems[layer] == 0 ? k_elems : layer_elems[layer]; }
  bool packed() const { return !layer_offset.empty(); }
  int offset_of(int layer) const { return layer_offset.empty() ? 0 : layer_offset[layer]; }
  // Whether the model declares sparse layers (GroupKvLayout packs them).
  bool sparse() const {
    for (int l = 0; l < num_layers; ++l)
      if (ratio_of(l) > 1 || elems_of(l) != k_elems) return true;
    return false;
  }
  // Rows a packed layer of `ratio` keeps per block (the positions p with (p + 1) % ratio == 0 in it), and the row
  // position p takes among them.
  static int RowsPerBlock(int ratio, int block_size) { return ratio <= 1 ? block_size : (block_size - 1) / ratio + 1; }
  static int RowInBlock(int ratio, int block_size, int p) { return ratio <= 1 ? p % block_size : p % block_size / ratio; }
  // Group 0 is full attention (full groups come first): the "anchor" whose table never loses a block, which the
  // proposers' caches (draft model, MTP) index and whose chain hashes name a prefix.
  bool has_anchor() const { return window(0) == 0; }
  // Whether some group has a sliding window (a hybrid cache).
  bool windowed() const {
    for (int w : group_window)
      if (w > 0) return true;
    return false;
  }
};

}  // namespace deepinfer
