// deepinfer._core: the Python binding of deepinfer's public C++ API (include/deepinfer/ only). It stays thin:
// loading, submitting, waiting and collecting live here, in C++ and without the GIL; the vLLM-shaped classes
// users see (LLM, SamplingParams, RequestOutput, AsyncLLM) are Python, in python/deepinfer/.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "deepinfer/deepinfer.h"
#include "engine_handle.h"
#include "request_set.h"
#include "status_error.h"
#include "stream.h"

namespace py = pybind11;
namespace api = deepinfer::api;
using deepinfer::python::EngineHandle;
using deepinfer::python::RequestSet;
using deepinfer::python::Stream;
using deepinfer::python::ThrowIfError;

namespace {

template <typename T>
T ValueOrThrow(deepinfer::StatusOr<T>&& v) {
  ThrowIfError(v.status());
  return std::move(v).value();
}

std::shared_ptr<EngineHandle> Live(const std::shared_ptr<EngineHandle>& h) {
  if (!h->alive()) ThrowIfError(deepinfer::Internal("the engine is shut down (LLM.shutdown() was called)"));
  return h;
}

api::LogLevel ParseLogLevel(const std::string& s) {
  if (s == "debug") return api::LogLevel::kDebug;
  if (s == "info") return api::LogLevel::kInfo;
  if (s == "warn" || s == "warning") return api::LogLevel::kWarn;
  if (s == "error") return api::LogLevel::kError;
  if (s == "off") return api::LogLevel::kOff;
  throw py::value_error("log level must be debug, info, warn, error or off, not '" + s + "'");
}

py::dict StatsDict(const api::EngineStats& s) {
  py::dict d;
  d["steps"] = s.steps;
  d["prompt_tokens_computed"] = s.prompt_tokens_computed;
  d["cached_prompt_tokens"] = s.cached_prompt_tokens;
  d["replayed_prompt_tokens"] = s.replayed_prompt_tokens;
  d["generated_tokens"] = s.generated_tokens;
  d["preemptions"] = s.preemptions;
  d["requests_finished"] = s.requests_finished;
  d["requests_aborted"] = s.requests_aborted;
  d["waiting"] = s.waiting;
  d["running"] = s.running;
  d["kv_blocks_total"] = s.kv_blocks_total;
  d["kv_blocks_free"] = s.kv_blocks_free;
  d["spec_drafts"] = s.spec_drafts;
  d["spec_draft_tokens"] = s.spec_draft_tokens;
  d["spec_accepted_tokens"] = s.spec_accepted_tokens;
  return d;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "deepinfer's C++ engine (use the classes in the deepinfer package, not this module)";

  py::enum_<api::WeightPlacement>(m, "WeightPlacement")
      .value("auto", api::WeightPlacement::kAuto)
      .value("mmap", api::WeightPlacement::kMmap)
      .value("copy", api::WeightPlacement::kCopy);
  py::enum_<api::KvCacheDtype>(m, "KvCacheDtype")
      .value("f32", api::KvCacheDtype::kF32)
      .value("bf16", api::KvCacheDtype::kBF16)
      .value("f16", api::KvCacheDtype::kF16);
  py::enum_<api::SpeculativeMethod>(m, "SpeculativeMethod")
      .value("none", api::SpeculativeMethod::kNone)
      .value("ngram", api::SpeculativeMethod::kNgram)
      .value("draft", api::SpeculativeMethod::kDraft)
      .value("mtp", api::SpeculativeMethod::kMtp);
  py::enum_<api::SpeculativeVerify>(m, "SpeculativeVerify")
      .value("exact", api::SpeculativeVerify::kExact)
      .value("rejection", api::SpeculativeVerify::kRejection);

  py::class_<api::ModelOptions>(m, "ModelOptions")
      .def(py::init<>())
      .def_readwrite("placement", &api::ModelOptions::placement)
      .def_readwrite("progress", &api::ModelOptions::progress)
      .def_readwrite("mtp_model", &api::ModelOptions::mtp_model);

  // draft_model is not exposed: a draft is loaded by name (EngineOptions' pointer would dangle across Python).
  py::class_<api::EngineOptions>(m, "EngineOptions")
      .def(py::init<>())
      .def_readwrite("max_num_seqs", &api::EngineOptions::max_num_seqs)
      .def_readwrite("max_batched_tokens", &api::EngineOptions::max_batched_tokens)
      .def_readwrite("max_model_len", &api::EngineOptions::max_model_len)
      .def_readwrite("block_size", &api::EngineOptions::block_size)
      .def_readwrite("kv_cache_bytes", &api::EngineOptions::kv_cache_bytes)
      .def_readwrite("kv_cache_fraction", &api::EngineOptions::kv_cache_fraction)
      .def_readwrite("kv_cache_dtype", &api::EngineOptions::kv_cache_dtype)
      .def_readwrite("prefix_caching", &api::EngineOptions::prefix_caching)
      .def_readwrite("swa_full", &api::EngineOptions::swa_full)
      .def_readwrite("swa_replay_max", &api::EngineOptions::swa_replay_max)
      .def_readwrite("swa_checkpoint_every", &api::EngineOptions::swa_checkpoint_every)
      .def_readwrite("overlap", &api::EngineOptions::overlap)
      .def_readwrite("target_itl_ms", &api::EngineOptions::target_itl_ms)
      .def_readwrite("threads", &api::EngineOptions::threads)
      .def_readwrite("speculative", &api::EngineOptions::speculative)
      .def_readwrite("num_speculative_tokens", &api::EngineOptions::num_speculative_tokens)
      .def_readwrite("ngram_min", &api::EngineOptions::ngram_min)
      .def_readwrite("ngram_max", &api::EngineOptions::ngram_max)
      .def_readwrite("spec_verify", &api::EngineOptions::spec_verify);

  // Built only by Engine.params_from_json, so that Python's SamplingParams and the HTTP server / `generate
  // --input` share one parser, one set of ranges and one wording of errors.
  py::class_<api::GenerationParams>(m, "GenerationParams")
      .def_readonly("n", &api::GenerationParams::n)
      .def_readonly("max_tokens", &api::GenerationParams::max_tokens)
      .def_readonly("logprobs", &api::GenerationParams::logprobs)
      .def_readonly("grammar", &api::GenerationParams::grammar)
      .def_property_readonly("seed", [](const api::GenerationParams& p) -> py::object {
        return p.seed ? py::object(py::int_(*p.seed)) : py::object(py::none());
      });

  py::class_<RequestSet>(m, "RequestSet")
      .def("wait", &RequestSet::Wait, py::arg("timeout") = -1.0, py::call_guard<py::gil_scoped_release>())
      .def("finished", &RequestSet::finished)
      .def("__len__", &RequestSet::size)
      .def("abort", &RequestSet::Abort, py::call_guard<py::gil_scoped_release>())
      .def("results", &RequestSet::Results);

  py::class_<Stream>(m, "Stream")
      .def_property_readonly("request_id", &Stream::request_id)
      .def("fileno", &Stream::fileno)
      .def("wait", &Stream::Wait, py::arg("timeout") = -1.0, py::call_guard<py::gil_scoped_release>())
      .def("poll", &Stream::Poll)
      .def("done", &Stream::done)
      .def("abort", &Stream::Abort, py::call_guard<py::gil_scoped_release>());

  py::class_<EngineHandle, std::shared_ptr<EngineHandle>>(m, "Engine")
      .def(py::init([](const std::string& model, const api::ModelOptions& mo, const api::EngineOptions& eo,
                       const std::string& draft_model) {
             deepinfer::StatusOr<std::shared_ptr<EngineHandle>> h = [&] {
               py::gil_scoped_release nogil;
               return EngineHandle::Create(model, mo, eo, draft_model);
             }();
             return ValueOrThrow(std::move(h));
           }),
           py::arg("model"), py::arg("model_options"), py::arg("engine_options"), py::arg("draft_model") = "")
      .def_property_readonly("format", [](const EngineHandle& h) { return h.model().format(); })
      .def_property_readonly("path", [](const EngineHandle& h) { return h.model().path(); })
      .def_property_readonly("summary", [](const EngineHandle& h) { return h.model().Summary(); })
      .def_property_readonly("context_length", [](const EngineHandle& h) { return h.model().context_length(); })
      .def_property_readonly("vocab_size", [](const EngineHandle& h) { return h.model().vocab_size(); })
      .def_property_readonly("max_model_len", &EngineHandle::max_model_len)
      .def_property_readonly("bos_id", [](const EngineHandle& h) { return h.model().bos_id(); })
      .def_property_readonly("eos_id", [](const EngineHandle& h) { return h.model().eos_id(); })
      .def("encode_prompt", [](const EngineHandle& h, const std::string& text) { return h.model().EncodePrompt(text); })
      .def("encode", [](const EngineHandle& h, const std::string& text, bool add_bos) { return h.model().Encode(text, add_bos); },
           py::arg("text"), py::arg("add_bos") = false)
      .def("decode", [](const EngineHandle& h, const std::vector<int32_t>& ids, bool skip_special) {
             return deepinfer::python::Utf8(h.model().Decode(ids, skip_special));
           }, py::arg("ids"), py::arg("skip_special") = true)
      // An OpenAI-style body with "messages" (and "tools", "add_generation_prompt", ...) through the model's
      // chat template, exactly as `generate --input` and the server render it: the prompt's token ids.
      .def("encode_chat", [](const EngineHandle& h, const std::string& json_body) {
             return ValueOrThrow(api::RequestFromOpenAiJson(h.model(), json_body)).prompt;
           })
      .def("params_from_json", [](const EngineHandle& h, const std::string& json_body) {
             return ValueOrThrow(api::RequestFromOpenAiJson(h.model(), json_body)).params;
           })
      .def("submit", [](const std::shared_ptr<EngineHandle>& h, std::vector<std::vector<int32_t>> prompts,
                        const std::vector<const api::GenerationParams*>& params) {
             std::shared_ptr<EngineHandle> live = Live(h);  // throws: needs the GIL
             deepinfer::StatusOr<std::unique_ptr<RequestSet>> set = [&] {
               py::gil_scoped_release nogil;
               return RequestSet::Submit(live, std::move(prompts), params);
             }();
             return ValueOrThrow(std::move(set));
           })
      .def("stream", [](const std::shared_ptr<EngineHandle>& h, std::vector<int32_t> prompt,
                        const api::GenerationParams& params) {
             std::shared_ptr<EngineHandle> live = Live(h);
             deepinfer::StatusOr<std::unique_ptr<Stream>> s = [&] {
               py::gil_scoped_release nogil;
               return Stream::Submit(live, std::move(prompt), params);
             }();
             return ValueOrThrow(std::move(s));
           })
      .def("abort", &EngineHandle::Abort, py::call_guard<py::gil_scoped_release>())
      .def("stats", [](EngineHandle& h) {
             api::EngineStats s;
             {
               py::gil_scoped_release nogil;
               s = h.Stats();
             }
             return StatsDict(s);
           })
      .def("alive", &EngineHandle::alive)
      .def("shutdown", [](EngineHandle& h) {
        deepinfer::Status s;
        {
          py::gil_scoped_release nogil;
          s = h.Shutdown();
        }
        ThrowIfError(s);
      });

  m.def("set_log_level", [](const std::string& level) { api::SetLogLevel(ParseLogLevel(level)); }, py::arg("level"));
  m.def("set_compute_threads", &api::SetComputeThreads, py::arg("n"));
  m.def("compute_threads", &api::ComputeThreads);
}
