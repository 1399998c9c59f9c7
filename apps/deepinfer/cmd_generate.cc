// deepinfer generate: one prompt streamed to the terminal (or --json), or a JSONL batch (--input/--output)
// through the same engine the server uses. Built on the public API only (include/deepinfer/).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "commands.h"
#include "deepinfer/deepinfer.h"
#include "startup.h"

namespace deepinfer::cli {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
using api::GenerationParams;
using api::Output;
using api::TokenLogprob;

json LogprobsJson(const std::vector<TokenLogprob>& lps) {
  json a = json::array();
  for (const auto& lp : lps) {
    json top = json::array();
    for (const auto& [id, v] : lp.top) top.push_back({{"token_id", id}, {"logprob", v}});
    a.push_back({{"token_id", lp.token}, {"logprob", lp.logprob}, {"top_logprobs", top}});
  }
  return a;
}

struct Choice {
  std::string text, finish_reason, stop_reason;
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;
  int64_t spec_proposed = 0, spec_accepted = 0;
};

// The --speculative method name when speculative decoding is on (reported in the JSON outputs), else empty.
std::string g_spec_method;

json SpeculativeJson(int64_t proposed, int64_t accepted) {
  return {{"method", g_spec_method}, {"proposed", proposed}, {"accepted", accepted}};
}

// Collects the streamed events of one request into its choices.
struct Collected {
  std::vector<Choice> choices;
  int prompt_tokens = 0, cached_tokens = 0, replayed_tokens = 0, unfinished = 0;
  std::string error;
  void Take(const Output& ev) {
    Choice& c = choices[ev.index];
    c.text += ev.text;
    c.tokens.insert(c.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
    c.logprobs.insert(c.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
    prompt_tokens = ev.prompt_tokens;
    cached_tokens = ev.cached_tokens;
    replayed_tokens = ev.replayed_tokens;
    c.spec_proposed = ev.spec_proposed;
    c.spec_accepted = ev.spec_accepted;
    if (ev.finished) {
      c.finish_reason = ev.finish_reason;
      c.stop_reason = ev.stop_reason;
      --unfinished;
    }
  }
  json ToJson(bool with_logprobs) const {
    if (!error.empty()) return {{"error", error}};
    json cs = json::array();
    int completion = 0;
    int64_t proposed = 0, accepted = 0;
    for (size_t i = 0; i < choices.size(); ++i) {
      const Choice& c = choices[i];
      json j = {{"index", i}, {"text", c.text}, {"token_ids", c.tokens}, {"finish_reason", c.finish_reason}};
      if (!c.stop_reason.empty()) j["stop_reason"] = c.stop_reason;
      proposed += c.spec_proposed;
      accepted += c.spec_accepted;
      if (with_logprobs) j["logprobs"] = LogprobsJson(c.logprobs);
      completion += static_cast<int>(c.tokens.size());
      cs.push_back(std::move(j));
    }
    json out = cs[0];
    out.erase("index");
    out["choices"] = cs;
    out["usage"] = {{"prompt_tokens", prompt_tokens}, {"completion_tokens", completion},
                    {"total_tokens", prompt_tokens + completion}, {"cached_tokens", cached_tokens},
                    {"replayed_tokens", replayed_tokens}};
    if (!g_spec_method.empty()) out["speculative"] = SpeculativeJson(proposed, accepted);
    return out;
  }
};

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

GenerationParams DefaultsFromArgs(const Args& args) {
  GenerationParams p;
  p.max_tokens = static_cast<int>(args.GetInt("n-predict"));
  p.ignore_eos = args.Has("ignore-eos");
  p.temperature = static_cast<float>(args.GetFloat("temp"));
  p.top_k = static_cast<int>(args.GetInt("top-k"));
  p.top_p = static_cast<float>(args.GetFloat("top-p"));
  p.min_p = static_cast<float>(args.GetFloat("min-p"));
  if (args.Has("seed")) p.seed = static_cast<uint64_t>(args.GetInt("seed"));
  return p;
}

// The --output file, written in input order as results finish: each line goes out as soon as it and every
// line before it are done, and is fsynced about once a second, so a killed batch keeps every finished prefix
// line. --resume reads back the lines an earlier run completed (a torn last line is cut off).
class BatchOutput {
 public:
  ~BatchOutput() {
    if (fd_ > 1) ::close(fd_);
  }
  // path "-": stdout. `resume`: keep the complete lines already there; *done_lines says how many.
  Status Open(const std::string& path, bool resume, size_t* done_lines) {
    *done_lines = 0;
    if (path.empty() || path == "-") {
      if (resume) return InvalidArgument("--resume needs --output FILE");
      fd_ = 1;
      return Status::Ok();
    }
    off_t keep = 0;
    if (resume) {
      std::ifstream in(path, std::ios::binary);
      std::string line;
      // Only lines that end in a newline and parse are results; a torn last line is redone.
      while (in && std::getline(in, line)) {
        if (in.eof() || json::parse(line, nullptr, false).is_discarded()) break;
        keep += static_cast<off_t>(line.size() + 1);
        ++*done_lines;
      }
    }
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) return IoError(path + ": cannot write: " + std::strerror(errno));
    if (::ftruncate(fd_, keep) != 0 || ::lseek(fd_, keep, SEEK_SET) != keep)
      return IoError(path + ": cannot truncate: " + std::strerror(errno));
    path_ = path;
    return Status::Ok();
  }
  Status Write(const std::string& bytes) {
    for (size_t off = 0; off < bytes.size();) {
      const ssize_t n = ::write(fd_, bytes.data() + off, bytes.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return IoError((path_.empty() ? "stdout" : path_) + ": write failed: " + std::strerror(errno));
      off += static_cast<size_t>(n);
    }
    dirty_ = true;
    return Status::Ok();
  }
  void Sync(bool force) {
    if (!dirty_ || fd_ <= 1) return;
    const auto now = Clock::now();
    if (!force && now - last_sync_ < std::chrono::seconds(1)) return;
    ::fsync(fd_);
    last_sync_ = now;
    dirty_ = false;
  }

 private:
  int fd_ = -1;
  std::string path_;
  bool dirty_ = false;
  Clock::time_point last_sync_ = Clock::now();
};

int RunBatch(const Args& args, const api::Model& model, api::Engine& engine) {
  std::ifstream in(args.Get("input"), std::ios::binary);
  if (!in) return Fail(NotFound(args.Get("input") + ": cannot open"));
  BatchOutput out;
  size_t skip = 0;
  if (Status s = out.Open(args.Get("output"), args.Has("resume"), &skip); !s.ok()) return Fail(s);
  const GenerationParams defaults = DefaultsFromArgs(args);
  std::vector<Collected> results;
  std::vector<bool> want_logprobs;
  std::string line;
  int line_no = 0, bad = 0;
  size_t skipped = 0;
  std::vector<size_t> unstarted;  // results whose engine requests are added below
  std::vector<api::Request> requests;
  std::vector<int> request_lines;  // input line numbers, for error messages
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (skipped < skip) {  // --resume: this line's result is in the file already
      ++skipped;
      continue;
    }
    results.emplace_back();
    want_logprobs.push_back(false);
    Collected& c = results.back();
    auto request = api::RequestFromOpenAiJson(model, line, defaults);
    if (!request.ok()) {
      c.error = "line " + std::to_string(line_no) + ": " + request.status().message();
      ++bad;
      continue;
    }
    want_logprobs.back() = request->params.logprobs >= 0;
    c.choices.resize(request->params.n);
    c.unfinished = request->params.n;
    unstarted.push_back(results.size() - 1);
    requests.push_back(std::move(*request));
    request_lines.push_back(line_no);
  }
  if (skipped < skip)
    return Fail(InvalidArgument("--resume: the output holds " + std::to_string(skip) + " results but the input only " +
                                std::to_string(skipped) + " requests"));
  if (skip) api::Log(api::LogLevel::kInfo, "--resume: %zu lines already done, %zu to go", skip, results.size());
  // Done flags, set by the engine thread once a result is complete and read by this thread, which writes the
  // finished prefix. Sized before any request runs: results never move while the engine is going.
  auto finished = std::make_unique<std::atomic<bool>[]>(results.size());
  for (size_t i = 0; i < results.size(); ++i) finished[i] = !results[i].error.empty();
  for (size_t k = 0; k < requests.size(); ++k) {
    const size_t idx = unstarted[k];
    auto id = engine.Add(std::move(requests[k].prompt), requests[k].params, [&results, &finished, idx](const Output& ev) {
      results[idx].Take(ev);
      if (results[idx].unfinished == 0) finished[idx].store(true, std::memory_order_release);
    });
    if (!id.ok()) {
      results[idx].error = "line " + std::to_string(request_lines[k]) + ": " + id.status().message();
      finished[idx] = true;
      ++bad;
    }
  }
  if (bad)
    api::Log(api::LogLevel::kWarn, "%d of %zu input lines were rejected (their output lines hold the error)", bad,
             results.size());
  // Progress: the engine runs on its own thread; this thread draws the bar and writes the finished prefix.
  const auto t0 = Clock::now();
  api::ProgressBar bar("generate", results.size(), "req");
  std::atomic<bool> done{false};
  Status run;
  std::thread loop([&] {
    run = engine.RunUntilIdle();
    done = true;
  });
  size_t written = 0;
  Status write_status;
  auto write_ready = [&] {
    std::string chunk;
    for (; written < results.size() && finished[written].load(std::memory_order_acquire); ++written) {
      chunk += Dump(results[written].ToJson(want_logprobs[written])) + "\n";
      results[written] = Collected{};  // written: its memory can go
    }
    if (!chunk.empty() && write_status.ok()) write_status = out.Write(chunk);
  };
  while (!done) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const api::EngineStats st = engine.Stats();
    bar.Update(static_cast<uint64_t>(st.requests_finished + st.requests_aborted + bad));
    write_ready();
    out.Sync(false);
  }
  loop.join();
  write_ready();
  out.Sync(true);
  bar.Update(results.size());
  bar.Finish();
  if (!run.ok()) return Fail(run);
  if (!write_status.ok()) return Fail(write_status);
  if (written != results.size()) return Fail(Internal("the engine went idle with unfinished requests"));
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const api::EngineStats st = engine.Stats();
  api::Log(api::LogLevel::kInfo,
           "%zu requests in %.2f s: %lld prompt tokens computed (%lld from the prefix cache), %lld generated "
           "(%.1f tok/s), %lld steps, %lld preemptions",
           results.size(), secs, static_cast<long long>(st.prompt_tokens_computed),
           static_cast<long long>(st.cached_prompt_tokens), static_cast<long long>(st.generated_tokens),
           st.generated_tokens / std::max(1e-9, secs), static_cast<long long>(st.steps),
           static_cast<long long>(st.preemptions));
  Status leaks = engine.Shutdown();
  if (!leaks.ok()) return Fail(leaks);
  return 0;
}

}  // namespace

