// Where requests and aborts wait between the threads that add them (servers, prep workers) and the engine
// thread that takes them at the top of each iteration. Also the engine's stop signal and request ids.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "deepinfer/status.h"
#include "engine/sequence.h"  // Request

namespace deepinfer {

class RequestInbox {
 public:
  uint64_t NextId() { return next_id_.fetch_add(1); }
  // Queues a request; InvalidArgument once the engine is shutting down.
  Status Push(std::unique_ptr<Request> request);
  void PushAbort(uint64_t request_id);
  // Moves everything queued into *requests / *aborts (appending); returns whether stop was asked.
  bool Take(std::vector<std::unique_ptr<Request>>* requests, std::vector<uint64_t>* aborts);
  bool HasAbort(uint64_t request_id) const;
  bool Empty() const;  // no request and no abort waiting
  // Blocks until stop is asked, something is queued, or ready() (evaluated under the inbox's lock: it may only
  // read state the waiting thread itself owns), or `timeout_s` passes (> 0; 0: no timeout). Returns false when
  // stop was asked.
  bool Wait(const std::function<bool()>& ready, double timeout_s = 0);
  void Stop();
  // Wakes a Wait to evaluate its ready() again (state it reads changed on another thread, e.g. a tier load done).
  void Wake();

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Request>> requests_;
  std::vector<uint64_t> aborts_;
  bool stop_ = false;
  std::atomic<uint64_t> next_id_{1};
};

}  // namespace deepinfer
