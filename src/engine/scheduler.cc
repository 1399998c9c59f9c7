#include "engine/scheduler.h"

#include <algorithm>

#include "kv/kv_groups.h"
#include "kv/prefix_hash.h"

namespace deepinfer {

Scheduler::Scheduler(const SchedulerConfig& cfg, BlockPool* pool, TokenTable* table)
    : cfg_(cfg), pool_(pool), table_(table), slot_gen_(table->num_slots(), 0) {
  for (int s = table->num_slots() - 1; s >= 0; --s) free_slots_.push_back(s);
}

void Scheduler::AddWaiting(Sequence* s) {
  DI_SEQ_CHECK(s->status() == SeqStatus::kWaiting);
  // By priority (lower first), then arrival: a preempted sequence goes back to its place among its peers.
  auto it = std::find_if(waiting_.begin(), waiting_.end(), [&](Sequence* w) {
    return w->priority() > s->priority() || (w->priority() == s->priority() && w->arrival() > s->arrival());
  });
  waiting_.insert(it, s);
}

void Scheduler::RemoveWaiting(Sequence* s) {
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), s), waiting_.end());
  waits_on_.erase(s);  // its load, if any, stays in loads_ and is finished as any other
  load_tried_.erase(s);
}

void Scheduler::FinishLoads() {
  for (size_t i = 0; i < loads_.size();) {
    KvTiers::Load* l = loads_[i].get();
    if (!l->done.load(std::memory_order_acquire)) {
      ++i;
      continue;
    }
    pool_->Release(tiers_->FinishLoad(pool_, l));
    loads_.erase(loads_.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

void Scheduler::DrainLoads() {
  while (!loads_.empty()) {
    const uint64_t seen = tiers_->loads_completed();
    FinishLoads();
    if (!loads_.empty()) tiers_->WaitForLoad(seen);
  }
}

int Scheduler::BlocksMissing(size_t have, int positions) const {
  const int bs = pool_->block_size();
  return (positions + bs - 1) / bs - static_cast<int>(have);
}

bool Scheduler::AllocateBlocks(std::vector<std::vector<int32_t>>* tables, int positions) {
  int64_t total = 0;
  for (const auto& t : *tables) total += std::max(0, BlocksMissing(t.size(), positions));
  if (total == 0) return true;
  if (total > pool_->num_available()) return false;
  for (int g = 0; g < num_groups(); ++g) {
    const int need = BlocksMissing((*tables)[g].size(), positions);
    if (need <= 0) continue;
    auto got = pool_->Allocate(need, g);  // cannot fail: checked above
    (*tables)[g].insert((*tables)[g].end(), got->begin(), got->end());
  }
  return true;
}

bool Scheduler::EnsureBlocks(Sequence* s, int positions) {
  int64_t total = 0;
  for (int g = 0; g < num_groups(); ++g) total += std::max(0, BlocksMissing(s->table(g).size(), positions));
  if (total == 0) return true;
  if (total > pool_->num_available()) return false;
  for (int g = 0; g < num_groups(); ++g) {
    const int need = BlocksMissing(s->table(g).size(), positions);
    if (need > 0) s->AddBlocks(g, *pool_->Allocate(need, g));  // cannot fail: checked above
  }
  return true;
}

Sequence* Scheduler::PickVictim(const Sequence* requester, uint64_t step) const {
  // Youngest first, and only sequences younger than the requester. A sequence with a step in flight cannot be
  // preempted (its device state is ahead of the host's history, overlap.md 6.7), nor one already given a row in
  // the step being built.
  for (auto it = running_.rbegin(); it != running_.rend() && *it != requester; ++it) {
    Sequence* s = *it;
    if (s->status() == SeqStatus::kRunning && s->inflight() == 0 && s->last_step() != step) return s;
  }
  return nullptr;
}

uint64_t Scheduler::PreemptForPriority(uint64_t step) {
  if (!free_slots_.empty() || !pending_slots_.empty()) return 0;  // a slot is free or on its way back
  // A sequence waiting on a tier load cannot use a slot yet: it does not preempt anyone for one.
  auto head = std::find_if(waiting_.begin(), waiting_.end(), [&](const Sequence* s) { return !s->held() && !Loading(s); });
  if (head == waiting_.end()) return 0;
  Sequence* victim = LeastUrgentRunning((*head)->priority(), /*idle_only=*/false, step);
  if (!victim) return 0;
  if (victim->inflight() > 0 || victim->last_step() == step) return victim->id();
  Preempt(victim);
  ++priority_preemptions_;
  return 0;
}

Sequence* Scheduler::LeastUrgentRunning(int than, bool idle_only, uint64_t step) const {
  Sequence* best = nullptr;
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {  // youngest first: it wins among equals
    Sequence* s = *it;
    if (s->status() != SeqStatus::kRunning || s->priority() <= than) continue;
    if (idle_only && (s->inflight() != 0 || s->last_step() == step)) continue;
    if (!best || s->priority() > best->priority()) best = s;
  }
  return best;
}

bool Scheduler::GrowOrPreempt(Sequence* s, int positions, uint64_t step) {
  while (!EnsureBlocks(s, positions)) {
    Sequence* victim = PickVictim(s, step);
    if (!victim) return false;
    Preempt(victim);
  }
  return true;
}

void Scheduler::Preempt(Sequence* s) {
  Publish(s);  // what it computed stays findable: resuming it is then mostly a prefix-cache hit
  SeqResources r = s->Preempt();
  pool_->Release(r.blocks);
  pending_slots_.push_back({r.last_use, r.slot});
  ++preemptions_;
  running_.erase(std::remove(running_.begin(), running_.end(), s), running_.end());
  AddWaiting(s);
}

void Scheduler::EmitRow(Sequence* s, int q_len, SchedulerOutputs* out, bool dynamic) {
  SequenceMetadata r;
  r.seq_id = s->id();
  r.slot = s->slot();
  r.slot_gen = s->slot_gen();
  r.q_begin = s->sched();
  r.q_len = q_len;
  r.samples = s->SamplesAt(s->sched() + q_len);
  r.hands_over = s->HandsOverAt(s->sched() + q_len);
  r.prompt_len = s->prompt_len();
  const int bs = pool_->block_size();
  r.num_blocks = static_cast<uint32_t>((s->sched() + q_len + bs - 1) / bs);
  r.block_table_off = static_cast<uint32_t>(out->block_tables.size());
  if (s->replay_end() > s->sched()) r.kv_cached_end = s->replay_end();
  r.window_floor = s->window_floor();
  for (int g = 0; g < num_groups(); ++g) {
    const std::vector<int32_t>& t = s->table(g);
    const int first = std::min(s->first(g), static_cast<int>(r.num_blocks));
    out->block_tables.insert(out->block_tables.end(), first, -1);  // released: never read
    out->block_tables.insert(out->block_tables.end(), t.begin() + first, t.begin() + r.num_blocks);
  }
  r.sampling = &s->req()->params;  // its sampling part
  r.sample_index = static_cast<uint32_t>(s->index());
  r.logprobs = s->req()->params.logprobs;
  if (!s->req()->matchers.empty()) r.matcher = s->req()->matchers[s->index()].get();
  if (!s->req()->gates.empty()) r.gate = s->req()->gates[s->index()].get();
  r.spec_method = static_cast<uint8_t>(s->req()->spec_method);  // prefill rows too: proposers keep their caches
  r.spec_k = s->req()->spec_k;
  // Length limits are known now, so the row that produces the last allowed token is the last one scheduled.
  s->RowScheduled(q_len, out->step, cfg_.max_model_len, dynamic);
  out->rows.push_back(r);
  out->num_tokens += q_len;
}

Scheduler::TierPlan Scheduler::PlanTierLoad(const int32_t* tokens, int known,
                                            const std::vector<std::vector<int32_t>>& tables,
                                            KvTiers::LoadPlan* plan) const {
  const int bs = pool_->block_size(), G = num_groups();
  const std::vector<int32_t>& match = tables[0];
  const int at = static_cast<int>(match.size());
  // Only as many blocks as a hit can use (the last token always runs). --speculative mtp's admission drops the last
  // block of whatever is matched (MatchForAdmission: the module needs the target's hidden state of the row before
  // the first it runs), so the windows are planned one block short of the full groups' blocks (c <= reach - drop,
  // upto <= c + replay + drop): the windows the load brings are the ones the admitted hit resumes from, and a
  // bounded replay still reaches swa_replay_max tokens.
  const int most = (known - 1) / bs, drop = cfg_.prefix_drop_last_block ? 1 : 0;
  if (most - drop <= 0) return TierPlan::kNothing;
  // Fresh blocks the load may take: short of one per running sequence and group, so that a load never takes the
  // blocks the decode rows need next (it would preempt them, and hold their blocks until it is done).
  const int room = pool_->num_available() - static_cast<int>(running_.size()) * G;
  if (room <= 0) return TierPlan::kNoRoom;
  plan->chains = pool_->ChainHashes(tokens, most * bs);
  // The full groups' blocks (group 0's, and in a hybrid cache any other full-attention group's, which match by
  // chain as group 0 does): the pool holds group g's first matched[g]; past that, block j is of use only if every
  // full group has it, from the pool or a tier. `reach`: how far they go, within what the pool can give.
  const bool by_window = windowed() && window(0) == 0;
  std::vector<int> matched(G, -1);  // -1: a windowed group
  int pool_full = at;
  for (int g = 0; g < G; ++g)
    if (!by_window || window(g) == 0) pool_full = std::min(pool_full, matched[g] = static_cast<int>(tables[g].size()));
  auto fresh_at = [&](int j) {  // the full groups' blocks at j that a load would read
    int n = 0;
    for (int g = 0; g < G; ++g) n += matched[g] >= 0 && j >= matched[g];
    return n;
  };
  auto full_held = [&](int j) {
    for (int g = 0; g < G; ++g)
      if (matched[g] >= 0 && j >= matched[g] && !tiers_->Held(tiers_->Key(g, plan->chains[j]))) return false;
    return true;
  };
  const int pool_at = std::min(pool_full, most);
  int reach = pool_at, fresh = 0;
  for (; reach < most && full_held(reach) && fresh + fresh_at(reach) <= room; ++reach) fresh += fresh_at(reach);
  // The plan: group 0's fresh blocks [at, upto) (none when upto <= at: group 0 keeps its own match), the other
  // full groups' [matched[g], upto) (published by chain), and the windows at c.
  plan->start = at;
  auto set_reuse = [&](int upto) {
    plan->end = std::max(at, upto);
    for (int g = 1; g < G; ++g)
      if (matched[g] >= 0)
        for (int j = matched[g]; j < upto; ++j) plan->windows.push_back(KvTiers::LoadPlan::Window{g, j, true});
  };
  if (by_window && !cfg_.approx_replay_from) {
    // The hit rule of MatchForAdmission, over the pool and the tiers: computing resumes at the largest block c
    // where every windowed group holds [c*bs - W + 1, c*bs), and the full groups' blocks are reused up to R beyond.
    // held[g][j]: 0 = nowhere, 1 = the pool (tied to the match's block j), 2 = a tier.
    std::vector<std::vector<int8_t>> held(G);
    auto holds = [&](int g, int j, bool tiers_too) {
      std::vector<int8_t>& h = held[g];
      if (h.empty()) h.assign(std::max(at, reach), -1);
      if (h[j] < 0) {
        h[j] = j < at && pool_->FindWindowBlock(g, plan->chains[j], tokens + static_cast<size_t>(j) * bs, match[j]) >= 0
                   ? 1
                   : tiers_->Held(tiers_->Key(g, plan->chains[j])) ? 2 : 0;
      }
      return h[j] == 1 || (tiers_too && h[j] == 2);
    };
    auto window_at = [&](int c, bool tiers_too) {
      for (int g = 0; g < G; ++g)
        if (window(g) > 0)
          for (int j = WindowKeepFrom(window(g), c * bs, bs); j < c; ++j)
            if (!holds(g, j, tiers_too)) return false;
      return true;
    };
    const int replay = cfg_.swa_replay_max / bs;
    int pool_c = std::max(0, pool_at - drop);
    while (pool_c > 0 && !window_at(pool_c, false)) --pool_c;
    const int pool_hit = std::min(pool_at, pool_c + replay);
    int c = std::max(0, reach - drop);
    while (c > pool_c && !window_at(c, true)) --c;
    int upto = std::min(reach, c + replay + drop);
    set_reuse(upto);
    for (int g = 0; g < G; ++g)
      if (window(g) > 0)
        for (int j = WindowKeepFrom(window(g), c * bs, bs); j < c; ++j) {
          if (!holds(g, j, false)) {
            plan->windows.push_back(KvTiers::LoadPlan::Window{g, j, false});
          } else {
            // A window of the pool the hit resumes from: held by the load, so that its own allocation (which may
            // evict cached blocks) cannot take it.
            plan->pinned.push_back(
                pool_->FindWindowBlock(g, plan->chains[j], tokens + static_cast<size_t>(j) * bs, match[j]));
          }
        }
    if (plan->end - at + static_cast<int>(plan->windows.size() + plan->pinned.size()) > room) {
      // No room for the windows too: the full groups' blocks alone, which a bounded replay resumes from the pool's
      // windows.
      plan->windows.clear();
      plan->pinned.clear();
      c = pool_c;
      upto = std::min(reach, c + replay + drop);
      set_reuse(upto);
    }
    if (upto <= pool_hit && c <= pool_c) return TierPlan::kNothing;  // the pool's own hit is as good
  } else {
    if (reach <= pool_full) return TierPlan::kNothing;
    set_reuse(reach);
  }
  if (plan->end == at && plan->windows.empty()) return TierPlan::kNothing;
  int last_block = plan->end;
  for (const auto& w : plan->windows) last_block = std::max(last_block, w.index + 1);
  plan->chains.resize(last_block);
  return TierPlan::kLoad;
}

bool Scheduler::StartTierLoad(const Sequence* s, std::vector<std::vector<int32_t>>* tables) {
  tiers_->TouchMatched(*pool_, *tables);
  const int at = static_cast<int>((*tables)[0].size());
  // A sequence whose own load (or plan) reached `tried` tries again only if the pool has lost some of those
  // blocks since (evicted before it was admitted); past them the tiers had nothing valid.
  const auto tried = load_tried_.find(s);
  if (tried != load_tried_.end() && at >= tried->second) return false;
  // A load in flight from this point of this prefix (another request's; named by the chain hash through the
  // next block): wait on it rather than read the same blocks into other fresh blocks.
  const int known = static_cast<int>(s->tokens().size()), bs = pool_->block_size();
  const int named = std::min(at + 1, known / bs);
  const uint64_t key = (named > 0 ? PrefixChainHashes(s->tokens().data(), named * bs, bs).back() : kPrefixHashSeed) ^
                       (static_cast<uint64_t>(at) * 0x9e3779b97f4a7c15ull);
  std::shared_ptr<KvTiers::Load> load;
  for (const auto& l : loads_)
    if (l->start == at && l->key == key) load = l;
  const bool own = !load;
  if (own) {
    KvTiers::LoadPlan plan;
    const TierPlan p = PlanTierLoad(s->tokens().data(), known, *tables, &plan);
    // Nothing in the tiers to gain: not asked again until the pool's match drops. No room now: asked again at the
    // next attempt (the pool frees blocks as sequences finish).
    if (p == TierPlan::kNothing) load_tried_[s] = at;
    if (p != TierPlan::kLoad) return false;
    plan.key = key;
    load = tiers_->StartLoad(pool_, s->tokens().data(), std::move(plan), tables);  // takes the tables' references
    if (!load) return false;  // the pool could not give the blocks: no room now
    loads_.push_back(load);
  } else {
    for (auto& t : *tables) {  // joined another's load: this match is taken again at admission
      pool_->Release(t);
      t.clear();
    }
  }
  waits_on_[s] = LoadWait{std::move(load), own};
  return true;
}

int Scheduler::MatchForAdmission(const Sequence* s, std::vector<std::vector<int32_t>>* tables, std::vector<int>* first,
                                 int* reuse, bool* loading) {
  const int known = s->admit_end();
  const int G = num_groups(), bs = pool_->block_size();
  const int32_t* tokens = s->tokens().data();
  // Full groups (and, without an anchor, every group) match by chain: the hit is the shortest match.
  const bool by_window = windowed() && window(0) == 0;
  int hit = INT32_MAX;
  for (int g = 0; g < G; ++g)
    if (!by_window || window(g) == 0) (*tables)[g] = pool_->MatchPrefix(tokens, known, g);
  // Past the pool's match, the tiers (RAM, then disk) may hold the prefix's next blocks (and a hybrid cache's
  // windows): they are loaded into fresh pool blocks off this thread, and the sequence waits for them (a later
  // Schedule admits it with them as cached tokens).
  if (tiers_ && StartTierLoad(s, tables)) {  // the tables' references went to the load (or were released)
    *loading = true;
    return 0;
  }
  for (int g = 0; g < G; ++g)
    if (!by_window || window(g) == 0) hit = std::min(hit, static_cast<int>((*tables)[g].size()));
  // At least one token must run to produce logits: drop a hit that covers everything.
  while (hit > 0 && hit * bs >= known) --hit;
  if (cfg_.prefix_drop_last_block && hit > 0) --hit;
  int compute = hit;  // in blocks
  if (by_window) {
    // A window-W group resumes at block h if it holds [h*bs - W + 1, h*bs): the largest such h <= hit is where
    // computing starts; the full groups' blocks are reused up to swa_replay_max tokens beyond it, and those
    // positions are recomputed for the windowed groups only (exactly: the forward is chunk-invariant).
    const std::vector<uint64_t> hashes = pool_->ChainHashes(tokens, hit * bs);
    const std::vector<int32_t>& anchor = (*tables)[0];
    auto window_at = [&](int h) {
      for (int g = 0; g < G; ++g) {
        if (window(g) == 0) continue;
        for (int j = WindowKeepFrom(window(g), h * bs, bs); j < h; ++j)
          if (pool_->FindWindowBlock(g, hashes[j], tokens + static_cast<size_t>(j) * bs, anchor[j]) < 0) return false;
      }
      return true;
    };
    if (cfg_.approx_replay_from) {
      // Approximate (DeepSeek-V4.1's encoder-side replay): no window is cached; every windowed group restarts
      // empty at the replay's start, and its rows read nothing below it.
      compute = hit > 0 ? cfg_.approx_replay_from(hit * bs) / bs : 0;
      for (int g = 0; g < G; ++g)
        if (window(g) > 0) {
          (*first)[g] = compute;
          (*tables)[g].assign(compute, -1);
        }
    } else {
      compute = hit;
      while (compute > 0 && !window_at(compute)) --compute;
      hit = std::max(compute, std::min(hit, compute + cfg_.swa_replay_max / bs));
    }
    std::vector<uint64_t> touched;  // the windows the hit resumes from, touched in the tiers as group 0's blocks are
    for (int g = 0; g < G; ++g) {
      if (window(g) > 0 && !cfg_.approx_replay_from) {
        const int lo = WindowKeepFrom(window(g), compute * bs, bs);
        (*first)[g] = lo;
        (*tables)[g].assign(lo, -1);  // never held
        for (int j = lo; j < compute; ++j) {
          const int32_t b = pool_->FindWindowBlock(g, hashes[j], tokens + static_cast<size_t>(j) * bs, anchor[j]);
          pool_->Acquire(b);
          (*tables)[g].push_back(b);
          if (tiers_) touched.push_back(tiers_->Key(g, hashes[j]));
        }
      }
    }
    if (!touched.empty()) tiers_->Touch(touched);
  }
  for (int g = 0; g < G; ++g) {
    auto& t = (*tables)[g];
    if (by_window && window(g) > 0) continue;
    pool_->Release(std::vector<int32_t>(t.begin() + std::min<size_t>(t.size(), hit), t.end()));
    t.resize(std::min<size_t>(t.size(), hit));
    // A window-W group needs the hit's blocks only from the first row's window on.
    if (window(g) > 0) {
      (*first)[g] = std::min(hit, WindowKeepFrom(window(g), hit * bs, bs));
      pool_->Release(std::vector<int32_t>(t.begin(), t.begin() + (*first)[g]));
    }
  }
  *reuse = hit * bs;
  return compute * bs;
}

bool Scheduler::Admit(Sequence* s, int* budget, SchedulerOutputs* out, bool* loading) {
  if (auto w = waits_on_.find(s); w != waits_on_.end()) {
    if (!w->second.load->finished) {
      *loading = true;
      return false;
    }
    // Its blocks are in the pool's cache now: the match below finds them (and, past a load it joined, may start
    // its own).
    if (w->second.own) load_tried_[s] = w->second.load->start + w->second.load->loaded;
    waits_on_.erase(w);
  }
  if (free_slots_.empty()) return false;
  const int known = s->admit_end();
  const int G = num_groups(), bs = pool_->block_size();
  std::vector<std::vector<int32_t>> tables(G);
  std::vector<int> first(G, 0);
  int reuse = 0, start = 0;
  if (cfg_.prefix_caching) {
    start = MatchForAdmission(s, &tables, &first, &reuse, loading);
    if (*loading) return false;
  }
  // What each group has offered the prefix cache: exactly what the hit matched, so every block the sequence
  // fills from here on is offered as soon as its tokens and K/V are written (Publish), whether or not generation
  // ever outgrows the blocks allocated now (a prompt prefilled in one chunk with a short answer is cached too).
  // A windowed block is offered only once the anchor's block of the same positions is, which is why the anchor's
  // must be offered as soon as it is full; the windows a bounded replay rebuilds ([start, reuse)) are offered again.
  // Without windows start == reuse.
  std::vector<int> published(G);
  for (int g = 0; g < G; ++g) published[g] = (window(g) > 0 ? start : reuse) / bs;
  auto release_held = [&] {
    for (int g = 0; g < G; ++g) pool_->Release(std::vector<int32_t>(tables[g].begin() + first[g], tables[g].end()));
  };
  const int chunk = std::min(*budget, known - start);
  // The full groups hold the reused blocks already; the windowed groups get blocks as the replay's chunks reach
  // them (a table may be shorter than the anchor's, never shorter than what a row covers).
  if (chunk <= 0 || !AllocateBlocks(&tables, start + chunk)) {
    release_held();
    return false;
  }
  const int slot = free_slots_.back();
  free_slots_.pop_back();
  std::copy(s->tokens().begin(), s->tokens().end(), table_->row(slot));
  cached_tokens_ += start;
  replayed_tokens_ += reuse - start;
  load_tried_.erase(s);
  s->Admit(slot, ++slot_gen_[slot], std::move(tables), std::move(first), start, reuse, std::move(published));
  s->set_window_floor(cfg_.approx_replay_from ? start : 0);
  running_.push_back(s);
  EmitRow(s, chunk, out);
  *budget -= chunk;
  return true;
}

void Scheduler::Schedule(SchedulerOutputs* out) {
  // Loads done since the last step: their blocks are published first (the most recent of the cache), so that a
  // decode row short of blocks can evict them rather than wait, and the admissions below find them.
  if (!loads_.empty()) FinishLoads();
  int budget = cfg_.max_batched_tokens;
  const int max_rows = cfg_.max_num_seqs;
  auto full = [&] { return budget < 1 || static_cast<int>(out->rows.size()) >= max_rows; };
  // 0. Priority: when the most urgent waiting request finds every sequence slot taken, the least urgent running
  //    sequence of a strictly higher priority value gives up its place. An idle one is preempted now; one with a
  //    step in flight gets no row in this step, so it is idle (and preempted) at the next.
  const uint64_t held_back = PreemptForPriority(out->step);
  // 1. Decode rows, oldest first. When the pool is short, younger idle sequences are preempted; if none is
  //    idle, the requester preempts itself when it is idle, else it (and everyone younger) waits one step:
  //    the step in flight is processed meanwhile, which makes them idle. Never a deadlock.
  std::vector<Sequence*> order = running_;
  bool blocked = false;
  for (Sequence* s : order) {
    if (s->status() != SeqStatus::kRunning || s->length_capped() || s->sched() < s->prefill_end()) continue;
    if (s->id() == held_back) continue;
    if (full()) break;
    // A speculating sequence reserves room for its drafts: 1 + k positions past the upper bound of where its
    // in-flight steps may have taken it (the executor settles the real start and proposes at most k).
    const Request* req = s->req();
    const bool dynamic = req->spec_method != SpecMethod::kNone && req->spec_k > 0;
    // Where the executor must stop: max_tokens may be anything up to INT32_MAX, so the sum is taken in 64 bits.
    const int end_limit = static_cast<int>(
        std::min<int64_t>(static_cast<int64_t>(s->prompt_len()) + req->params.max_tokens, cfg_.max_model_len));
    int k = 0;
    if (dynamic && cfg_.spec_full_k) {
      // The row's k from exact bounds: the executor starts it at the device's committed length, which with a step
      // in flight lies between the host's last known token and sched() (spec_full_k). Wait for that step when
      // the bounds disagree; a row too big for what is left of the budget waits for the next step.
      const int known = static_cast<int>(s->tokens().size());
      const int full = std::max(0, std::min({req->spec_k, cfg_.max_batched_tokens - 1, end_limit - 1 - known}));
      k = std::max(0, std::min(full, end_limit - 2 - s->sched()));
      if (k < full || 1 + k > budget) continue;
    } else if (dynamic) {
      k = std::min({req->spec_k, budget - 1, end_limit - 2 - s->sched(),
                    req->params.max_tokens - s->scheduled_outputs() - 1});
      k = std::max(k, 0);
      // Drafts are optional: when the pool cannot hold them, the row runs without any rather than preempting.
      if (k > 0 && !EnsureBlocks(s, s->sched() + 1 + k)) k = 0;
    }
    if (!GrowOrPreempt(s, s->sched() + 1 + k, out->step)) {
      if (s->inflight() == 0) {
        Preempt(s);
        continue;
      }
      blocked = true;
      break;
    }
    EmitRow(s, 1 + k, out, dynamic);
    if (dynamic) {
      SequenceMetadata& r = out->rows.back();
      r.dynamic = true;
      r.spec_k = k;
      r.end_limit = end_limit;
    }
    budget -= 1 + k;
  }
  if (blocked) return;
  if (cfg_.prefill_limit) budget = std::min(budget, cfg_.prefill_limit(*out));  // decodes are in; prompts get what is left
  // 2 and 3, one priority level at a time (lower values first; with one level, as everyone has by default, this
  // is exactly: every running prefill, then admissions).
  std::vector<int> levels;
  for (const Sequence* s : running_)
    if (s->status() == SeqStatus::kRunning && s->sched() < s->prefill_end()) levels.push_back(s->priority());
  for (const Sequence* s : waiting_) levels.push_back(s->priority());
  std::sort(levels.begin(), levels.end());
  levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
  bool admitting = true;
  for (const int level : levels) {
    // Fair admission: while requests of this level wait (and the last admission did not stop for lack of room),
    // the running prefills leave up to half the budget to them, as much as their prompts need, so one long prompt
    // cannot hold every newcomer's first token until it is done. (Chunking changes no output.)
    int reserve = 0;
    if (!admission_blocked_ && static_cast<int>(running_.size()) < max_rows) {
      int64_t waiting_tokens = 0;
      for (const Sequence* s : waiting_)
        if (s->priority() == level && !s->held() && !Loading(s))
          waiting_tokens += static_cast<int64_t>(s->tokens().size());
      reserve = static_cast<int>(std::min<int64_t>(budget / 2, waiting_tokens));
    }
    // 2. Continue chunked prefills, oldest first (they may preempt younger idle sequences, so two half-prefilled
    //    prompts can never hold each other's blocks forever).
    order = running_;
    for (Sequence* s : order) {
      if (s->status() != SeqStatus::kRunning || s->sched() >= s->prefill_end() || s->priority() != level) continue;
      if (s->id() == held_back) continue;
      if (full() || budget <= reserve) break;
      const int chunk = std::min(budget - reserve, s->prefill_end() - s->sched());
      if (!GrowOrPreempt(s, s->sched() + chunk, out->step)) continue;
      EmitRow(s, chunk, out);
      budget -= chunk;
    }
    // 3. Admit this level's waiting sequences in arrival order (held samples wait for their sibling's prompt).
    for (auto it = waiting_.begin(); admitting && it != waiting_.end();) {
      if (full()) break;
      Sequence* s = *it;
      if (s->priority() != level || s->held()) {
        ++it;
        continue;
      }
      bool loading = false;
      if (Admit(s, &budget, out, &loading)) {
        it = waiting_.erase(it);
        continue;
      }
      if (loading) {  // waits on the tiers, holding no slot: the requests behind it go on
        ++it;
        continue;
      }
      // Strict order: nobody overtakes a request that does not fit. It may take the place of a less urgent
      // running sequence (its slot and blocks return after that sequence's last step, so it is admitted a step
      // later, in front of everyone less urgent).
      if (Sequence* victim = LeastUrgentRunning(s->priority(), /*idle_only=*/true, out->step)) {
        Preempt(victim);
        ++priority_preemptions_;
      }
      admitting = false;
    }
  }
  admission_blocked_ = !admitting;
}

void Scheduler::Publish(Sequence* s) {
  if (!cfg_.prefix_caching) return;
  const int bs = pool_->block_size();
  const int valid = std::min(s->kv_written(), static_cast<int>(s->tokens().size()));
  std::vector<uint64_t> chains;  // the tiers' keys, hashed once for every group's offers
  for (int g = 0; g < s->num_groups(); ++g) {
    const int full = std::min(valid / bs, static_cast<int>(s->table(g).size()));
    if (full <= s->num_published(g)) continue;
    // A windowed group's blocks are tied to the anchor's (group 0, full attention) when there is one. Under
    // approximate replay they are never offered: a hit rebuilds them.
    if (window(g) > 0 && cfg_.approx_replay_from) continue;
    const bool tie = window(g) > 0 && window(0) == 0;
    pool_->Publish(s->table(g), s->tokens().data(), full, g, 0, s->first(g), tie ? &s->table(0) : nullptr);
    // Write-through: the new full blocks are copied now (their K/V is final) and stored off this thread.
    if (tiers_) {
      if (static_cast<int>(chains.size()) < full) chains = pool_->ChainHashes(s->tokens().data(), valid / bs * bs);
      tiers_->Offer(g, s->table(g), s->tokens().data(), std::max(s->num_published(g), s->first(g)), full, chains);
    }
    s->Published(g, full);
  }
}

void Scheduler::Slide(Sequence* s) {
  if (s->status() != SeqStatus::kRunning || cfg_.group_window.empty()) return;
  const int floor = s->read_floor(), bs = pool_->block_size(), every = cfg_.swa_checkpoint_every;
  for (int g = 0; g < s->num_groups(); ++g) {
    if (window(g) == 0) continue;
    const int first = s->first(g);
    std::vector<int32_t> out = s->Slide(g, WindowKeepFrom(window(g), floor, bs));
    if (every == 0 || !cfg_.prefix_caching || window(0) > 0) {  // checkpoints need a full-attention anchor
      pool_->Release(out);
      continue;
    }
    // Sparse checkpoints: block i (positions [i * bs, (i + 1) * bs)) stays cached when the window of the first
    // checkpoint c = k * every at or past its end, [c - W + 1, c), reaches back to it; later checkpoints' windows
    // start later still. The sequence's last window (finish, preemption) is released as usual, so it stays too.
    std::vector<int32_t> kept, dropped;
    for (size_t j = 0; j < out.size(); ++j) {
      const int i = first + static_cast<int>(j);
      const int c = ((i + 1) * bs + every - 1) / every * every;
      (WindowKeepFrom(window(g), c, bs) <= i ? kept : dropped).push_back(out[j]);
    }
    pool_->Release(kept);
    pool_->ReleaseUncached(dropped);
  }
}

void Scheduler::Release(Sequence* s, Fence /*completed*/) {
  // Finished sequences are no longer queued (Engine::Finish takes them off the waiting list).
  running_.erase(std::remove(running_.begin(), running_.end(), s), running_.end());
  const bool had_slot = s->slot() >= 0;
  if (had_slot) Publish(s);
  SeqResources r = s->Release();
  DI_SEQ_CHECK(had_slot || r.blocks.empty());  // blocks come and go with the slot (Admit, Preempt)
  if (had_slot) {
    pool_->Release(r.blocks);
    pending_slots_.push_back({r.last_use, r.slot});
  }
}

void Scheduler::Reclaim(Fence completed) {
  while (!pending_slots_.empty() && pending_slots_.front().fence <= completed) {
    const int32_t slot = pending_slots_.front().slot;
    std::fill(table_->row(slot), table_->row(slot) + table_->width(), -1);  // poison: a stale read shows up
    free_slots_.push_back(slot);
    pending_slots_.pop_front();
  }
}

Status Scheduler::CheckNoLeaks() const {
  DI_RETURN_IF_ERROR(pool_->CheckNoLeaks());
  if (!waiting_.empty() || !running_.empty())
    return Internal("scheduler still holds " + std::to_string(waiting_.size()) + " waiting and " +
                    std::to_string(running_.size()) + " running sequences");
  if (static_cast<int>(free_slots_.size()) != table_->num_slots())
    return Internal("token-table slots leaked: " + std::to_string(table_->num_slots() - free_slots_.size()) +
                    " not returned (" + std::to_string(pending_slots_.size()) + " awaiting their fence)");
  return Status::Ok();
}

}  // namespace deepinfer
