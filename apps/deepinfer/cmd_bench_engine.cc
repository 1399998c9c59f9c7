// deepinfer bench sim / throughput: the engine loop itself. sim replaces the model with a simulated device of
// fixed step time and sweeps injected host overhead, to show what overlap buys (../shared/research/overlap.md section
// 10). throughput runs the real CPU backend with 1..64 concurrent requests, overlap on and off, with
// llama.cpp batched as llama.cpp batches (tools/ref/llama_batched_ref.cc: same GGUF, same sequences, one
// llama_decode per step) as the peer, prompt and generation rates separately, plus TTFT cold vs prefix hit.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "args.h"
#include "base/thread_pool.h"
#include "engine/request.h"
#include "commands.h"
#include "engine/engine.h"
#include "engine_flags.h"

namespace deepinfer::cli {
namespace {

using Clock = std::chrono::steady_clock;

// A device that takes exactly step_s per step, whatever the batch, and writes a deterministic token per row.
class SimExecutor : public Executor {
 public:
  SimExecutor(TokenTable* table, double step_s, int vocab) : table_(table), step_s_(step_s), vocab_(vocab) {}
  void Execute(WorkerStepState& st) override {
    const auto until = Clock::now() + std::chrono::nanoseconds(static_cast<int64_t>(step_s_ * 1e9));
    // Sleep most of it (leaving the core to the host thread), spin the last 150 us for precision.
    std::this_thread::sleep_until(until - std::chrono::microseconds(150));
    while (Clock::now() < until) {
    }
    st.out.rows.assign(st.sched.rows.size(), SampledToken{});
    for (size_t i = 0; i < st.sched.rows.size(); ++i) {
      const SequenceMetadata& r = st.sched.rows[i];
      if (!r.samples) continue;
      const int pos = r.q_begin + r.q_len;
      st.out.rows[i].token = 1 + (pos * 7 + r.slot) % (vocab_ - 1);
      table_->row(r.slot)[pos] = st.out.rows[i].token;
    }
  }
  int vocab_size() const override { return vocab_; }

