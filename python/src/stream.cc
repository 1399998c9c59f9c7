#include "stream.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "request_set.h"

namespace deepinfer::python {

namespace py = pybind11;

Stream::State::State() : fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
Stream::State::~State() {
  if (fd >= 0) ::close(fd);
}

StatusOr<std::unique_ptr<Stream>> Stream::Submit(std::shared_ptr<EngineHandle> handle, std::vector<int32_t> prompt,
                                                 const api::GenerationParams& params) {
  std::unique_ptr<Stream> s(new Stream(std::move(handle)));
  if (s->state_->fd < 0) return Internal(std::string("eventfd: ") + std::strerror(errno));
  s->state_->unfinished = params.n;  // before Add: the first event may arrive before Add returns
  s->want_logprobs_ = params.logprobs >= 0;
  auto id = s->handle_->Add(std::move(prompt), params, [state = s->state_](const api::Output& o) {
    {
      std::lock_guard<std::mutex> lock(state->mu);
      state->events.push_back(o);
      if (o.finished) --state->unfinished;
    }
    state->cv.notify_all();
    const uint64_t one = 1;
    // Nonblocking: a counter that is already non-zero still wakes the reader; it never overflows in practice.
    ssize_t w = ::write(state->fd, &one, sizeof one);
    (void)w;
  });
  if (!id.ok()) {
    s->state_->unfinished = 0;  // nothing was added: nothing to abort
    return id.status();
  }
  s->id_ = *id;
  return s;
}

Stream::~Stream() { Abort(); }

void Stream::Abort() {
  bool unfinished;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    unfinished = state_->unfinished > 0;
  }
  if (unfinished) handle_->Abort(id_);
}

bool Stream::Wait(double timeout_s) {
  std::unique_lock<std::mutex> lock(state_->mu);
  auto ready = [&] { return !state_->events.empty() || state_->unfinished == 0; };
  if (timeout_s < 0) {
    state_->cv.wait(lock, ready);
    return true;
  }
  return state_->cv.wait_for(lock, std::chrono::duration<double>(timeout_s), ready);
}

bool Stream::done() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->unfinished == 0 && state_->events.empty();
}

py::list Stream::Poll() {
  // Reset the eventfd before draining: an event pushed after the drain writes it again, so a reader woken
  // by it is never left without a wake-up for an event still queued.
  uint64_t count;
  ssize_t r = ::read(state_->fd, &count, sizeof count);
  (void)r;
  std::deque<api::Output> events;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    events.swap(state_->events);
    // Ended: keep the fd readable so an asyncio reader wakes once more and sees done().
    if (state_->unfinished == 0) {
      const uint64_t one = 1;
      ssize_t w = ::write(state_->fd, &one, sizeof one);
      (void)w;
    }
  }
  py::list out;
  for (const api::Output& o : events) {
    py::object lps = want_logprobs_ ? py::object(LogprobsList(o.logprobs)) : py::object(py::none());
    py::object finish = o.finished ? py::object(py::str(o.finish_reason)) : py::object(py::none());
    py::object stop = o.stop_reason.empty() ? py::object(py::none()) : py::object(Utf8(o.stop_reason));
    out.append(py::make_tuple(o.index, Utf8(o.text), py::cast(o.token_ids), std::move(lps), std::move(finish),
                              std::move(stop), o.prompt_tokens, o.cached_tokens));
  }
  return out;
}

}  // namespace deepinfer::python
