#include "engine/request_inbox.h"

#include <chrono>

#include <algorithm>

namespace deepinfer {

Status RequestInbox::Push(std::unique_ptr<Request> request) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return InvalidArgument("the engine is shutting down");
    requests_.push_back(std::move(request));
  }
  cv_.notify_one();
  return Status::Ok();
}

void RequestInbox::PushAbort(uint64_t request_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborts_.push_back(request_id);
  }
  cv_.notify_one();
}

bool RequestInbox::Take(std::vector<std::unique_ptr<Request>>* requests, std::vector<uint64_t>* aborts) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& r : requests_) requests->push_back(std::move(r));
  requests_.clear();
  aborts->insert(aborts->end(), aborts_.begin(), aborts_.end());
  aborts_.clear();
  return stop_;
}

bool RequestInbox::HasAbort(uint64_t request_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::find(aborts_.begin(), aborts_.end(), request_id) != aborts_.end();
}

bool RequestInbox::Empty() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_.empty() && aborts_.empty();
}

bool RequestInbox::Wait(const std::function<bool()>& ready, double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  auto pred = [&] { return stop_ || !requests_.empty() || !aborts_.empty() || ready(); };
  if (timeout_s > 0) cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), pred);
  else cv_.wait(lock, pred);
  return !stop_;
}

void RequestInbox::Wake() {
  // Under the lock: a Wait that read the old state is either not yet waiting (it reads the new state) or waiting.
  std::lock_guard<std::mutex> lock(mu_);
  cv_.notify_all();
}

void RequestInbox::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
}

}  // namespace deepinfer
