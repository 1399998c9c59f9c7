#include "base/work_queue.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

namespace deepinfer {

WorkQueue::WorkQueue(int num_threads, int nice) : nice_(nice) {
  for (int i = 0; i < std::max(1, num_threads); ++i) threads_.emplace_back([this] { Worker(); });
}

WorkQueue::~WorkQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    tasks_.clear();
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkQueue::Submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
}

size_t WorkQueue::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tasks_.size();
}

void WorkQueue::Worker() {
  // Below the threads that hand out answers (an event loop, the engine): on a busy machine a queue of long
  // tasks then slows itself down, not them. Linux applies nice per thread; failure leaves the default.
  if (nice_ > 0) (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), nice_);
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
      if (stop_) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace deepinfer
