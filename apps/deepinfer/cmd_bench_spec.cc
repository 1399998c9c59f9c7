// deepinfer bench spec: speculative decoding against plain decoding in the same run, at several batch sizes,
// with llama.cpp's own speculative decoding (node-llama-cpp's input-lookup and draft-sequence token predictors,
// tools/ref/llama_spec.mjs) as the peer. Reports acceptance, mean accepted length, tokens/s, the speedup, and
// the speedup the measured acceptance predicts (Leviathan et al.: E = (1 - a^(k+1)) / (1 - a) tokens per target
// pass, divided by the cost of the pass plus k draft steps).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "args.h"
#include "base/thread_pool.h"
#include "commands.h"
#include "engine/engine.h"
#include "engine_flags.h"

namespace deepinfer::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Story openings: the n-gram proposer needs text whose continuation repeats earlier tokens, as real outputs do.
const char* const kPrompts[] = {
    "Once upon a time, there was a little girl named Lily. She loved to play in the park with her dog.",
    "Tom had a big red ball. He liked to throw the ball to his friend Sam. One day, the ball went into the pond.",
    "The sun was shining and the birds were singing. Mia and her mom went to the store to buy some milk.",
    "There was a small cat who lived in a big house. The cat liked to sleep on the soft bed all day.",
    "Ben and Anna were best friends. They played with blocks and built a tall tower. Then the tower fell down.",
    "One day, a little bird found a shiny stone. The bird wanted to show the stone to all its friends.",
    "Lucy had a new toy car. It was blue and fast. She raced the car around the room with her brother.",
    "In a small town, there lived a kind old man. Every morning he walked to the bakery to buy bread.",
};

struct Measured {
  double tokens_per_s = 0, seconds = 0;
  int64_t tokens = 0, drafts = 0, proposed = 0, accepted = 0, steps = 0;
  std::vector<std::vector<int32_t>> outputs;
};

Measured Run(const Model& m, const EngineOptions& o, const std::vector<std::vector<int32_t>>& prompts, int n_gen,
             float temperature) {
  Measured r;
  auto e = Engine::Create(m, o);
  if (!e.ok()) {
    std::fprintf(stderr, "error: %s\n", e.status().ToString().c_str());
    std::exit(1);
  }
  RequestParams p;
  p.max_tokens = n_gen;
  p.ignore_eos = true;
  p.seed = 0;
  p.temperature = temperature;
  // Warm-up (weights paged in, pool spun up).
  (void)(*e)->Add(prompts[0], [&] { RequestParams w = p; w.max_tokens = 4; return w; }(), nullptr);
  (void)(*e)->RunUntilIdle();
  const EngineStats before = (*e)->Stats();
  r.outputs.resize(prompts.size());
  const auto t0 = Clock::now();
  for (size_t i = 0; i < prompts.size(); ++i)
    (void)(*e)->Add(prompts[i], [&] { RequestParams q = p; q.seed = 1000 + i; return q; }(), [&r, i](const RequestOutput& ev) {
      r.outputs[i].insert(r.outputs[i].end(), ev.token_ids.begin(), ev.token_ids.end());
    });
  (void)(*e)->RunUntilIdle();
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const EngineStats st = (*e)->Stats();
  r.tokens = st.generated_tokens - before.generated_tokens;
  r.tokens_per_s = r.tokens / r.seconds;
  r.steps = st.steps - before.steps;
  r.drafts = st.spec_drafts - before.spec_drafts;
  r.proposed = st.spec_draft_tokens - before.spec_draft_tokens;
  r.accepted = st.spec_accepted_tokens - before.spec_accepted_tokens;
  if (Status s = (*e)->Shutdown(); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    std::exit(1);
  }
  return r;
}

std::vector<int> ParseInts(const std::string& s) {
  std::vector<int> v;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) v.push_back(std::stoi(item));
  return v;
}

}  // namespace

