// Host-side state of requests and their samples (sequences). A sequence has two views (research note
// overlap.md section 1): the device view (sched: positions whose forward has been launched) used for KV
// allocation and scheduling, and the host view (tokens: what the host actually knows) used for stop checks,
// streaming and prefix-cache publication. They differ by the tokens of steps in flight (`inflight`).
//
// Its state changes only through the transitions below, each named after the event it records: the
// Scheduler admits, schedules, grows, preempts and releases; the Engine records launches, processed steps,
// committed tokens and the terminal reason. Each transition checks the invariants it relies on.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "engine/output_text.h"
#include "engine/grammar_gate.h"
#include "grammar/matcher.h"
#include "engine/request.h"
#include "engine/stream.h"

// Always on: each is one predictable branch per transition, and a broken invariant would otherwise surface
// as wrong tokens or a leaked block far from its cause.
#define DI_SEQ_CHECK(cond)                                                                            \
  do {                                                                                                \
    if (!(cond)) {                                                                                    \
      std::fprintf(stderr, "%s:%d: sequence invariant violated: %s\n", __FILE__, __LINE__, #cond);   \
      std::abort();                                                                                   \
    }                                                                                                 \
  } while (0)

namespace deepinfer {

struct Request {
  uint64_t id = 0;
  RequestParams params;
  std::vector<int32_t> prompt;
  OutputCallback callback;
  int unfinished = 0;  // samples not yet finished
  // One grammar matcher per sample when params.compiled_grammar is set. Only the executor (stream thread) touches them.
  std::vector<std::unique_ptr<grammar::GrammarMatcher>> matchers;
  std::vector<std::unique_ptr<GrammarGateState>> gates;  // one per sample when params.gate is enabled
  // Speculative decoding, resolved from params.speculative and the engine's options at ingestion.
  SpecMethod spec_method = SpecMethod::kNone;
  int spec_k = 0;
};

enum class SeqStatus {
  kWaiting,   // queued (new, or preempted and waiting to recompute)
  kRunning,   // holds a slot and KV blocks; prefilling or decoding
  kFinished,  // terminal (stop, length, abort): never scheduled again; released once nothing in flight uses it
  kReleased,  // slot and blocks returned
};

// What a sequence gives back when it is preempted or released: its blocks (every KV group's), and its token-table slot
// (-1: it had none), which may be reused only once `last_use` (the fence of its last launched step) has passed.
struct SeqResources {
  std::vector<int32_t> blocks;
  int slot = -1;
  Fence last_use = 0;
};

class Sequence {
 public:
  // A new sample `index` of `req`, waiting; its host view starts as the prompt. `held`: it waits for sample
  // 0's prompt to be in the prefix cache. `text` (may be null) detokenizes and matches stop strings.
  Sequence(uint64_t id, uint64_t arrival, Request* req, int index, bool held, std::unique_ptr<OutputText> text)
      : id_(id), arrival_(arrival), req_(req), index_(index), tokens_(req->prompt),
        prompt_len_(static_cast<int>(req->prompt.size())), held_(held), text_(std::move(text)) {}
  Sequence(const Sequence&) = delete;
  Sequence& operator=(const Sequence&) = delete;

  // Identity.
  uint64_t id() const { return id_; }
  uint64_t arrival() const { return arrival_; }  // admission order within a priority: lower is older
  int priority() const { return req_->params.priority; }
  Request* req() const { return req_; }
  int index() const { return index_; }           // sample index within the request (RNG sub-stream)

  // Host view.
  const std::vector<int32_t>& tokens() const { return tokens_; }  // prompt then committed generated tokens
  int prompt_len() const { return prompt_len_; }
  int num_outputs() const { return static_cast<int>(tokens_.size()) - prompt_len_; }
  SeqStatus status() const { return status_; }
  const std::string& finish_reason() const { return finish_reason_; }
  const std::string& stop_reason() const { return stop_reason_; }
  OutputText* text() const { return text_.get(); }  // null without a tokenizer

  // Device view.
  int sched() const { return sched_; }                        // positions [0, sched) have been launched
  int prefill_end() const { return prefill_end_; }            // [0, prefill_end) from host-written tokens
  // Where admission's prefill stops. A speculating sequence recomputed after a preemption stops one short of its
  // known tokens and goes on with a verify row at its last one, as the run it interrupted would have (rather
  // than sampling that position plainly, which changes rejection verification's tokens): positions
  // [0, known - 1) are prefilled, the proposers rebuild their state (MTP's first draft) from them, and the
  // position every later step is keyed to stays where it was.
  int admit_end() const {
    const bool speculates = req_->spec_method != SpecMethod::kNone && req_->spec_k > 0;
    return static_cast<int>(tokens_.size()) - (speculates && num_outputs() > 0 ? 1 : 0);
  }
  // Whether a row over [.., end) samples the token at `end` (a prefill chunk below the known tokens does not).
  bool SamplesAt(int end) const { return end >= prefill_end_ + (hands_over_ ? 1 : 0); }
  // Whether a row over [.., end) is the prefill chunk that hands a recomputed sequence over to verify rows.
  bool HandsOverAt(int end) const { return hands_over_ && end == prefill_end_; }
  int scheduled_outputs() const { return scheduled_outputs_; }  // generated tokens once every launched step lands
  bool length_capped() const { return length_capped_; }       // the last allowed token is already scheduled
  int inflight() const { return inflight_; }                  // launched steps not yet processed that contain it
  Fence last_use() const { return last_use_; }                // step_done fence of the last launched step with it
  uint64_t last_step() const { return last_step_; }           // the last step given a row for it
  int kv_written() const { return kv_written_; }              // positions whose K/V a processed step wrote

  // Block tables, one per KV group (kv/kv_layout.h). Group 0's is the longest; during a bounded replay a windowed
  // group's covers only what its rows have reached (every row's positions are covered in every group). A sliding-window group's
  // entries below first(g) were released once out of every reader's window: they name blocks it no longer holds
  // (kept only to link the prefix-cache chain, never read).
  int num_groups() const { return static_cast<int>(tables_.size()); }
  const std::vector<int32_t>& table(int g) const { return tables_[g]; }
  const std::vector<int32_t>& blocks() const { return tables_[0]; }  // group 0's (the only one without windows)
  int num_blocks() const { return tables_.empty() ? 0 : static_cast<int>(tables_[0].size()); }  // group 0's
  int first(int g) const { return first_[g]; }
  int num_published(int g = 0) const { return num_published_.empty() ? 0 : num_published_[g]; }  // leading blocks offered
  // The lowest position a launched or future step of it reads a query at: the first row in flight, else where
  // the next row starts. A window-W group needs its blocks from position read_floor() - W + 1 on.
  int read_floor() const {
    const int idle = std::min(sched_, static_cast<int>(tokens_.size()) - 1);
    return floors_.empty() ? std::max(0, idle) : floors_.front();
  }
  int slot() const { return slot_; }
  uint32_t slot_gen() const { return slot_gen_; }
  int cached_tokens() const { return cached_tokens_; }  // prompt tokens from the prefix cache at first admission
  // Prompt tokens recomputed at first admission to rebuild sliding windows for a prefix hit (bounded replay).
  int replayed_tokens() const { return replayed_tokens_; }
  // Positions [0, replay_end) of the full-attention groups came from the prefix cache: rows below it rebuild
  // only the windowed groups' K/V (the full groups' is read, never rewritten). 0 without a replay.
  int replay_end() const { return replay_end_; }
  // Windowed groups read nothing below this position: the start of an approximate replay (--swa-replay approx),
  // whose windows were not restored. 0 otherwise.
  int window_floor() const { return window_floor_; }
  void set_window_floor(int position) { window_floor_ = position; }
  bool held() const { return held_; }
  int preemptions() const { return preemptions_; }

  // ---- Scheduler transitions.

  // Waiting -> running: takes `slot` and a block table per KV group (equal lengths; not held below first_blocks[g]),
  // whose leading blocks came from the prefix cache and hold the K/V of positions [0, cached_positions). Every
  // known token is (re)computed from the host view.
  // `replay_end` > cached_positions: the full groups hold [0, replay_end) already (a bounded replay).
  void Admit(int slot, uint32_t slot_gen, std::vector<std::vector<int32_t>> tables, std::vector<int> first_blocks,
             int cached_positions, int replay_end, std::vector<int> published) {
    DI_SEQ_CHECK(status_ == SeqStatus::kWaiting && !held_ && slot_ < 0 && tables_.empty() && !tables.empty() &&
                 first_blocks.size() == tables.size());
    for (const auto& t : tables) DI_SEQ_CHECK(t.size() <= tables[0].size());
    slot_ = slot;
    slot_gen_ = slot_gen;
    tables_ = std::move(tables);
    first_ = std::move(first_blocks);
    if (preemptions_ == 0) {
      cached_tokens_ = cached_positions;
      replayed_tokens_ = std::max(0, replay_end - cached_positions);
    }
    replay_end_ = replay_end > cached_positions ? replay_end : 0;
    sched_ = cached_positions;
    kv_written_ = cached_positions;
    DI_SEQ_CHECK(published.size() == tables_.size());
    num_published_ = std::move(published);
    prefill_end_ = admit_end();
    hands_over_ = prefill_end_ < static_cast<int>(tokens_.size());
    scheduled_outputs_ = num_outputs();
    status_ = SeqStatus::kRunning;
  }
  // More blocks at the end of group g's block table (on-demand growth; every group grows alike).
  void AddBlocks(int g, const std::vector<int32_t>& more) {
    DI_SEQ_CHECK(status_ == SeqStatus::kRunning);
    tables_[g].insert(tables_[g].end(), more.begin(), more.end());
  }
  // Group g's blocks [first(g), keep_from) left every reader's window: returns them, to be released.
  std::vector<int32_t> Slide(int g, int keep_from) {
    DI_SEQ_CHECK(status_ == SeqStatus::kRunning);
    const std::vector<int32_t>& t = tables_[g];
    keep_from = std::min(keep_from, static_cast<int>(t.size()));
    std::vector<int32_t> out;
    if (keep_from > first_[g]) {
      out.assign(t.begin() + first_[g], t.begin() + keep_from);
      first_[g] = keep_from;
    }
    return out;
  }
  // A row of `q_len` positions from sched() was put into `step`. Once the row that yields the last allowed
  // token (max_tokens, or `max_model_len` positions) is scheduled, the sequence is never scheduled again.
  // A dynamic row (speculative decoding) reserves q_len positions: sched() then becomes an upper bound and
  // scheduled_outputs() a lower bound (one token per row) until RunProcessed settles them.
  void RowScheduled(int q_len, uint64_t step, int max_model_len, bool dynamic) {
    DI_SEQ_CHECK(status_ == SeqStatus::kRunning && !length_capped_ && q_len > 0);
    // The row's lowest query position. A dynamic row starts where the device's committed length puts it, which
    // is at least the host's last known token.
    floors_.push_back(dynamic ? std::max(0, std::min(sched_, static_cast<int>(tokens_.size()) - 1)) : sched_);
    const bool samples = SamplesAt(sched_ + q_len);
    sched_ += q_len;
    last_step_ = step;
    if (samples) {
      // The token this row samples lands at position sched_: no ghost row for length finishes.
      ++scheduled_outputs_;
      UpdateLengthCap(max_model_len);
    }
  }
  // A processed dynamic row that reserved `reserved` positions advanced the sequence by `advanced` committed
  // tokens (0..reserved): the bounds tighten, and a length cap set on the upper bound may lift again.
  void RunProcessed(int reserved, int advanced, int max_model_len) {
    DI_SEQ_CHECK(inflight_ > 0 && advanced >= 0 && advanced <= reserved);
    if (status_ != SeqStatus::kRunning) return;
    sched_ -= reserved - advanced;
    scheduled_outputs_ += advanced - 1;
    length_capped_ = false;
    UpdateLengthCap(max_model_len);
  }
  // Speculation counters (drafts proposed and accepted by verification, over the rows the host processed).
  void CountSpeculation(int proposed, int accepted) {
    spec_proposed_ += proposed;
    spec_accepted_ += accepted;
  }
  int64_t spec_proposed() const { return spec_proposed_; }
  int64_t spec_accepted() const { return spec_accepted_; }
  // The first `num_blocks` blocks of group g are in the prefix cache.
  void Published(int g, int num_blocks) {
    DI_SEQ_CHECK(num_blocks >= num_published_[g] && num_blocks <= static_cast<int>(tables_[g].size()));
    num_published_[g] = num_blocks;
  }
  // Running -> waiting, to be recomputed from its known tokens later. Only without a step in flight: its
  // device state would otherwise be ahead of the host's history (overlap.md 6.7).
  SeqResources Preempt() {
    DI_SEQ_CHECK(status_ == SeqStatus::kRunning && inflight_ == 0);
    SeqResources r = TakeResources();
    sched_ = 0;
    prefill_end_ = 0;
    kv_written_ = 0;
    scheduled_outputs_ = num_outputs();
    length_capped_ = false;
    ++preemptions_;
    status_ = SeqStatus::kWaiting;
    return r;
  }
  // Finished -> released, once nothing in flight uses its slot or blocks.
  SeqResources Release() {
    DI_SEQ_CHECK(status_ == SeqStatus::kFinished && inflight_ == 0);
    status_ = SeqStatus::kReleased;
    return TakeResources();
  }

  // ---- Engine transitions.

  // A step containing it was launched; `done` is that step's completion fence.
  void Launched(Fence done) {
    DI_SEQ_CHECK(status_ == SeqStatus::kRunning);
    ++inflight_;
    last_use_ = done;
  }
  // A launched step containing its positions [.., kv_end) was processed: their K/V are written.
  void Processed(int kv_end) {
    DI_SEQ_CHECK(inflight_ > 0 && !floors_.empty());
    --inflight_;
    floors_.pop_front();
    if (kv_end > kv_written_) kv_written_ = kv_end;
  }
  // The host learned its next generated token.
  void Commit(int32_t token) {
    DI_SEQ_CHECK(status_ == SeqStatus::kRunning && num_outputs() < scheduled_outputs_);
    tokens_.push_back(token);
  }
  // Sample 0's prompt is in the prefix cache (or sample 0 ended): this sample may be admitted.
  void Unhold() { held_ = false; }
  // Waiting or running -> finished ("stop", "length", "abort"; `stop_reason`: the stop string matched).
  void Finish(std::string reason, std::string stop_reason) {
    DI_SEQ_CHECK(status_ == SeqStatus::kWaiting || status_ == SeqStatus::kRunning);
    status_ = SeqStatus::kFinished;
    finish_reason_ = std::move(reason);
    stop_reason_ = std::move(stop_reason);
  }

 private:
  void UpdateLengthCap(int max_model_len) {
    if (scheduled_outputs_ >= req_->params.max_tokens || sched_ + 1 >= max_model_len) length_capped_ = true;
  }
  SeqResources TakeResources() {
    SeqResources r{{}, slot_, last_use_};
    // Windowed groups first: released blocks enter the prefix cache's LRU in this order, so under pressure a
    // window is evicted before the full-attention blocks it is tied to (a bounded replay rebuilds it), never a
    // full block before the windows that need it.
    for (size_t g = tables_.size(); g-- > 0;)
      r.blocks.insert(r.blocks.end(), tables_[g].begin() + first_[g], tables_[g].end());
    tables_.clear();
    first_.clear();
    num_published_.clear();
    slot_ = -1;
    return r;
  }

  const uint64_t id_, arrival_;
  Request* const req_;
  const int index_;
  std::vector<int32_t> tokens_;
  const int prompt_len_;

  SeqStatus status_ = SeqStatus::kWaiting;
  std::string finish_reason_, stop_reason_;

  int sched_ = 0, prefill_end_ = 0, scheduled_outputs_ = 0;
  bool hands_over_ = false;  // this admission's prefill ends one short of the known tokens (admit_end)
  bool length_capped_ = false;
  int inflight_ = 0;
  Fence last_use_ = 0;
  uint64_t last_step_ = 0;
  int kv_written_ = 0;

  std::vector<std::vector<int32_t>> tables_;  // per KV group
  std::vector<int> first_;                     // per KV group: its lowest live entry
  std::vector<int> num_published_;             // per KV group
  std::deque<int> floors_;                     // per row in flight, oldest first: its lowest query position
  int slot_ = -1;
  uint32_t slot_gen_ = 0;
  int cached_tokens_ = 0, replayed_tokens_ = 0, replay_end_ = 0, window_floor_ = 0;
  bool held_ = false;
  int preemptions_ = 0;
  int64_t spec_proposed_ = 0, spec_accepted_ = 0;

  std::unique_ptr<OutputText> text_;
};

}  // namespace deepinfer
