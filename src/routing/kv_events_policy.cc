#include "routing/kv_events_policy.h"

#include <algorithm>
#include <map>

#include "kv/prefix_hash.h"

namespace deepinfer::router {

KvEventsPolicy::KvEventsPolicy(int num_replicas, CacheAwareOptions opt) : opt_(opt), text_(num_replicas, opt) {
  for (int i = 0; i < num_replicas; ++i) indexes_.push_back(std::make_unique<KvBlockIndex>(opt_.predict_ttl_s));
}

Decision KvEventsPolicy::Pick(std::string_view text, const std::vector<ReplicaView>& replicas) {
  return text_.Pick(text, replicas);
}

Decision KvEventsPolicy::PickTokens(std::string_view text, const std::vector<int32_t>& ids,
                                    const std::vector<ReplicaView>& replicas) {
  const auto now = KvBlockIndex::Clock::now();
  struct Score {
    int64_t load = 0;
    int matched = 0;
    double kv_use = 0;
    size_t footprint = 0;
    bool synced = false;  // its events are applied (a snapshot came, same prompt digest)
    const std::vector<uint64_t>* hashes = nullptr;
  };
  // One hash chain per block size the replicas reported (normally one).
  std::map<int, std::vector<uint64_t>> chains;
  std::vector<Score> score(replicas.size());
  bool any_synced = false;
  int64_t min_load = -1, max_load = -1;
  for (size_t i = 0; i < replicas.size(); ++i) {
    if (!replicas[i].available) continue;
    const KvBlockIndex& idx = *indexes_[i];
    const int bs = idx.block_size();
    const ReplicaLoad rl = idx.load();
    Score& s = score[i];
    s.load = std::max<int64_t>(replicas[i].in_flight, rl.known ? rl.waiting + rl.running : 0);
    s.footprint = idx.footprint();
    s.kv_use = rl.kv_total_blocks > 0 ? static_cast<double>(rl.kv_used_blocks) / static_cast<double>(rl.kv_total_blocks) : 0;
    s.synced = bs > 0 && !idx.mismatch();
    if (bs > 0) {
      any_synced = true;
      auto it = chains.find(bs);
      if (it == chains.end())
        it = chains.emplace(bs, PrefixChainHashes(ids.data(), static_cast<int>(ids.size()), bs)).first;
      s.hashes = &it->second;
      s.matched = idx.LeadingBlocks(it->second, now);
    }
    min_load = min_load < 0 ? s.load : std::min(min_load, s.load);
    max_load = std::max(max_load, s.load);
  }
  // No replica has sent its snapshot yet: the text tree is all there is to go by.
  if (!any_synced) return text_.Pick(text, replicas);
  Decision d;
  d.text_chars = text.size();
  if (min_load < 0) return d;  // none available
  auto least_loaded = [&] {
    int best = -1;
    for (size_t i = 0; i < replicas.size(); ++i) {
      if (!replicas[i].available) continue;
      const Score& a = score[i];
      const Score& b = best < 0 ? a : score[best];
      if (best < 0 || a.load < b.load || (a.load == b.load && a.kv_use < b.kv_use) ||
          (a.load == b.load && a.kv_use == b.kv_use && a.footprint < b.footprint))
        best = static_cast<int>(i);
    }
    return best;
  };
  const bool imbalanced = max_load - min_load > opt_.balance_abs_threshold &&
                          static_cast<double>(max_load) > opt_.balance_rel_threshold * static_cast<double>(min_load);
  if (imbalanced) {
    d.replica = least_loaded();
    d.outcome = Outcome::kImbalance;
  } else {
    int best = -1;
    for (size_t i = 0; i < replicas.size(); ++i) {
      if (!replicas[i].available) continue;
      if (best < 0 || score[i].matched > score[best].matched ||
          (score[i].matched == score[best].matched && score[i].load < score[best].load))
        best = static_cast<int>(i);
    }
    const int blocks = score[best].hashes ? static_cast<int>(score[best].hashes->size()) : 0;
    const double rate = blocks > 0 ? static_cast<double>(score[best].matched) / blocks : 0.0;
    if (rate > opt_.cache_threshold) {
      d.replica = best;
      d.outcome = Outcome::kCacheHit;
    } else {
      // SGLang's miss: the smallest cache (blocks held or predicted), the most room for a new prefix; the
      // predictions make new prefixes spread even before the replicas' events report them. Only replicas whose
      // events are applied have a known cache: one not synced (a broken stream, no endpoint, mid-reconnect) or
      // of another prompt digest would always look empty and take every miss, so it competes by load alone.
      int room = -1, unsynced = -1;
      for (size_t i = 0; i < replicas.size(); ++i) {
        if (!replicas[i].available) continue;
        const Score& a = score[i];
        if (!a.synced) {
          if (unsynced < 0 || a.load < score[unsynced].load) unsynced = static_cast<int>(i);
          continue;
        }
        const Score& b = room < 0 ? a : score[room];
        if (room < 0 || a.footprint < b.footprint || (a.footprint == b.footprint && a.load < b.load) ||
            (a.footprint == b.footprint && a.load == b.load && a.kv_use < b.kv_use))
          room = static_cast<int>(i);
      }
      if (room < 0 || (unsynced >= 0 && score[unsynced].load < score[room].load)) room = unsynced;
      d.replica = room;
      d.outcome = Outcome::kCacheMiss;
    }
  }
  const Score& chosen = score[d.replica];
  d.matched_blocks = chosen.matched;
  d.prompt_blocks = chosen.hashes ? static_cast<int>(chosen.hashes->size()) : 0;
  if (chosen.hashes) indexes_[d.replica]->Predict(*chosen.hashes, now);
  // The text tree learns every request, so it is warm for the requests it has to route alone.
  text_.Learn(d.replica, text);
  return d;
}

void KvEventsPolicy::OnReplicaDown(int replica) {
  if (replica < 0 || replica >= static_cast<int>(indexes_.size())) return;
  indexes_[replica]->Clear();
  text_.OnReplicaDown(replica);
}

size_t KvEventsPolicy::EstimateSize(int replica) const { return text_.EstimateSize(replica); }

KvBlockIndex* KvEventsPolicy::kv_index(int replica) {
  return replica >= 0 && replica < static_cast<int>(indexes_.size()) ? indexes_[replica].get() : nullptr;
}

}  // namespace deepinfer::router
