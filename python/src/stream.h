// One streamed request: the engine's thread pushes its events into a queue and signals an eventfd; Python pulls
// them either blocking (Wait, GIL released: LLM.stream) or from an asyncio reader on the eventfd (Poll:
// AsyncLLM), so a thousand concurrent async streams need no thread each and the engine's thread never waits for
// the GIL. Dropping an unfinished stream aborts its request.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "deepinfer/engine.h"
#include "engine_handle.h"

namespace deepinfer::python {

class Stream {
 public:
  // Call without the GIL.
  static StatusOr<std::unique_ptr<Stream>> Submit(std::shared_ptr<EngineHandle> handle, std::vector<int32_t> prompt,
                                                  const api::GenerationParams& params);
  ~Stream();

  uint64_t request_id() const { return id_; }
  // Readable (for select / asyncio's add_reader) while events wait in the queue or the request has ended.
  int fileno() const { return state_->fd; }
  // Blocks (GIL released by the binding) until an event is queued, the stream has ended, or timeout_s passed
  // (< 0: no limit). True when Poll has something to return or the stream ended.
  bool Wait(double timeout_s);
  // Takes every queued event without blocking: [(index, text, token_ids, logprobs | None, finish_reason | None,
  // stop_reason | None, prompt_tokens, cached_tokens)]. GIL held.
  pybind11::list Poll();
  // True once every sample's final event has been taken by Poll.
  bool done() const;
  void Abort();

 private:
  struct State {
    State();
    ~State();
    std::mutex mu;
    std::condition_variable cv;
    std::deque<api::Output> events;
    int unfinished = 0;  // samples whose final event has not been pushed
    int fd = -1;         // eventfd, written by the engine's thread after each push
  };
  explicit Stream(std::shared_ptr<EngineHandle> handle) : handle_(std::move(handle)), state_(std::make_shared<State>()) {}

  std::shared_ptr<EngineHandle> handle_;
  std::shared_ptr<State> state_;  // shared with the engine's callback, which may outlive a dropped stream
  uint64_t id_ = 0;
  bool want_logprobs_ = false;
};

}  // namespace deepinfer::python