 private:
  TokenTable* table_;
  double step_s_;
  int vocab_;
};

std::vector<double> ParseList(const std::string& s) {
  std::vector<double> v;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) v.push_back(std::stod(item));
  return v;
}

struct RunResult {
  double seconds = 0, tokens_per_s = 0, host_ms_per_step = 0, idle_fraction = 0;
  int64_t steps = 0, tokens = 0;
  // The split, defined as llama_batched_ref defines it for the peer: the prompt phase runs until every request
  // has its first token (the last TTFT); prompt tok/s = prompt tokens / that time. Generation: the tokens that
  // came after it over the time after it (with chunked prefill mixing decode rows into prompt steps, a few
  // tokens of early requests fall in the prompt phase and are in neither rate; they are in tokens_per_s).
  double prompt_seconds = 0, prompt_tokens_per_s = 0, gen_seconds = 0, gen_tokens_per_s = 0;
  int64_t gen_tokens = 0;
};

// Submits `prompts`, runs to completion, and measures.
RunResult RunEngine(Engine& e, const std::vector<std::vector<int32_t>>& prompts, int n_gen) {
  RequestParams p;
  p.max_tokens = n_gen;
  p.ignore_eos = true;
  p.seed = 0;  // fixed: every run draws the same tokens
  const EngineStats before = e.Stats();
  e.ResetDeviceCounters();
  // Per request: when its first token came; every token's arrival time (the callback runs on the engine's
  // threads: a mutex, a few hundred ns per event).
  std::mutex mu;
  std::vector<Clock::time_point> first(prompts.size()), arrivals;
  std::vector<char> has_first(prompts.size(), 0);
  arrivals.reserve(prompts.size() * static_cast<size_t>(n_gen));
  int64_t prompt_tokens = 0;
  const auto t0 = Clock::now();
  for (size_t i = 0; i < prompts.size(); ++i) {
    prompt_tokens += static_cast<int64_t>(prompts[i].size());
    (void)e.Add(prompts[i], p, [&, i](const RequestOutput& o) {
      if (o.token_ids.empty()) return;
      const auto now = Clock::now();
      std::lock_guard<std::mutex> lock(mu);
      if (!has_first[i]) has_first[i] = 1, first[i] = now;
      arrivals.insert(arrivals.end(), o.token_ids.size(), now);
    });
  }
  (void)e.RunUntilIdle();
  const auto t_end = Clock::now();
  RunResult r;
  r.seconds = std::chrono::duration<double>(t_end - t0).count();
  Clock::time_point last_first = t0;
  for (size_t i = 0; i < prompts.size(); ++i)
    if (has_first[i]) last_first = std::max(last_first, first[i]);
  r.prompt_seconds = std::chrono::duration<double>(last_first - t0).count();
  r.prompt_tokens_per_s = r.prompt_seconds > 0 ? prompt_tokens / r.prompt_seconds : 0;
  for (const auto& a : arrivals) r.gen_tokens += a > last_first;
  r.gen_seconds = std::chrono::duration<double>(t_end - last_first).count();
  r.gen_tokens_per_s = r.gen_seconds > 0 ? r.gen_tokens / r.gen_seconds : 0;
  const EngineStats st = e.Stats();
  r.steps = st.steps - before.steps;
  r.tokens = st.generated_tokens - before.generated_tokens;
  r.tokens_per_s = r.tokens / r.seconds;
  r.host_ms_per_step = 1e3 * (st.host_seconds - before.host_seconds) / std::max<int64_t>(1, r.steps);
  r.idle_fraction = st.device_idle_seconds / std::max(1e-12, st.device_busy_seconds + st.device_idle_seconds);
  return r;
}

int BenchSim(int argc, char** argv) {
  Args args("bench sim",
            "Overlap scheduler on a simulated device: fixed step time T_d, injected host overhead T_h = ratio x T_d per\n"
            "step. Serial (depth 0) should follow 1/(T_d+T_h); overlapped (depth 1) should hold ~1/T_d while T_h < T_d.",
            {
                {"step-ms", "", "MS", "4", "simulated device time per step (T_d)"},
                {"batch", "", "N", "32", "concurrent sequences (one token each per step)"},
                {"steps", "", "N", "250", "decode steps per run"},
                {"ratios", "", "LIST", "0,0.25,0.5,0.75,0.8,0.9,1,1.5", "host overhead as fractions of T_d"},
                {"out", "", "FILE", "", "write the table as JSON"},
            });
  if (auto exit_code = ParseCommandLine(args, argc, argv)) return *exit_code;
  const double td = args.GetFloat("step-ms") / 1e3;
  const int batch = static_cast<int>(args.GetInt("batch")), steps = static_cast<int>(args.GetInt("steps"));
  ModelConfig c;
  c.vocab_size = 1000;
  c.max_ctx = steps + 64;
  nlohmann::json rows = nlohmann::json::array();
  std::printf("bench sim: T_d = %.2f ms, batch %d, %d steps per run\n", td * 1e3, batch, steps);
  std::printf("%8s %10s | %12s %10s %10s | %12s %10s %10s | %8s\n", "T_h/T_d", "T_h ms", "serial st/s", "1/(Td+Th)",
              "ratio", "overlap st/s", "x 1/T_d", "dev idle", "speedup");
  for (double ratio : ParseList(args.Get("ratios"))) {
    double sps[2], idle[2];
    for (int ov = 0; ov < 2; ++ov) {
      EngineOptions o;
      o.max_num_seqs = batch;
      o.max_batched_tokens = std::max(batch, 64);
      o.num_kv_blocks = batch * ((steps + 64) / 16 + 2);
      o.overlap = ov == 1;
      o.host_overhead_us = ratio * td * 1e6;
      auto e = Engine::CreateWithExecutor(c, nullptr, o, [&](TokenTable* t) { return std::make_unique<SimExecutor>(t, td, 1000); });
      if (!e.ok()) return Fail(e.status());
      std::vector<std::vector<int32_t>> prompts(batch, std::vector<int32_t>{1});
      RunResult r = RunEngine(**e, prompts, steps);
      sps[ov] = r.steps / r.seconds;
      idle[ov] = r.idle_fraction;
      if (Status s = (*e)->Shutdown(); !s.ok()) return Fail(s);
    }
    const double th = ratio * td, serial_model = 1 / (td + th);
    std::printf("%8.2f %10.2f | %12.1f %10.1f %10.3f | %12.1f %10.3f %9.1f%% | %7.2fx\n", ratio, th * 1e3, sps[0],
                serial_model, sps[0] / serial_model, sps[1], sps[1] * td, 100 * idle[1], sps[1] / sps[0]);
    rows.push_back({{"ratio", ratio}, {"t_h_ms", th * 1e3}, {"serial_steps_per_s", sps[0]},
                    {"serial_model_steps_per_s", serial_model}, {"overlap_steps_per_s", sps[1]},
                    {"overlap_fraction_of_1_over_td", sps[1] * td}, {"overlap_device_idle_fraction", idle[1]},
                    {"serial_device_idle_fraction", idle[0]}});
  }
  if (args.Has("out"))
    std::ofstream(args.Get("out")) << nlohmann::json({{"benchmark", "sim"}, {"t_d_ms", td * 1e3}, {"batch", batch}, {"rows", rows}}).dump(2) << "\n";
  return 0;
}

// The legacy peer: node-llama-cpp sequences (tools/ref/llama_throughput.mjs), run only with --peer-script.
nlohmann::json RunPeerThroughputNode(const std::string& script, const std::string& model, int threads, int c, int n_prompt, int n_gen) {
  return RunNodeJson("'" + script + "' '" + model + "' " + std::to_string(threads) + " " + std::to_string(c) + " " +
                     std::to_string(n_prompt) + " " + std::to_string(n_gen));
}

// The batched peer: llama_batched_ref (tools/ref/llama_batched_ref.cc) with C sequences.
std::string PeerCommand(const std::string& bin, const std::string& model, int threads, int c, int n_prompt, int n_gen,
                        const std::string& extra) {
  return "'" + bin + "' '" + model + "' -npl " + std::to_string(c) + " -npp " + std::to_string(n_prompt) + " -ntg " +
         std::to_string(n_gen) + " -t " + std::to_string(threads) + " --json" + (extra.empty() ? "" : " " + extra);
}

// llama_batched_ref next to this binary (the build puts both in build/).
std::string DefaultPeerBin() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "build/llama_batched_ref";
  std::string self(buf, static_cast<size_t>(n));
  const size_t slash = self.rfind('/');
  return (slash == std::string::npos ? std::string(".") : self.substr(0, slash)) + "/llama_batched_ref";
}

