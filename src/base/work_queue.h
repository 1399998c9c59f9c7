// A few threads taking tasks from a FIFO queue: for blocking or long work (tokenizing a megabyte prompt,
// rendering a chat template) that must not run on an event loop. Unlike ThreadPool (one data-parallel kernel
// at a time), tasks here are independent and any number may be queued.
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace deepinfer {

class WorkQueue {
 public:
  // nice > 0: the workers run at that lower scheduling priority.
  explicit WorkQueue(int num_threads, int nice = 0);
  // Tasks still queued are dropped; running ones finish first.
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  void Submit(std::function<void()> task);  // thread-safe
  size_t queued() const;

 private:
  void Worker();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  int nice_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace deepinfer
