// deepinfer bench: decode / prefill throughput with llama.cpp (node-llama-cpp) as the peer in the same run, and
// the memory-bandwidth roofline for decode.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "api/model_impl.h"
#include "args.h"
#include "base/logging.h"
#include "base/thread_pool.h"
#include "commands.h"
#include "deepinfer/deepinfer.h"
#include "engine_flags.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/membw.h"
#include "model/transformer.h"
#include "startup.h"

namespace deepinfer::cli {
namespace {

// Bytes of weights one decode step (batch 1) reads: every dense matrix, the lm_head, and for MoE layers the
// router, the shared experts and experts_used of the routed experts (one token touches only those).
double WeightBytesPerToken(const Model& m) {
  double b = static_cast<double>(m.lm_head.nbytes);
  for (auto& L : m.layers) {
    for (const TensorView* t : L.Matrices()) b += static_cast<double>(t->nbytes);
    if (L.is_moe()) {
      double experts = 0;
      for (size_t e = 0; e < L.moe.gate.size(); ++e)
        experts += static_cast<double>(L.moe.gate[e].nbytes + L.moe.up[e].nbytes + L.moe.down[e].nbytes);
      b += experts * m.config.n_experts_used / m.config.n_experts;
    }
  }
  return b;
}

// Multiply-adds per token in the matmuls (routed experts: the ones a token uses), for prefill GFLOP/s.
double MatmulParams(const Model& m) {
  double p = static_cast<double>(m.lm_head.numel());
  for (auto& L : m.layers) {
    for (const TensorView* t : L.Matrices())
      if (t->data) p += static_cast<double>(t->numel());
    if (L.is_moe())
      p += static_cast<double>(L.moe.gate[0].numel() + L.moe.up[0].numel() + L.moe.down[0].numel()) * m.config.n_experts_used;
  }
  return p;
}

// Batch-1 decode tokens/s through the engine, one figure per rep: one greedy request of a 16-token prompt, EOS
// ignored. Decode time runs from the first generated token's event to the last one's, so it excludes the prefill.
StatusOr<std::vector<double>> DecodeTokensPerSecond(const api::Model& model, const std::vector<int32_t>& prompt,
                                                    int n_gen, int reps) {
  api::EngineOptions eo;
  eo.max_num_seqs = 1;
  eo.max_model_len = static_cast<int>(prompt.size()) + n_gen + 1;
  eo.prefix_caching = false;  // every rep prefills the same prompt: keep them alike
  DI_ASSIGN_OR_RETURN(std::unique_ptr<api::Engine> engine, api::Engine::Create(model, eo));
  api::GenerationParams p;
  p.max_tokens = n_gen;
  p.ignore_eos = true;
  p.seed = 0;
  std::vector<double> runs;
  for (int r = 0; r < reps; ++r) {
    using Clock = std::chrono::steady_clock;
    Clock::time_point t_first, t_last;
    size_t tokens = 0;
    auto id = engine->Add(prompt, p, [&](const api::Output& o) {
      if (o.token_ids.empty()) return;
      if (tokens == 0) t_first = Clock::now();
      tokens += o.token_ids.size();
      t_last = Clock::now();
    });
    if (!id.ok()) return id.status();
    DI_RETURN_IF_ERROR(engine->RunUntilIdle());
    if (tokens < 2) return Internal("decode benchmark: the engine generated " + std::to_string(tokens) + " tokens");
    runs.push_back((tokens - 1) / std::chrono::duration<double>(t_last - t_first).count());
  }
  DI_RETURN_IF_ERROR(engine->Shutdown());
  return runs;
}

std::vector<int32_t> RandomTokens(int n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  return t;
}

double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * (v.size() - 1) + 0.5)];
}