std::string Fmt(const char* f, double v) {
  char b[48];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

int BenchThroughput(int argc, char** argv) {
  Args args("bench throughput",
            "Offline throughput of the real CPU engine: C concurrent requests (random N_PROMPT-token prompts, N_GEN greedy\n"
            "tokens each, EOS ignored), overlap on and off; output tokens/s, and the prompt / generation split (prompt\n"
            "phase = until every request has its first token; generation = the tokens after it). Also the host time per\n"
            "step, the device-idle fraction between steps, and TTFT cold vs prefix hit (--prefix-len).\n"
            "With --peer, llama.cpp runs the same GGUF with C sequences batched as llama.cpp batches them\n"
            "(llama_batched_ref, tools/ref/llama_batched_ref.cc, over the libllama node-llama-cpp ships: all prompts in\n"
            "one batch, then one llama_decode per step holding every sequence's next token; llama.cpp's defaults:\n"
            "f16 KV, flash attention auto, KV not unified, n_batch 2048 / n_ubatch 512, the same threads); its exact\n"
            "settings are printed, and the ratios for prompt, generation and total rates separately.",
            {
                {"model", "m", "MODEL", "", "model (GGUF for the llama.cpp comparison)"},
                {"concurrency", "", "LIST", "1,8,32,64", "concurrent requests per run"},
                {"n-prompt", "", "N", "32", "prompt tokens per request"},
                {"n-gen", "n", "N", "64", "generated tokens per request"},
                {"prefix-len", "", "N", "2048", "TTFT test: shared prefix length (0 = skip)"},
                {"peer", "", "", "", "also run llama.cpp (batched: llama_batched_ref, see --peer-bin)"},
                {"peer-bin", "", "FILE", "llama_batched_ref next to this binary",
                 "the batched llama.cpp peer (built by cmake when scripts/setup.sh has installed tools/ref)"},
                {"peer-args", "", "ARGS", "", "extra llama_batched_ref flags, e.g. \"-fa off -ctk f32 -ctv f32 -kvu\" (llama_batched_ref --help)"},
                {"peer-script", "", "FILE", "",
                 "instead of the batched peer, the old node-llama-cpp sequences runner (tools/ref/llama_throughput.mjs; not batched as llama.cpp batches, issue 30)"},
                {"out", "", "FILE", "", "write the results as JSON"},
                DI_ENGINE_FLAGS,
                DI_WEIGHT_FLAGS,
            });
  if (auto exit_code = ParseCommandLine(args, argc, argv)) return *exit_code;
  EngineOptions base;
  base.dist = dist::Context();  // under mpirun, the process's communicators
  if (Status s = EngineOptionsFromArgs(args, &base); !s.ok()) return Fail(s);
  const int threads = args.Has("threads") ? static_cast<int>(args.GetInt("threads")) : DefaultThreadCount();
  SetComputeThreads(threads);
  auto model = LoadModelOrDie(args.Get("model"), LoadOptionsFromArgs(args));
  const Model& m = *model;
  const int n_prompt = static_cast<int>(args.GetInt("n-prompt")), n_gen = static_cast<int>(args.GetInt("n-gen"));
  const bool node_peer = args.Has("peer-script");
  const std::string peer_bin = args.Has("peer-bin") ? args.Get("peer-bin") : DefaultPeerBin();
  if (args.Has("peer") && m.format == "gguf" && !node_peer && access(peer_bin.c_str(), X_OK) != 0)
    return Fail(NotFound("--peer: " + peer_bin + " not found (run scripts/setup.sh, then cmake --build build; or give --peer-bin)"));
  std::mt19937 rng(17);
  auto random_prompt = [&](int n) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(m.config.vocab_size));
    return t;
  };
  nlohmann::json runs = nlohmann::json::array();
  std::printf("bench throughput: %d threads, prompt %d, gen %d\n", threads, n_prompt, n_gen);
  if (args.Has("peer") && m.format != "gguf") std::printf("peer: skipped (llama.cpp needs a GGUF model)\n");
  std::printf("%6s | %12s %10s %9s | %12s %10s %9s | %12s %8s\n", "conc", "overlap t/s", "host ms/st", "dev idle",
              "serial t/s", "host ms/st", "dev idle", "llama.cpp", "ratio");
  std::string peer_settings;
  std::vector<std::string> split_rows;
  for (double cd : ParseList(args.Get("concurrency"))) {
    const int c = static_cast<int>(cd);
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < c; ++i) prompts.push_back(random_prompt(n_prompt));
    RunResult r[2];
    for (int ov = 1; ov >= 0; --ov) {
      EngineOptions o = base;
      o.max_num_seqs = std::max(c, 1);
      o.prefix_caching = false;  // random prompts: nothing to share; keeps the comparison about batching
      o.overlap = ov == 1;
      o.max_model_len = n_prompt + n_gen + 8;
      auto e = Engine::Create(m, o);
      if (!e.ok()) return Fail(e.status());
      RunEngine(**e, {prompts[0]}, 2);  // warm-up: page in weights, spin up the pool
      r[ov] = RunEngine(**e, prompts, n_gen);
      if (Status s = (*e)->Shutdown(); !s.ok()) return Fail(s);
    }
    auto split_json = [](const RunResult& x) {
      return nlohmann::json{{"prompt_seconds", x.prompt_seconds}, {"prompt_tokens_per_s", x.prompt_tokens_per_s},
                            {"gen_seconds", x.gen_seconds}, {"gen_tokens", x.gen_tokens}, {"gen_tokens_per_s", x.gen_tokens_per_s}};
    };
    nlohmann::json run = {{"concurrency", c},
                          {"overlap", {{"tokens_per_s", r[1].tokens_per_s}, {"host_ms_per_step", r[1].host_ms_per_step},
                                       {"device_idle_fraction", r[1].idle_fraction}, {"steps", r[1].steps},
                                       {"split", split_json(r[1])}}},
                          {"serial", {{"tokens_per_s", r[0].tokens_per_s}, {"host_ms_per_step", r[0].host_ms_per_step},
                                      {"device_idle_fraction", r[0].idle_fraction}, {"steps", r[0].steps},
                                      {"split", split_json(r[0])}}}};
    std::string peer_s = "-", ratio_s = "-";
    // The split row: deepinfer (overlap run) vs the peer.
    std::string split = Fmt("%6.0f", c) + " | " + Fmt("%12.1f", r[1].prompt_tokens_per_s) + " " + Fmt("%10.1f", r[1].gen_tokens_per_s) +
                        " " + Fmt("%10.1f", r[1].tokens_per_s);
    if (args.Has("peer") && m.format == "gguf") {
      nlohmann::json peer;
      std::string cmd;
      if (node_peer) {
        peer = RunPeerThroughputNode(args.Get("peer-script"), m.source, threads, c, n_prompt, n_gen);
      } else {
        cmd = PeerCommand(peer_bin, m.source, threads, c, n_prompt, n_gen, args.Get("peer-args"));
        peer = RunJsonCommand(cmd, /*keep_stderr=*/true);
      }
      if (!peer.is_null() && peer.contains("output_tokens_per_second")) {
        const double pt = peer["output_tokens_per_second"].get<double>();
        run["peer"] = peer;
        if (!cmd.empty()) run["peer_command"] = cmd;
        run["ratio_vs_peer"] = r[1].tokens_per_s / pt;
        peer_s = Fmt("%.1f", pt);
        ratio_s = Fmt("%.2fx", r[1].tokens_per_s / pt);
        if (peer.contains("prompt_tokens_per_second") && peer.contains("gen_tokens_per_second")) {
          const double pp = peer["prompt_tokens_per_second"].get<double>(), pg = peer["gen_tokens_per_second"].get<double>();
          run["ratio_prompt_vs_peer"] = pp > 0 ? r[1].prompt_tokens_per_s / pp : 0.0;
          run["ratio_gen_vs_peer"] = pg > 0 ? r[1].gen_tokens_per_s / pg : 0.0;
          split += " | " + Fmt("%12.1f", pp) + " " + Fmt("%10.1f", pg) + " " + Fmt("%10.1f", pt) + " | " +
                   Fmt("%8.2fx", pp > 0 ? r[1].prompt_tokens_per_s / pp : 0.0) + " " +
                   Fmt("%8.2fx", pg > 0 ? r[1].gen_tokens_per_s / pg : 0.0) + " " + Fmt("%8.2fx", r[1].tokens_per_s / pt);
          if (peer_settings.empty() && peer.contains("settings_text")) peer_settings = peer["settings_text"].get<std::string>();
        } else {
          split += " | (the node-llama-cpp peer reports output tok/s only)";
        }
      } else {
        peer_s = "failed";
        split += " | peer failed" + (cmd.empty() ? std::string() : ": " + cmd);
      }
    }
    split_rows.push_back(split);
    std::printf("%6d | %12.1f %10.3f %8.2f%% | %12.1f %10.3f %8.2f%% | %12s %8s\n", c, r[1].tokens_per_s,
                r[1].host_ms_per_step, 100 * r[1].idle_fraction, r[0].tokens_per_s, r[0].host_ms_per_step,
                100 * r[0].idle_fraction, peer_s.c_str(), ratio_s.c_str());
    std::fflush(stdout);
    runs.push_back(run);
  }
  // Prompt and generation rates separately (deepinfer: the overlap runs above).
  std::printf("\nprompt / generation split (prompt phase = until every request has its first token; generation = after it):\n");
  std::printf("%6s | %12s %10s %10s | %12s %10s %10s | %9s %9s %9s\n", "conc", "di prompt", "di gen", "di out",
              "llama prompt", "llama gen", "llama out", "x prompt", "x gen", "x out");
  for (const auto& row : split_rows) std::printf("%s\n", row.c_str());
  if (!peer_settings.empty()) std::printf("llama.cpp peer settings: %s\n", peer_settings.c_str());
  else if (args.Has("peer") && node_peer) std::printf("llama.cpp peer: node-llama-cpp sequences (%s)\n", args.Get("peer-script").c_str());
  nlohmann::json result = {{"benchmark", "throughput"}, {"threads", threads}, {"n_prompt", n_prompt}, {"n_gen", n_gen}, {"runs", runs}};
  const int prefix = static_cast<int>(args.GetInt("prefix-len"));
  if (prefix > 0) {
    EngineOptions o = base;
    o.max_model_len = std::min(m.config.max_ctx, prefix + 64);
    if (prefix + 32 > o.max_model_len) {
      std::printf("TTFT: skipped (the model's context %d is shorter than --prefix-len)\n", m.config.max_ctx);
    } else {
      auto e = Engine::Create(m, o);
      if (!e.ok()) return Fail(e.status());
      const auto shared = random_prompt(prefix);
      auto ttft = [&](std::vector<int32_t> prompt) {
        RequestParams p;
        p.max_tokens = 1;
        const auto t0 = Clock::now();
        (void)(*e)->Add(std::move(prompt), p, nullptr);
        (void)(*e)->RunUntilIdle();
        return std::chrono::duration<double>(Clock::now() - t0).count();
      };
      auto with_suffix = [&](int seed) {
        auto p = shared;
        std::mt19937 r2(seed);
        for (int i = 0; i < 16; ++i) p.push_back(static_cast<int32_t>(r2() % m.config.vocab_size));
        return p;
      };
      const double cold = ttft(with_suffix(1));
      const double hit = ttft(with_suffix(2));  // same prefix, different question
      std::printf("TTFT with a %d-token shared prefix + 16 new tokens: cold %.1f ms, prefix hit %.1f ms -> %.1fx\n", prefix,
                  cold * 1e3, hit * 1e3, cold / hit);
      result["ttft"] = {{"prefix_len", prefix}, {"cold_ms", cold * 1e3}, {"hit_ms", hit * 1e3}, {"speedup", cold / hit}};
      if (Status s = (*e)->Shutdown(); !s.ok()) return Fail(s);
    }
  }
  if (args.Has("out")) std::ofstream(args.Get("out")) << result.dump(2) << "\n";
  return 0;
}

}  // namespace

int CmdBenchEngine(const std::string& mode, int argc, char** argv) {
  return mode == "sim" ? BenchSim(argc, argv) : BenchThroughput(argc, argv);
}

}  // namespace deepinfer::cli