int CmdBenchSpec(int argc, char** argv) {
  Args args("bench spec",
            "Speculative decoding vs plain decoding in the same run: C concurrent greedy requests (story prompts, N_GEN\n"
            "tokens each, EOS ignored) with --speculative on and off; acceptance rate, mean accepted length, tokens/s,\n"
            "speedup and the speedup the acceptance predicts. With --peer, llama.cpp's speculative decoding on the same\n"
            "GGUFs (node-llama-cpp input lookup for ngram, a draft sequence for draft) and its plain decoding (greedy only).",
            {
                {"model", "m", "MODEL", "", "target model (GGUF for the llama.cpp comparison)"},
                {"concurrency", "", "LIST", "1,8", "concurrent requests per run"},
                {"n-gen", "n", "N", "128", "generated tokens per request"},
                {"temp", "", "T", "0", "sampling temperature (seeded per request); 0 = greedy"},
                {"draft-cost", "", "C", "measured", "draft step cost / target step cost for the prediction (default: timed for a draft model, 0 for ngram)"},
                {"peer", "", "", "", "also run llama.cpp through node-llama-cpp (ngram and draft)"},
                {"peer-script", "", "FILE", "tools/ref/llama_spec.mjs", "peer runner script"},
                {"out", "", "FILE", "", "write the results as JSON"},
                DI_ENGINE_FLAGS,
                DI_WEIGHT_FLAGS,
            });
  if (auto exit_code = ParseCommandLine(args, argc, argv)) return *exit_code;
  EngineOptions base;
  base.dist = dist::Context();  // under mpirun, the process's communicators (speculation refuses them)
  if (Status s = EngineOptionsFromArgs(args, &base); !s.ok()) return Fail(s);
  if (base.speculative == SpecMethod::kNone) return Fail(InvalidArgument("bench spec needs --speculative"));
  const int threads = args.Has("threads") ? static_cast<int>(args.GetInt("threads")) : DefaultThreadCount();
  SetComputeThreads(threads);
  auto model = LoadModelOrDie(args.Get("model"), LoadOptionsFromArgs(args));
  std::unique_ptr<Model> draft;
  if (args.Has("draft-model")) {
    draft = LoadModelOrDie(args.Get("draft-model"), LoadOptionsFromArgs(args));
    base.draft = draft.get();
  }
  const Model& m = *model;
  if (!m.tokenizer) return Fail(InvalidArgument("bench spec needs a model with a tokenizer (it tokenizes story prompts)"));
  const int n_gen = static_cast<int>(args.GetInt("n-gen"));
  const int k = base.num_speculative_tokens;
  const std::string method = SpecMethodName(base.speculative);
  nlohmann::json runs = nlohmann::json::array();
  std::printf("bench spec: %s, k = %d, %s verification, %d threads, %d tokens per request, temperature %g\n",
              method.c_str(), k, SpecVerifyName(base.spec_verify), threads, n_gen, args.GetFloat("temp"));
  std::printf("%5s | %9s %9s %7s %8s %8s | %9s %8s %9s | %10s %10s %8s\n", "conc", "plain t/s", "spec t/s", "speedup",
              "accept", "acc len", "E tok/ps", "predict", "identical", "llama t/s", "llama spec", "ratio");
  for (int c : ParseInts(args.Get("concurrency"))) {
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < c; ++i) prompts.push_back(m.tokenizer->Encode(kPrompts[i % std::size(kPrompts)], m.tokenizer->add_bos()));
    EngineOptions plain = base, spec = base;
    plain.speculative = SpecMethod::kNone;
    for (EngineOptions* o : {&plain, &spec}) {
      o->max_num_seqs = std::max(c, 1);
      o->prefix_caching = false;
      o->max_model_len = std::min(m.config.max_ctx, 256 + n_gen + 2 * kMaxSpecTokens);
    }
    const float temp = static_cast<float>(args.GetFloat("temp"));
    const Measured a = Run(m, plain, prompts, n_gen, temp);
    const Measured b = Run(m, spec, prompts, n_gen, temp);
    const bool identical = a.outputs == b.outputs;
    const double alpha = b.proposed ? static_cast<double>(b.accepted) / b.proposed : 0;
    const double acc_len = b.drafts ? static_cast<double>(b.accepted) / b.drafts : 0;
    // Leviathan et al.: with per-token acceptance alpha, a verify pass yields E tokens; it costs 1 + k * cost.
    // k as proposed: the n-gram proposer may find fewer than k drafts (or none) for a row.
    const double k_eff = b.drafts ? static_cast<double>(b.proposed) / b.drafts : k;
    const double e_tokens = alpha < 1 ? (1 - std::pow(alpha, k_eff + 1)) / (1 - alpha) : k_eff + 1;
    double cost = 0;
    if (args.Has("draft-cost")) {
      cost = args.GetFloat("draft-cost");
    } else if (draft) {
      const Measured d = Run(*draft, plain, prompts, std::min(n_gen, 64), temp);
      cost = a.tokens_per_s / d.tokens_per_s;
    }
    const double predicted = e_tokens / (1 + k_eff * cost);
    nlohmann::json run = {{"concurrency", c}, {"plain_tokens_per_s", a.tokens_per_s}, {"spec_tokens_per_s", b.tokens_per_s},
                          {"speedup", b.tokens_per_s / a.tokens_per_s}, {"acceptance_rate", alpha},
                          {"mean_accepted_length", acc_len}, {"verify_rows", b.drafts}, {"proposed", b.proposed},
                          {"accepted", b.accepted}, {"tokens_per_target_pass", e_tokens}, {"drafts_per_row", k_eff}, {"draft_cost", cost},
                          {"predicted_speedup", predicted}, {"identical_outputs", identical},
                          {"plain_steps", a.steps}, {"spec_steps", b.steps}};
    // llama.cpp: plain, then its speculative decoding (input lookup for ngram; for a draft model both
    // node-llama-cpp's DraftSequenceTokenPredictor and a plain draft-verify loop, since the predictor accepts at
    // most one draft per verify batch in node-llama-cpp 3.21.1: see tools/ref/llama_spec.mjs). The best counts.
    std::string peer_plain = "-", peer_spec = "-", ratio = "-";
    if (args.Has("peer") && m.format == "gguf" && base.speculative != SpecMethod::kMtp && args.GetFloat("temp") == 0) {
      const std::string pf = "/tmp/deepinfer_bench_spec_prompts.json";
      std::ofstream(pf) << nlohmann::json(prompts).dump() << "\n";
      auto call = [&](const std::string& how) {
        std::string cmd = "'" + args.Get("peer-script") + "' '" + m.source + "' " + std::to_string(threads) + " " + pf +
                          " " + std::to_string(n_gen) + " " + how;
        if (how != "plain") cmd += " '" + (draft ? draft->source : std::string("-")) + "' " + std::to_string(k);
        nlohmann::json j = RunNodeJson(cmd);
        if (j.is_object()) j.erase("tokens");
        return j;
      };
      const nlohmann::json pp = call("plain");
      std::vector<std::string> methods = {"lookup"};
      if (base.speculative == SpecMethod::kDraft) methods = {"draft", "draft-loop"};
      double best = 0;
      for (const std::string& how : methods) {
        const nlohmann::json ps = call(how);
        if (!ps.contains("output_tokens_per_second")) continue;
        run["peer_" + how] = ps;
        best = std::max(best, ps["output_tokens_per_second"].get<double>());
      }
      char buf[64];
      if (pp.contains("output_tokens_per_second")) {
        run["peer_plain"] = pp;
        std::snprintf(buf, sizeof buf, "%.1f", pp["output_tokens_per_second"].get<double>());
        peer_plain = buf;
      }
      if (best > 0) {
        std::snprintf(buf, sizeof buf, "%.1f", best);
        peer_spec = buf;
        std::snprintf(buf, sizeof buf, "%.2fx", b.tokens_per_s / best);
        ratio = buf;
        run["ratio_vs_peer_spec"] = b.tokens_per_s / best;
      } else {
        peer_spec = "failed";
      }
    }
    std::printf("%5d | %9.1f %9.1f %6.2fx %7.1f%% %8.2f | %9.2f %7.2fx %9s | %10s %10s %8s\n", c, a.tokens_per_s,
                b.tokens_per_s, b.tokens_per_s / a.tokens_per_s, 100 * alpha, acc_len, e_tokens, predicted,
                identical ? "yes" : "NO", peer_plain.c_str(), peer_spec.c_str(), ratio.c_str());
    runs.push_back(run);
  }
  if (args.Has("out"))
    std::ofstream(args.Get("out")) << nlohmann::json({{"benchmark", "spec"}, {"method", method}, {"k", k},
                                                      {"verify", SpecVerifyName(base.spec_verify)},
                                                      {"threads", threads}, {"n_gen", n_gen}, {"model", m.source},
                                                      {"runs", runs}}).dump(2)
                                   << "\n";
  return 0;
}

}  // namespace deepinfer::cli