// --vs: the decode of `m` and of a second model alternate, a rep of each in turn (after one warm-up rep each), and
// their streamed weight rates are compared pair by pair, so the ratio holds while a shared host's bandwidth
// drifts (what "of bf16's rate" means in docs/benchmarks.md).
int DecodeVs(const Args& args, const api::Model& model, const Model& m, int n_gen, int reps, nlohmann::json* result) {
  auto other = OpenModelOrDie(args.Get("vs"), ModelOptionsFromArgs(args));
  const Model& o = api::InternalModel(*other);
  const double bytes_a = WeightBytesPerToken(m), bytes_b = WeightBytesPerToken(o);
  const auto prompt_a = RandomTokens(16, m.config.vocab_size, 7), prompt_b = RandomTokens(16, o.config.vocab_size, 7);
  std::vector<double> gbs_a, gbs_b, ratio;
  for (int r = -1; r < reps; ++r) {
    auto a = DecodeTokensPerSecond(model, prompt_a, n_gen, 1);
    if (!a.ok()) return Fail(a.status());
    auto b = DecodeTokensPerSecond(*other, prompt_b, n_gen, 1);
    if (!b.ok()) return Fail(b.status());
    if (r < 0) continue;  // warm-up
    gbs_a.push_back((*a)[0] * bytes_a / 1e9);
    gbs_b.push_back((*b)[0] * bytes_b / 1e9);
    ratio.push_back(gbs_a.back() / gbs_b.back());
  }
  const double med_a = Quantile(gbs_a, 0.5), med_b = Quantile(gbs_b, 0.5);
  std::printf("deepinfer decode: %.2f tok/s median of %d, %.2f GB/s of weights (%.2f GB/token)\n", med_a / bytes_a * 1e9, reps,
              med_a, bytes_a / 1e9);
  std::printf("--vs %s: %.2f tok/s median, %.2f GB/s of weights (%.2f GB/token)\n", args.Get("vs").c_str(),
              med_b / bytes_b * 1e9, med_b, bytes_b / 1e9);
  std::printf("streamed GB/s ratio, pair by pair: median %.3f (quartiles %.3f, %.3f; %d pairs)\n", Quantile(ratio, 0.5),
              Quantile(ratio, 0.25), Quantile(ratio, 0.75), reps);
  result->update({{"tokens_per_second", med_a / bytes_a * 1e9}, {"weight_bytes_per_token", bytes_a}, {"weight_gbs", gbs_a},
                  {"vs", {{"model", args.Get("vs")}, {"weight_bytes_per_token", bytes_b}, {"weight_gbs", gbs_b}}},
                  {"gbs_ratio", ratio}, {"gbs_ratio_median", Quantile(ratio, 0.5)}});
  return 0;
}

}  // namespace

nlohmann::json RunJsonCommand(const std::string& cmd, bool keep_stderr) {
  FILE* p = popen((cmd + (keep_stderr ? "" : " 2>/dev/null")).c_str(), "r");
  if (!p) return nullptr;
  std::string out;
  char buf[4096];
  for (size_t k; (k = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, k);
  if (pclose(p) != 0) return nullptr;
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  const size_t nl = out.rfind('\n');
  auto j = nlohmann::json::parse(nl == std::string::npos ? out : out.substr(nl + 1), nullptr, false);
  if (j.is_discarded()) j = nlohmann::json::parse(out, nullptr, false);  // a multi-line JSON document
  return j.is_discarded() ? nullptr : j;
}

nlohmann::json RunNodeJson(const std::string& args) { return RunJsonCommand("node " + args); }

namespace {

// Runs the llama.cpp peer script for decode/prefill; null when it is unavailable.
nlohmann::json RunPeer(const std::string& script, const std::string& mode, const std::string& model, int threads, int n, int prompt) {
  return RunNodeJson("'" + script + "' " + mode + " '" + model + "' " + std::to_string(threads) + " " + std::to_string(n) + " " +
                     std::to_string(prompt));
}

// Single-thread encode and decode throughput over a document set (the tokenizer cache starts cold each rep).
int BenchTokenize(const Args& args) {
  std::ifstream in(args.Get("input"));
  if (!in) return Fail(NotFound("--input " + args.Get("input") + ": cannot open"));
  std::vector<std::string> docs;
  size_t bytes = 0;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_string()) return Fail(InvalidArgument("--input: each line must be a JSON string"));
    docs.push_back(j.get<std::string>());
    bytes += docs.back().size();
  }
  const std::string t = args.Get("tokenizer");
  const int reps = std::max<int>(1, static_cast<int>(args.GetInt("reps")));
  double best_enc = 1e30, best_dec = 1e30;
  size_t tokens = 0;
  for (int r = 0; r < reps; ++r) {
    auto tok = TokenizerFromPath(t);
    if (!tok.ok()) return Fail(tok.status());
    std::vector<std::vector<int32_t>> ids(docs.size());
    auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < docs.size(); ++i) ids[i] = (*tok)->Encode(docs[i], false);
    auto t1 = std::chrono::steady_clock::now();
    size_t out_bytes = 0;
    for (auto& v : ids) out_bytes += (*tok)->Decode(v, false).size();
    auto t2 = std::chrono::steady_clock::now();
    tokens = 0;
    for (auto& v : ids) tokens += v.size();
    best_enc = std::min(best_enc, std::chrono::duration<double>(t1 - t0).count());
    best_dec = std::min(best_dec, std::chrono::duration<double>(t2 - t1).count());
    if (out_bytes == 0) return Fail(Internal("decode produced nothing"));
  }
  std::printf("deepinfer tokenize: %zu docs, %.2f MB, %zu tokens: encode %.2f MB/s (%.0f tokens/s), decode %.2f MB/s\n", docs.size(),
              bytes / 1e6, tokens, bytes / 1e6 / best_enc, tokens / best_enc, bytes / 1e6 / best_dec);
  if (args.Has("out"))
    std::ofstream(args.Get("out")) << nlohmann::json({{"benchmark", "tokenize"}, {"bytes", bytes}, {"tokens", tokens},
                                                       {"encode_mb_per_s", bytes / 1e6 / best_enc},
                                                       {"encode_tokens_per_s", tokens / best_enc},
                                                       {"decode_mb_per_s", bytes / 1e6 / best_dec}})
                                          .dump(2)
                                   << "\n";
  return 0;
}

}  // namespace

