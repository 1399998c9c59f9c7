// The requests of one LLM.generate() call: submitted together, collected in C++ on the engine's thread (no
// Python object is built until the caller asks for the results), waited for with the GIL released. Dropping
// the set (an exception or Ctrl-C in the caller) aborts what has not finished.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "deepinfer/engine.h"
#include "engine_handle.h"

namespace deepinfer::python {

struct SampleResult {
  std::string text;
  std::vector<int32_t> token_ids;
  std::vector<api::TokenLogprob> logprobs;
  std::string finish_reason, stop_reason;
};

struct RequestResult {
  uint64_t request_id = 0;
  bool added = false;  // in the engine (ids may start at 0)
  std::vector<SampleResult> samples;
  int unfinished = 0;  // samples whose final event has not arrived
  int prompt_tokens = 0, cached_tokens = 0;
};

class RequestSet {
 public:
  // Validates every request first (so a bad one adds nothing), then adds them all. Call without the GIL.
  static StatusOr<std::unique_ptr<RequestSet>> Submit(std::shared_ptr<EngineHandle> handle,
                                                      std::vector<std::vector<int32_t>> prompts,
                                                      const std::vector<const api::GenerationParams*>& params);
  ~RequestSet();

  // Blocks (GIL released by the binding) up to timeout_s seconds (< 0: no limit); true when all have finished.
  bool Wait(double timeout_s);
  size_t finished() const;
  size_t size() const { return state_->results.size(); }
  void Abort();
  // [(request_id, prompt_tokens, cached_tokens, [(text, token_ids, finish_reason, stop_reason, logprobs)])];
  // logprobs is None unless requested, else [(token, logprob, [(token, logprob), ...])]. GIL held.
  pybind11::list Results() const;

 private:
  struct State {
    mutable std::mutex mu;
    std::condition_variable cv;
    std::vector<RequestResult> results;
    size_t done = 0;
  };
  RequestSet(std::shared_ptr<EngineHandle> handle) : handle_(std::move(handle)), state_(std::make_shared<State>()) {}

  std::shared_ptr<EngineHandle> handle_;
  std::shared_ptr<State> state_;  // shared with the engine's callbacks, which may outlive an aborted set
  std::vector<bool> want_logprobs_;
};

// A Python str from engine text. The engine emits whole UTF-8 characters; "replace" keeps a malformed byte
// sequence in a model's vocabulary from turning into an exception halfway through a batch.
pybind11::str Utf8(const std::string& s);
pybind11::list LogprobsList(const std::vector<api::TokenLogprob>& lps);

}  // namespace deepinfer::python
