#include "kv/kv_groups.h"

#include <algorithm>
#include <map>

namespace deepinfer {

KvLayout GroupKvLayout(const KvLayout& base, const std::vector<int>& layer_window) {
  KvLayout out;
  out.num_layers = base.num_layers;
  out.k_elems = base.k_elems;
  out.v_elems = base.v_elems;
  std::map<int, std::vector<int>> kinds;  // window -> its layers in order; 0 (full) sorts first
  for (int l = 0; l < base.num_layers; ++l)
    kinds[l < static_cast<int>(layer_window.size()) ? std::max(0, layer_window[l]) : 0].push_back(l);
  if (kinds.size() == 1 && kinds.begin()->first == 0) return out;  // no windows: today's cache exactly
  size_t planes = base.num_layers;
  for (const auto& k : kinds) planes = std::min(planes, k.second.size());
  out.planes = static_cast<int>(planes);
  out.layer_group.assign(base.num_layers, 0);
  out.layer_plane.assign(base.num_layers, 0);
  for (const auto& k : kinds) {
    const std::vector<int>& layers = k.second;
    for (size_t i = 0; i < layers.size(); ++i) {
      if (i % planes == 0) out.group_window.push_back(k.first);
      out.layer_group[layers[i]] = static_cast<int>(out.group_window.size()) - 1;
      out.layer_plane[layers[i]] = static_cast<int>(i % planes);
    }
  }
  return out;
}

int ReplayBound(const KvLayout& layout, int requested, int max_len) {
  if (!layout.has_anchor()) return 0;
  int64_t widest = 0;
  for (int g = 0; g < layout.num_groups(); ++g) widest = std::max<int64_t>(widest, layout.window(g));
  const int64_t r = requested >= 0 ? requested : 4 * widest;
  return static_cast<int>(std::min<int64_t>(r, std::max(0, max_len)));
}

int64_t KvAhead(int chunks_in_flight, int64_t chunk, int64_t spec_tokens) {
  return chunks_in_flight * chunk + 2 * spec_tokens;
}

int PaddingPlanes(const KvLayout& layout) {
  return layout.num_groups() * layout.num_planes() - layout.num_layers;
}

int64_t MaxSeqBlocks(const KvLayout& layout, int block_size, int64_t tokens, int64_t ahead) {
  const int64_t bs = block_size, all = (tokens + bs - 1) / bs;
  int64_t total = 0;
  for (int g = 0; g < layout.num_groups(); ++g) {
    const int64_t w = layout.window(g);
    // Live blocks run from floor((F - W + 1) / bs) to ceil((F + ahead) / bs): at most ceil((W - 1 + ahead +
    // bs - 1) / bs) whatever F's offset in its block.
    total += w == 0 ? all : std::min(all, (w + ahead + bs - 2 + bs - 1) / bs);
  }
  return total;
}

}  // namespace deepinfer
