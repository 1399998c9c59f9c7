#include "engine/stream.h"

namespace deepinfer {

Stream::Stream() : thread_([this] { Loop(); }) {}

Stream::~Stream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Fence Stream::Enqueue(std::function<void()> task) {
  std::lock_guard<std::mutex> lock(mu_);
  // Idle gap: the stream finished its previous task and had nothing queued until now.
  if (have_last_end_ && queue_.empty() && completed_.load(std::memory_order_acquire) == enqueued_) {
    idle_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - last_end_).count();
    have_last_end_ = false;
  }
  queue_.push_back(std::move(task));
  cv_.notify_one();
  return ++enqueued_;
}

void Stream::ResetCounters() {
  std::lock_guard<std::mutex> lock(mu_);
  busy_ns_ = 0;
  idle_ns_ = 0;
  have_last_end_ = false;
}

void Stream::Wait(Fence f) const {
  for (Fence c = completed_.load(std::memory_order_acquire); c < f; c = completed_.load(std::memory_order_acquire))
    completed_.wait(c, std::memory_order_acquire);
}

void Stream::Loop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    const auto t0 = std::chrono::steady_clock::now();
    task();
    const auto t1 = std::chrono::steady_clock::now();
    busy_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_end_ = t1;
      have_last_end_ = true;
      completed_.fetch_add(1, std::memory_order_release);
    }
    completed_.notify_all();
  }
}

}  // namespace deepinfer
