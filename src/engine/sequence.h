// Host-side state of requests and their samples (sequences). A sequence has two views (research note
// overlap.md section 1): the device view (sched: positions whose forward has been launched) used for KV
// allocation and scheduling, and the host view (tokens: what the host actually knows) used for stop checks,
// streaming and prefix-cache publication. They differ by the tokens of steps in flight (`inflight`).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/output_text.h"
#include "engine/request.h"
#include "engine/stream.h"

namespace deepinfer {

struct Request {
  uint64_t id = 0;
  RequestParams params;
  std::vector<int32_t> prompt;
  OutputCallback callback;
  int unfinished = 0;  // samples not yet finished
};

enum class SeqStatus {
  kWaiting,   // queued (new, or preempted and waiting to recompute)
  kRunning,   // holds a slot and KV blocks; prefilling or decoding
  kFinished,  // terminal (stop, length, abort): never scheduled again; released once nothing in flight uses it
  kReleased,  // slot and blocks returned
};

struct Sequence {
  uint64_t id = 0;
  uint64_t arrival = 0;      // admission priority: lower is older
  Request* req = nullptr;
  int index = 0;             // sample index within the request (RNG sub-stream)
  std::vector<int32_t> tokens;  // host view: prompt then committed generated tokens
  int prompt_len = 0;
  int num_outputs() const { return static_cast<int>(tokens.size()) - prompt_len; }

  SeqStatus status = SeqStatus::kWaiting;
  std::string finish_reason, stop_reason;

  // Device view.
  int sched = 0;              // positions [0, sched) have been launched
  int prefill_end = 0;        // positions [0, prefill_end) come from host-written tokens (prompt + recomputed)
  int scheduled_outputs = 0;  // generated tokens that exist once every launched step lands
  bool length_capped = false; // the last allowed token is already scheduled: never schedule again
  int inflight = 0;           // launched steps not yet processed that contain this sequence
  Fence last_use = 0;         // step_done fence of the last launched step containing it
  uint64_t last_step = 0;     // the last step given a row for it
  int kv_written = 0;         // positions whose K/V a processed step wrote

  std::vector<int32_t> blocks;  // block table
  int num_published = 0;        // leading blocks already offered to the prefix cache
  int slot = -1;
  uint32_t slot_gen = 0;
  int cached_tokens = 0;        // prompt tokens that came from the prefix cache at first admission
  bool held = false;            // sample > 0 waiting for sample 0's prompt to be in the prefix cache
  int preemptions = 0;

  std::unique_ptr<OutputText> text;
};

}  // namespace deepinfer
