// A communication stream: collectives run on a thread of their own, in the order they were submitted, while the
// submitting thread computes. Two-batch overlap (model/transformer_tbo.cc) puts one micro-batch's MoE
// dispatch/combine here while the other micro-batch's attention and experts run, the CPU analogue of DeepEP's
// communication on its own stream.
//
// Ordering is what keeps it collective-safe: every rank submits the same tasks in the same order, and one thread
// runs them in that order, so the collectives inside meet their peers exactly as if they had been called
// inline. A task only touches buffers its submitter leaves alone until Wait() returns for it.
//
// An idle stream sleeps on a condition variable (no spinning); a waiting submitter does too.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "deepinfer/status.h"

namespace deepinfer::dist {

class CommStream {
 public:
  using Ticket = uint64_t;
  explicit CommStream(std::string name);
  ~CommStream();  // finishes the queued tasks first
  CommStream(const CommStream&) = delete;
  CommStream& operator=(const CommStream&) = delete;

  // Queues a task; the ticket names it for Wait.
  Ticket Submit(std::function<Status()> task);
  // Blocks until the task (and every earlier one) finished; returns its status. The time spent blocked is the
  // communication this thread could not hide (exposed_seconds).
  Status Wait(Ticket t);
  // Seconds submitters spent blocked in Wait, and seconds the stream spent running tasks, since creation.
  double exposed_seconds() const;
  double busy_seconds() const;

 private:
  void Run();
  const std::string name_;
  mutable std::mutex mu_;
  std::condition_variable cv_task_, cv_done_;
  std::deque<std::pair<Ticket, std::function<Status()>>> queue_;
  Ticket next_ = 1, done_ = 0;  // tickets are issued and finished in increasing order
  std::deque<std::pair<Ticket, Status>> results_;  // finished tasks' statuses not yet collected by Wait
  double exposed_ = 0, busy_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace deepinfer::dist
