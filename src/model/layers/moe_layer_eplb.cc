// Online expert rebalancing (EPLB) under expert parallelism: new placements from the counted loads, and the expert
// weights moved between ranks to match, the way DeepSeek's serving system reassigns experts between GPUs.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "dist/eplb.h"
#include "model/shard.h"
#include "model/layers/moe_layer.h"

namespace deepinfer {

StatusOr<ExpertRebalanceReport> MoeLayer::Rebalance() {
  ExpertRebalanceReport rep;
  if (placement_.empty()) return rep;
  const int E = c_.n_experts, P = dist_->pc.ep;
  std::vector<int> moe_layers;
  for (int l = 0; l < c_.n_layers; ++l)
    if (!placement_[l].empty()) moe_layers.push_back(l);
  // Loads of every MoE layer, gathered and summed in rank order (identical on every rank).
  const size_t n = moe_layers.size() * static_cast<size_t>(E);
  std::vector<int64_t> mine(n), all(n * dist_->moe->size());
  for (size_t i = 0; i < moe_layers.size(); ++i)
    std::copy(expert_load_[moe_layers[i]].begin(), expert_load_[moe_layers[i]].end(), mine.begin() + i * E);
  DI_RETURN_IF_ERROR(dist_->moe->AllGather(mine.data(), n * sizeof(int64_t), all.data()));
  std::vector<std::vector<double>> weight(moe_layers.size(), std::vector<double>(E, 0.0));
  for (int r = 0; r < dist_->moe->size(); ++r)
    for (size_t i = 0; i < n; ++i) {
      weight[i / E][i % E] += static_cast<double>(all[r * n + i]);
      rep.pairs += all[r * n + i];
    }
  for (int l : moe_layers) std::fill(expert_load_[l].begin(), expert_load_[l].end(), 0);
  const int slots = static_cast<int>(placement_[moe_layers[0]].phy2log.size());
  DI_ASSIGN_OR_RETURN(dist::EplbPlacement next,
                      dist::RebalanceExperts(weight, slots, EplbGroups(E, c_.n_group), 1, P));
  dist::EplbPlacement now;
  for (int l : moe_layers) {
    now.phy2log.push_back(placement_[l].phy2log);
    std::vector<int32_t> cnt(E);
    for (int e = 0; e < E; ++e) cnt[e] = static_cast<int32_t>(placement_[l].log2phy[e].size());
    now.logcnt.push_back(std::move(cnt));
  }
  const std::vector<double> before = dist::RankImbalance(weight, now, P), after = dist::RankImbalance(weight, next, P);
  rep.imbalance_before = *std::max_element(before.begin(), before.end());
  rep.imbalance_after = *std::max_element(after.begin(), after.end());
  for (size_t i = 0; i < moe_layers.size(); ++i) {
    const int l = moe_layers[i];
    ExpertPlacement pl = ExpertPlacement::FromPhy2Log(std::move(next.phy2log[i]), E, P);
    for (int s = 0; s < slots; ++s) rep.moved_slots += placement_[l].phy2log[s] != pl.phy2log[s];
    DI_RETURN_IF_ERROR(MoveExperts(l, pl, &rep));
    placement_[l] = std::move(pl);
  }
  return rep;
}

// Every rank computes the same plan from the two placements: for each rank (ascending) the logical experts its
// group's slots hold next but did not hold before (ascending, a replicated expert once), each sent by the rank
// with the same slice index in the group owning the expert's first old slot. One all-to-all-v per layer carries
// them (packed by destination, in plan order), so the largest message is one layer's moves.
Status MoeLayer::MoveExperts(int l, const ExpertPlacement& next, ExpertRebalanceReport* rep) {
  const ExpertPlacement& old = placement_[l];
  MoeWeights& w = ep_weights_[l];
  dist::Communicator& comm = *dist_->moe;
  const int P = comm.size(), G = dist_->pc.moe_tp(), me = comm.rank(), E = c_.n_experts;
  // Every expert's matrices have one shape and type: any expert this rank holds describes an arriving one.
  int held = -1;
  for (int e = 0; e < E && held < 0; ++e)
    if (w.gate[e].data) held = e;
  if (held < 0) return Internal("EPLB: rank " + std::to_string(me) + " holds no expert of layer " + std::to_string(l));
  const TensorView shape[3] = {w.gate[held], w.up[held], w.down[held]};
  const size_t part[3] = {shape[0].nbytes, shape[1].nbytes, shape[2].nbytes};
  const size_t B = part[0] + part[1] + part[2];

  struct Move {
    int e, src, dst;
  };
  std::vector<Move> moves;
  std::vector<uint8_t> seen(E);
  for (int dst = 0; dst < P; ++dst) {
    const int g = dst / G;
    std::fill(seen.begin(), seen.end(), 0);
    for (int s = g * next.per_rank; s < (g + 1) * next.per_rank; ++s) seen[next.phy2log[s]] = 1;
    for (int e = 0; e < E; ++e)
      if (seen[e] && !old.Holds(e, g)) moves.push_back({e, old.owner(old.log2phy[e][0]) * G + dst % G, dst});
  }
  std::vector<size_t> send_bytes(P, 0), recv_bytes(P, 0);
  for (const Move& m : moves) {
    if (m.src == me) send_bytes[m.dst] += B;
    if (m.dst == me) recv_bytes[m.src] += B;
  }
  std::vector<uint8_t> send, recv;
  send.reserve(std::accumulate(send_bytes.begin(), send_bytes.end(), size_t{0}));
  for (int dst = 0; dst < P; ++dst)
    for (const Move& m : moves)
      if (m.src == me && m.dst == dst)
        for (int k = 0; k < 3; ++k) {
          const TensorView& t = k == 0 ? w.gate[m.e] : k == 1 ? w.up[m.e] : w.down[m.e];
          if (!t.data || t.nbytes != part[k])
            return Internal("EPLB: rank " + std::to_string(me) + " was asked for expert " + std::to_string(m.e) +
                            " of layer " + std::to_string(l) + ", which it does not hold");
          const auto* p = static_cast<const uint8_t*>(t.data);
          send.insert(send.end(), p, p + t.nbytes);
        }
  recv.resize(std::accumulate(recv_bytes.begin(), recv_bytes.end(), size_t{0}));
  DI_RETURN_IF_ERROR(comm.AllToAllV(send.data(), send_bytes.data(), recv.data(), recv_bytes.data()));
  rep->experts_sent += static_cast<int>(moves.size());
  rep->bytes_sent += static_cast<int64_t>(moves.size() * B);

  // Arrivals, in the order their senders packed them (by source rank, then plan order).
  const int g = me / G;
  size_t off = 0;
  for (int src = 0; src < P; ++src)
    for (const Move& m : moves) {
      if (m.dst != me || m.src != src) continue;
      // A buffer an earlier departure freed, if one is large enough (layers of a quantized mix differ in size).
      std::unique_ptr<HostBuffer> buf;
      for (auto& f : ep_free_)
        if (f && f->size() >= B) {
          buf = std::move(f);
          break;
        }
      ep_free_.erase(std::remove(ep_free_.begin(), ep_free_.end(), nullptr), ep_free_.end());
      if (!buf) {
        DI_ASSIGN_OR_RETURN(buf, HostBuffer::Allocate(B, B >= (2u << 20)));
      }
      std::memcpy(buf->data(), recv.data() + off, B);
      off += B;
      TensorView* dst[3] = {&w.gate[m.e], &w.up[m.e], &w.down[m.e]};
      size_t at = 0;
      for (int k = 0; k < 3; ++k) {
        *dst[k] = shape[k];
        dst[k]->data = buf->data() + at;
        at += part[k];
      }
      ep_moved_[l][m.e] = std::move(buf);
    }
  // Departures: experts the group no longer holds (after the exchange, which may have sent them).
  for (int e = 0; e < E; ++e) {
    if (!w.gate[e].data || next.Holds(e, g)) continue;
    w.gate[e] = w.up[e] = w.down[e] = TensorView{};
    if (ep_moved_[l][e]) ep_free_.push_back(std::move(ep_moved_[l][e]));
  }
  return Status::Ok();
}

}  // namespace deepinfer
