#include "kv/kv_groups.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

namespace deepinfer {

KvLayout GroupKvLayout(const KvLayout& base, const std::vector<int>& layer_window, int block_size) {
  KvLayout out = base;
  out.group_window.clear();
  out.layer_group.clear();
  out.layer_plane.clear();
  out.layer_offset.clear();
  out.planes = 0;
  std::map<int, std::vector<int>> kinds;  // window -> its layers in order; 0 (full) sorts first
  for (int l = 0; l < base.num_layers; ++l)
    kinds[l < static_cast<int>(layer_window.size()) ? std::max(0, layer_window[l]) : 0].push_back(l);
  const bool sparse = base.sparse();
  if (kinds.size() == 1 && kinds.begin()->first == 0 && !sparse) return out;  // no windows: today's cache exactly
  // Each kind's layers onto its own planes: (plane, element offset) per layer.
  const int64_t region = static_cast<int64_t>(block_size) * base.k_elems;  // a plane's elements per block
  std::vector<int> kind_plane(base.num_layers, 0), offset(base.num_layers, 0);
  std::map<int, int> kind_planes;
  for (const auto& k : kinds) {
    std::vector<int> order = k.second;
    auto need = [&](int l) {
      return static_cast<int64_t>(KvLayout::RowsPerBlock(base.ratio_of(l), block_size)) * base.elems_of(l);
    };
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return need(a) > need(b); });
    std::vector<int64_t> used;  // per plane of the kind: elements taken
    for (int l : order) {
      const int64_t n = std::min(need(l), region);
      size_t p = 0;
      while (p < used.size() && used[p] + n > region) ++p;
      if (p == used.size()) used.push_back(0);
      kind_plane[l] = static_cast<int>(p);
      offset[l] = static_cast<int>(used[p]);
      used[p] += n;
    }
    kind_planes[k.first] = static_cast<int>(used.size());
  }
  int planes = base.num_layers;
  for (const auto& k : kind_planes) planes = std::min(planes, k.second);
  out.planes = planes;
  out.layer_group.assign(base.num_layers, 0);
  out.layer_plane.assign(base.num_layers, 0);
  for (const auto& k : kinds) {
    const int first_group = static_cast<int>(out.group_window.size());
    const int groups = (kind_planes[k.first] + planes - 1) / planes;
    out.group_window.insert(out.group_window.end(), static_cast<size_t>(groups), k.first);
    for (int l : k.second) {
      out.layer_group[l] = first_group + kind_plane[l] / planes;
      out.layer_plane[l] = kind_plane[l] % planes;
    }
  }
  if (sparse) out.layer_offset = offset;
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
  std::set<std::pair<int, int>> used;  // (group, plane) holding some layer
  for (int l = 0; l < layout.num_layers; ++l) used.insert({layout.group_of(l), layout.plane_of(l)});
  return layout.num_groups() * layout.num_planes() - static_cast<int>(used.size());
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
