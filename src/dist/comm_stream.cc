#include "dist/comm_stream.h"

#include <chrono>

namespace deepinfer::dist {

using Clock = std::chrono::steady_clock;

CommStream::CommStream(std::string name) : name_(std::move(name)) {
  thread_ = std::thread([this] { Run(); });
}

CommStream::~CommStream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_task_.notify_all();
  thread_.join();
}

CommStream::Ticket CommStream::Submit(std::function<Status()> task) {
  Ticket t;
  {
    std::lock_guard<std::mutex> lock(mu_);
    t = next_++;
    queue_.emplace_back(t, std::move(task));
  }
  cv_task_.notify_one();
  return t;
}

Status CommStream::Wait(Ticket t) {
  const auto t0 = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  cv_done_.wait(lock, [&] { return done_ >= t; });
  exposed_ += std::chrono::duration<double>(Clock::now() - t0).count();
  Status s = Status::Ok();
  // Statuses are collected in ticket order; a ticket waited twice (or never) finds nothing and reads as Ok.
  while (!results_.empty() && results_.front().first <= t) {
    if (results_.front().first == t) s = results_.front().second;
    results_.pop_front();
  }
  return s;
}

double CommStream::exposed_seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return exposed_;
}

double CommStream::busy_seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return busy_;
}

void CommStream::Run() {
  for (;;) {
    std::pair<Ticket, std::function<Status()>> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_task_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    const auto t0 = Clock::now();
    Status s = task.second();
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_ += secs;
      done_ = task.first;
      if (!s.ok()) results_.emplace_back(task.first, std::move(s));
    }
    cv_done_.notify_all();
  }
}

}  // namespace deepinfer::dist