int CmdBench(int argc, char** argv) {
  if (argc >= 1 && std::string(argv[0]) == "serve") return CmdBenchServe(argc - 1, argv + 1);
  if (argc >= 1 && std::string(argv[0]) == "layers") return CmdBenchLayers(argc - 1, argv + 1);
  if (argc >= 1 && std::string(argv[0]) == "grammar") return CmdBenchGrammar(argc - 1, argv + 1);
  if (argc >= 1 && std::string(argv[0]) == "spec") return CmdBenchSpec(argc - 1, argv + 1);
  if (argc >= 1 && std::string(argv[0]) == "kv") return CmdBenchKv(argc - 1, argv + 1);
  if (argc >= 1 && (std::string(argv[0]) == "sim" || std::string(argv[0]) == "throughput"))
    return CmdBenchEngine(argv[0], argc - 1, argv + 1);
  Args args("bench",
            "Benchmarks. decode: batch-1 tokens/s after a short prompt, with the memory-bandwidth roofline. prefill: tokens/s\n"
            "for one long prompt. membw: read bandwidth. With --peer, llama.cpp (node-llama-cpp) runs the same GGUF with the\n"
            "same threads in the same run and the ratio is printed. sim and throughput benchmark the engine (see\n"
            "deepinfer bench sim --help, deepinfer bench throughput --help, deepinfer bench serve --help); layers runs\n"
            "MoE-layer and attention/MLA-decode microbenchmarks (deepinfer bench layers --help); grammar measures\n"
            "structured-output mask and compile times (deepinfer bench grammar --help); spec compares speculative decoding\n"
            "with plain decoding and llama.cpp's (deepinfer bench spec --help); kv prints KV bytes per sequence and\n"
            "concurrency, hybrid vs --swa-full (deepinfer bench kv --help).",
            {
                {"model", "m", "MODEL", "", "model (GGUF for a llama.cpp comparison)"},
                {"threads", "t", "N", "all cores", "compute threads (also the peer's)"},
                {"n-gen", "n", "N", "64", "decode: tokens to generate"},
                {"n-prompt", "", "N", "512", "prefill: prompt length; decode: 16-token prompt"},
                {"kv-cache-dtype", "", "T", "f32", "prefill: K/V element type (f32, bf16, f16), as the engine's flag"},
                {"reps", "r", "N", "3", "repetitions (best is reported; with --vs, pairs and their median)"},
                {"vs", "", "MODEL", "", "decode: alternate with this second model (e.g. the bf16 file) and print the GB/s ratio pair by pair"},
                {"peer", "", "", "", "also run llama.cpp through node-llama-cpp"},
                {"peer-script", "", "FILE", "tools/ref/llama_bench.mjs", "peer runner script"},
                {"out", "", "FILE", "", "write the results as JSON"},
                {"tokenizer", "", "PATH", "", "tokenize: tokenizer to measure (a GGUF, a tokenizer.json file, or its directory)"},
                {"input", "", "FILE", "", "tokenize: documents, one JSON string per line"},
                DI_WEIGHT_FLAGS,
            },
            "{decode|prefill|membw|tokenize|sim|throughput|serve|layers|grammar}");
  if (!args.Parse(argc, argv)) return 2;
  if (args.help_requested() || args.positional().size() != 1) {
    args.PrintHelp();
    return args.help_requested() ? 0 : 2;
  }
  const std::string mode = args.positional()[0];
  if (mode == "tokenize") return BenchTokenize(args);
  if (mode != "decode" && mode != "prefill" && mode != "membw") return Fail(InvalidArgument("unknown benchmark '" + mode + "'"));
  // Checked before the model loads.
  const std::string kv_arg = args.Get("kv-cache-dtype");
  if (Status s = CheckKvCacheDtype(kv_arg); !s.ok()) return Fail(s);
  const DType kv_type = DTypeFromName(kv_arg);
  const int threads = args.Has("threads") ? static_cast<int>(args.GetInt("threads")) : DefaultThreadCount();
  SetComputeThreads(threads);
  const int reps = std::max<int>(1, static_cast<int>(args.GetInt("reps")));
  nlohmann::json result = {{"benchmark", mode}, {"threads", threads}, {"isa", IsaName(ActiveIsa())}};

  std::printf("deepinfer bench %s: %d threads, kernels %s\n", mode.c_str(), threads, IsaName(ActiveIsa()));
  const double bw = MeasureReadBandwidthGBs();
  std::printf("memory read bandwidth: %.2f GB/s\n", bw);
  result["membw_gbs"] = bw;
  if (mode != "membw") {
    const std::string model_arg = args.Get("model");
    auto model = OpenModelOrDie(model_arg, ModelOptionsFromArgs(args));
    const Model& m = api::InternalModel(*model);  // the roofline and prefill read the weights themselves
    const int n_gen = static_cast<int>(args.GetInt("n-gen")), n_prompt = static_cast<int>(args.GetInt("n-prompt"));
    double best = 0;
    if (mode == "decode" && args.Has("vs")) {
      if (int rc = DecodeVs(args, *model, m, n_gen, reps, &result); rc != 0) return rc;
      best = result["tokens_per_second"].get<double>();  // the median, for --peer's ratio
    } else if (mode == "decode") {
      const double bytes = WeightBytesPerToken(m);
      auto tps = DecodeTokensPerSecond(*model, RandomTokens(16, m.config.vocab_size, 7), n_gen, reps);
      if (!tps.ok()) return Fail(tps.status());
      best = *std::max_element(tps->begin(), tps->end());
      const double roof = bw * 1e9 / bytes;
      std::printf("deepinfer decode: %.2f tok/s  (weights %.2f GB/token, roofline %.2f tok/s, %.1f%% of roofline)\n", best, bytes / 1e9,
                  roof, 100 * best / roof);
      result.update({{"tokens_per_second", best}, {"weight_bytes_per_token", bytes}, {"roofline_tokens_per_second", roof},
                     {"roofline_fraction", best / roof}});
    } else {
      Transformer tf(m, 512, nullptr);  // one process
      const auto prompt = RandomTokens(n_prompt, m.config.vocab_size, 11);
      std::vector<float> logits(m.config.vocab_size);
      for (int r = 0; r < reps; ++r) {
        SequenceKvCache kv(m.config.kv_layout(), n_prompt, kv_type);
        auto t0 = std::chrono::steady_clock::now();
        if (Status s = tf.Forward(prompt.data(), n_prompt, 0, kv, logits.data(), false); !s.ok()) return Fail(s);
        best = std::max(best, n_prompt / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      const double gflops = 2 * MatmulParams(m) * best / 1e9;
      // The limit is the peak of the instruction the layers' matmuls run on (the first layer's q projection).
      const DType wt = (m.config.mla ? m.layers[0].mla.wkv_a : m.layers[0].gqa.wq).dtype;
      PeakOp op = PeakOp::kF32Fma;
      if (wt == DType::kBF16 && Kernels().bf16_dot) op = PeakOp::kBf16Dot;
      const bool int8 = wt != DType::kF32 && wt != DType::kF16 && wt != DType::kBF16 && wt != DType::kF8E4M3;
      // Quantized weights run on vpdpbusd only in the AVX-512 table; the AVX2 one has no probe (no limit shown).
      const bool int8_vnni = int8 && DetectCpu().avx512_vnni && ActiveIsa() == Isa::kAvx512;
      if (int8_vnni) op = PeakOp::kInt8Dot;
      // The limit is measured after the timed runs (the same threads, warm), see MeasurePeak.
      const PeakInfo pk = int8 && !int8_vnni ? PeakInfo{} : MeasurePeak(op);
      const double peak = pk.gops, frac = peak > 0 ? gflops / peak : 0.0;
      if (peak > 0) {
        std::printf("deepinfer prefill (%d tokens, %s KV): %.2f tok/s  (%.1f G%s/s in matmuls; %s peak %.1f -> %.1f%%)\n", n_prompt,
                    kv_arg.c_str(), best, gflops, op == PeakOp::kInt8Dot ? "OP" : "FLOP", PeakOpName(op), peak, 100 * frac);
        std::printf("  %s peak = %s\n", PeakOpName(op), DescribePeak(pk).c_str());
      } else {
        std::printf("deepinfer prefill (%d tokens, %s KV): %.2f tok/s  (%.1f G%s/s in matmuls; no peak probe for this kernel's instruction)\n",
                    n_prompt, kv_arg.c_str(), best, gflops, int8 ? "OP" : "FLOP");
      }
      if (frac > 1)
        std::printf("  !!! WARNING: the matmuls ran at %.1f%% of the measured %s peak, i.e. ABOVE the limit: the probe or the\n"
                    "  !!! FLOP count is wrong (or the matmuls do not run on %s); this fraction is not a valid claim.\n",
                    100 * frac, PeakOpName(op), PeakOpName(op));
      result.update({{"tokens_per_second", best}, {"matmul_gflops", gflops}, {"n_prompt", n_prompt}, {"kv_cache_dtype", kv_arg},
                     {"peak_gflops", peak}, {"peak_op", PeakOpName(op)}, {"peak_fraction", frac}, {"peak_above_limit", frac > 1},
                     {"peak_probe", {{"measured_gflops", pk.measured_gops}, {"wall_gflops", pk.wall_gops},
                                     {"instr_per_cycle", pk.instr_per_cycle}, {"ghz", pk.ghz}, {"threads", pk.threads},
                                     {"chains", pk.chains}, {"vector_bits", pk.vector_bits}, {"ops_per_instr", pk.ops_per_instr}}}});
    }
    if (args.Has("peer")) {
      if (m.format != "gguf") {
        std::printf("peer: skipped (llama.cpp needs a GGUF model)\n");
      } else {
        auto peer = RunPeer(args.Get("peer-script"), mode, m.source, threads, mode == "decode" ? n_gen : n_prompt, reps);
        if (peer.is_null() || !peer.contains("tokens_per_second")) {
          std::printf("peer: llama.cpp run failed (is tools/ref installed? run scripts/setup.sh)\n");
          result["peer_error"] = true;
        } else {
          const double pt = peer["tokens_per_second"].get<double>();
          std::printf("llama.cpp %s: %.2f tok/s  ->  deepinfer / llama.cpp = %.2fx\n", mode.c_str(), pt, best / pt);
          result["peer"] = peer;
          result["ratio_vs_peer"] = best / pt;
        }
      }
    }
  }
  if (args.Has("out")) std::ofstream(args.Get("out")) << result.dump(2) << "\n";
  return 0;
}

}  // namespace deepinfer::cli
