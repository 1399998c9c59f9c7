#include "request_set.h"

#include <chrono>

namespace deepinfer::python {

namespace py = pybind11;

py::str Utf8(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
  if (!o) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

py::list LogprobsList(const std::vector<api::TokenLogprob>& lps) {
  py::list out;
  for (const auto& lp : lps) {
    py::list top;
    for (const auto& [tok, logprob] : lp.top) top.append(py::make_tuple(tok, logprob));
    out.append(py::make_tuple(lp.token, lp.logprob, std::move(top)));
  }
  return out;
}

StatusOr<std::unique_ptr<RequestSet>> RequestSet::Submit(std::shared_ptr<EngineHandle> handle,
                                                         std::vector<std::vector<int32_t>> prompts,
                                                         const std::vector<const api::GenerationParams*>& params) {
  if (params.size() != prompts.size()) return InvalidArgument("one SamplingParams per prompt expected");
  for (size_t i = 0; i < prompts.size(); ++i) {
    Status s = handle->Validate(prompts[i], *params[i]);
    if (!s.ok()) return prompts.size() == 1 ? s : s.WithContext("prompt " + std::to_string(i));
  }
  std::unique_ptr<RequestSet> set(new RequestSet(std::move(handle)));
  State& st = *set->state_;
  st.results.resize(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    st.results[i].samples.resize(params[i]->n);
    st.results[i].unfinished = params[i]->n;
    set->want_logprobs_.push_back(params[i]->logprobs >= 0);
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    // The callback runs on the engine's thread: plain C++ only, never Python.
    auto id = set->handle_->Add(std::move(prompts[i]), *params[i], [state = set->state_, i](const api::Output& o) {
      {
        std::lock_guard<std::mutex> lock(state->mu);
        RequestResult& r = state->results[i];
        SampleResult& s = r.samples[o.index];
        s.text += o.text;
        s.token_ids.insert(s.token_ids.end(), o.token_ids.begin(), o.token_ids.end());
        s.logprobs.insert(s.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
        r.prompt_tokens = o.prompt_tokens;
        r.cached_tokens = o.cached_tokens;
        if (!o.finished) return;
        s.finish_reason = o.finish_reason;
        s.stop_reason = o.stop_reason;
        if (--r.unfinished > 0) return;
        ++state->done;
      }
      state->cv.notify_all();
    });
    if (!id.ok()) {  // validated above, so only a shutdown from another thread gets here
      set->Abort();
      return id.status();
    }
    std::lock_guard<std::mutex> lock(st.mu);
    st.results[i].request_id = *id;
    st.results[i].added = true;
  }
  return set;
}

RequestSet::~RequestSet() { Abort(); }

bool RequestSet::Wait(double timeout_s) {
  std::unique_lock<std::mutex> lock(state_->mu);
  auto all_done = [&] { return state_->done == state_->results.size(); };
  if (timeout_s < 0) {
    state_->cv.wait(lock, all_done);
    return true;
  }
  return state_->cv.wait_for(lock, std::chrono::duration<double>(timeout_s), all_done);
}

size_t RequestSet::finished() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done;
}

void RequestSet::Abort() {
  std::vector<uint64_t> ids;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    for (const auto& r : state_->results)
      if (r.unfinished > 0 && r.added) ids.push_back(r.request_id);
  }
  for (uint64_t id : ids) handle_->Abort(id);
}

py::list RequestSet::Results() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  py::list out;
  for (size_t i = 0; i < state_->results.size(); ++i) {
    const RequestResult& r = state_->results[i];
    py::list samples;
    for (const SampleResult& s : r.samples) {
      py::object lps = want_logprobs_[i] ? py::object(LogprobsList(s.logprobs)) : py::object(py::none());
      samples.append(py::make_tuple(Utf8(s.text), py::cast(s.token_ids), s.finish_reason.empty() ? py::object(py::none()) : py::object(py::str(s.finish_reason)),
                                    s.stop_reason.empty() ? py::object(py::none()) : py::object(Utf8(s.stop_reason)), std::move(lps)));
    }
    out.append(py::make_tuple(r.request_id, r.prompt_tokens, r.cached_tokens, std::move(samples)));
  }
  return out;
}

}  // namespace deepinfer::python
