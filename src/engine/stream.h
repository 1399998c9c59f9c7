// The CPU backend's "device stream": one thread that runs enqueued tasks strictly in order, and a completion
// counter. A fence is the counter value a task will publish when done (timeline-semaphore style), so fences
// need no allocation and compare as integers; waiting on one gives the host a happens-before edge with
// everything the task wrote (release store / acquire load), as a CUDA event plus a D2H copy would.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace deepinfer {

using Fence = uint64_t;

class Stream {
 public:
  Stream();
  ~Stream();  // runs what is queued, then joins
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Queues `task`; returns the fence that passes when it (and everything before it) has run.
  Fence Enqueue(std::function<void()> task);
  bool Passed(Fence f) const { return completed_.load(std::memory_order_acquire) >= f; }
  void Wait(Fence f) const;
  Fence completed() const { return completed_.load(std::memory_order_acquire); }

  // Time the stream spent running tasks, and idle while the host had not yet queued the next task (counted
  // only between two tasks, from the end of one to the enqueue of the next).
  double busy_seconds() const { return busy_ns_.load() * 1e-9; }
  double idle_seconds() const { return idle_ns_.load() * 1e-9; }
  void ResetCounters();

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  Fence enqueued_ = 0;
  bool stop_ = false;
  std::atomic<Fence> completed_{0};
  std::atomic<int64_t> busy_ns_{0}, idle_ns_{0};
  std::chrono::steady_clock::time_point last_end_;
  bool have_last_end_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace deepinfer