int CmdGenerate(int argc, char** argv) {
  Args args("generate",
            "Generate text from a prompt (streams to stdout; --json prints one JSON object), or run a JSONL batch:\n"
            "--input holds one OpenAI-style request per line (\"prompt\" string or token ids, or chat \"messages\",\n"
            "\"max_tokens\", \"temperature\", \"top_p\", \"top_k\", \"min_p\", \"seed\", \"stop\", \"n\", \"logprobs\", penalties,\n"
            "\"logit_bias\", ...; the flags below give the defaults), --output receives one JSON line per input line\n"
            "in input order: {\"text\", \"token_ids\", \"finish_reason\", \"choices\", \"usage\"} or {\"error\"}.",
            {
                {"model", "m", "MODEL", "", "GGUF file, HF model directory or hub reference owner/name[:file]"},
                {"prompt", "p", "TEXT", "", "prompt text (default: start from BOS alone)"},
                {"file", "f", "FILE", "", "read the prompt from a file"},
                {"input", "", "FILE", "", "JSONL batch of requests (one per line)"},
                {"output", "o", "FILE", "-", "where --input results go (- = stdout), each line as soon as it and all before it are done"},
                {"resume", "", "", "", "with --input/--output: keep the results already in --output and run only the lines after them"},
                {"n-predict", "n", "N", "128", "maximum number of tokens to generate"},
                {"temp", "", "T", "0.8", "sampling temperature; 0 = greedy"},
                {"top-k", "", "K", "40", "keep the K most likely tokens; 0 = off"},
                {"top-p", "", "P", "0.95", "nucleus sampling: smallest set with probability mass >= P; 1 = off"},
                {"min-p", "", "P", "0.05", "drop tokens below P x the top probability; 0 = off"},
                {"seed", "s", "S", "random", "sampling seed (same seed, same output)"},
                {"ignore-eos", "", "", "", "keep generating past end-of-generation tokens"},
                {"no-bos", "", "", "", "do not add BOS even if the tokenizer asks for it"},
                {"json", "", "", "", "print {\"text\", \"token_ids\", \"finish_reason\", \"usage\", \"timings\"} as one JSON object"},
                {"quiet", "q", "", "", "only errors on stderr"},
                DI_ENGINE_FLAGS,
                DI_PARALLEL_FLAGS,
                DI_WEIGHT_FLAGS,
            });
  if (auto exit_code = ParseCommandLine(args, argc, argv)) return *exit_code;
  ApplyLogFlags(args);
  api::EngineOptions eo;
  if (Status s = EngineOptionsFromArgs(args, &eo); !s.ok()) return Fail(s);
  if (args.Has("input") && (args.Has("prompt") || args.Has("file")))
    return Fail(InvalidArgument("--input cannot be combined with -p/-f"));
  if (Status s = SetupParallel(args); !s.ok()) return Fail(s);
  auto model = OpenModelOrDie(args.Get("model"), ModelOptionsFromArgs(args));
  auto draft_model = OpenDraftModelOrDie(args, &eo);
  if (eo.speculative != api::SpeculativeMethod::kNone) g_spec_method = args.Get("speculative");
  if (Status s = api::CheckSameModelEverywhere(args.Get("model")); !s.ok()) return Fail(s);

  GenerationParams params = DefaultsFromArgs(args);
  if (Status s = params.Validate(model->vocab_size()); !s.ok()) return Fail(s);
  if (!args.Has("input")) eo.max_num_seqs = std::min(eo.max_num_seqs, 4);  // one request: no need for 64 slots
  auto engine_or = api::Engine::Create(*model, eo);
  if (!engine_or.ok()) return Fail(engine_or.status());
  api::Engine& engine = **engine_or;
  if (api::WorldRank() != 0) {
    // Under mpirun rank 0 owns the prompts and the output; the other ranks step with it until it is done.
    if (Status s = engine.RunUntilIdle(); !s.ok()) return Fail(s);
    Status leaks = engine.Shutdown();
    return leaks.ok() ? 0 : Fail(leaks);
  }
  if (args.Has("input")) return RunBatch(args, *model, engine);

  std::string prompt = args.Get("prompt");
  if (args.Has("file")) {
    std::ifstream in(args.Get("file"), std::ios::binary);
    if (!in) return Fail(NotFound(args.Get("file") + ": cannot open"));
    std::stringstream ss;
    ss << in.rdbuf();
    prompt = ss.str();
  }
  std::vector<int32_t> ids = args.Has("no-bos") ? model->Encode(prompt, false) : model->EncodePrompt(prompt);
  if (ids.empty()) return Fail(InvalidArgument("empty prompt and the tokenizer has no BOS token"));
  if (!params.seed) params.seed = std::random_device{}();  // reported in --json so a run can be repeated
  // -n larger than the context: generate until the context is full (finish_reason "length").
  params.max_tokens = std::max(1, params.max_tokens);
  const bool json_out = args.Has("json");
  if (!json_out) {
    std::fputs(prompt.c_str(), stdout);
    std::fflush(stdout);
  }
  Collected res;
  res.choices.resize(1);
  res.unfinished = 1;
  const auto t0 = Clock::now();
  Clock::time_point t_first;
  const uint64_t seed = *params.seed;
  const size_t n_prompt = ids.size();
  const std::vector<int32_t> prompt_ids = ids;  // reported in --json
  auto id = engine.Add(std::move(ids), params, [&](const Output& ev) {
    if (res.choices[0].tokens.empty() && !ev.token_ids.empty()) t_first = Clock::now();
    res.Take(ev);
    if (!json_out && !ev.text.empty()) {
      std::fwrite(ev.text.data(), 1, ev.text.size(), stdout);
      std::fflush(stdout);
    }
  });
  if (!id.ok()) return Fail(id.status());
  if (Status s = engine.RunUntilIdle(); !s.ok()) return Fail(s);
  const auto t_end = Clock::now();
  const Choice& c = res.choices[0];
  const double prefill_s = std::chrono::duration<double>(t_first - t0).count();
  const double decode_s = std::chrono::duration<double>(t_end - t_first).count();
  const double dec_tps = c.tokens.size() > 1 ? (c.tokens.size() - 1) / std::max(1e-9, decode_s) : 0;
  const double pre_tps = n_prompt / std::max(1e-9, prefill_s);
  if (json_out) {
    json out = {{"text", c.text},
                {"token_ids", c.tokens},
                {"finish_reason", c.finish_reason},
                {"prompt_token_ids", prompt_ids},
                {"seed", seed},
                {"usage", {{"prompt_tokens", n_prompt}, {"completion_tokens", c.tokens.size()}}},
                {"timings", {{"prefill_seconds", prefill_s}, {"decode_seconds", decode_s},
                             {"prefill_tokens_per_second", pre_tps}, {"decode_tokens_per_second", dec_tps}}}};
    if (!g_spec_method.empty()) out["speculative"] = SpeculativeJson(c.spec_proposed, c.spec_accepted);
    std::printf("%s\n", Dump(out).c_str());
  } else {
    std::printf("\n");
    std::fflush(stdout);
    api::Log(api::LogLevel::kInfo, "prompt %zu tokens (%.1f tok/s), generated %zu tokens (%.1f tok/s), finish_reason=%s",
             n_prompt, pre_tps, c.tokens.size(), dec_tps, c.finish_reason.c_str());
    if (!g_spec_method.empty())
      api::Log(api::LogLevel::kInfo, "speculative (%s): %lld drafts proposed, %lld accepted (%.1f%%)",
               g_spec_method.c_str(), static_cast<long long>(c.spec_proposed), static_cast<long long>(c.spec_accepted),
               c.spec_proposed ? 100.0 * c.spec_accepted / c.spec_proposed : 0.0);
  }
  Status leaks = engine.Shutdown();
  if (!leaks.ok()) return Fail(leaks);
  return 0;
}

}  // namespace deepinfer::cli
