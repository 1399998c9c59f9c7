// Batched llama.cpp peer for `deepinfer bench throughput --peer` and bench/concurrency.sh: it drives the libllama
// that node-llama-cpp ships (the same release as the headers extracted from its source bundle by
// scripts/extract_llama_data.sh) the way llama.cpp's own llama-batched-bench does:
//   - prompt processing: the prompts of all B sequences go into one llama_batch (each sequence its own seq_id,
//     only the last prompt token of each sequence asks for logits), submitted in n_batch-token views; llama.cpp
//     splits each view into n_ubatch-token micro-batches itself;
//   - generation: every step puts ALL B sequences' next tokens into ONE llama_decode (batched-bench's
//     "0123 0123 ..." pattern), for a fixed number of tokens (EOS never stops a sequence).
// The next token is the greedy argmax of each sequence's logits (default), or a random token as batched-bench
// feeds (--random). Prompt and generation rates are timed and reported separately, plus the total, and the
// exact settings (CPU backend variant, KV types, flash attention as resolved, unified KV, n_ctx, n_ctx_seq,
// n_batch/n_ubatch, threads) are printed with every result. Not part of deepinfer: a benchmark tool only.
//
// Timing (the same definitions as deepinfer's side of `bench throughput`):
//   prompt phase = the prompt decode of all B sequences + the first greedy token of each (the TTFT of the last
//                  sequence); prompt tok/s = B x n_prompt / prompt phase;
//   generation   = the n_gen - 1 further steps, B tokens each; generation tok/s = B x (n_gen - 1) / its time;
//   total        = B x n_gen generated tokens / (prompt phase + generation): output tokens per second.
//
// usage: llama_batched_ref MODEL.gguf [flags]   (llama_batched_ref --help)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "llama.h"

#ifndef DI_LLAMA_BACKEND_DIR
#define DI_LLAMA_BACKEND_DIR ""
#endif

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "llama_batched_ref: %s\n", what.c_str());
  std::exit(1);
}

const char* kUsage =
    "usage: llama_batched_ref MODEL.gguf [flags]\n"
    "\n"
    "Runs B sequences through llama.cpp as llama-batched-bench batches them: all prompts in one batch, then one\n"
    "llama_decode per generation step holding every sequence's next token. Prints prompt, generation and total\n"
    "tokens/s per B, and the exact settings. Defaults are llama.cpp's own (llama-batched-bench / llama-server).\n"
    "\n"
    "flags:\n"
    "  -npl LIST         sequences per run, e.g. 1,8,32,64 (default 1); one run per value, same context\n"
    "  -npp N            prompt tokens per sequence (default 32; random ids, each sequence its own)\n"
    "  -ntg N            tokens generated per sequence, EOS ignored (default 64)\n"
    "  -t N              threads (n_threads and n_threads_batch; default 2)\n"
    "  -c N              n_ctx (default: max B x (npp + ntg) rounded as llama.cpp rounds it: each sequence's share\n"
    "                    padded to 256, or the unified total padded to 256; n_batch is capped at n_ctx)\n"
    "  -b N              n_batch: tokens per llama_decode call in prompt processing (default 2048)\n"
    "  -ub N             n_ubatch: tokens per micro-batch (default 512)\n"
    "  -ctk T, -ctv T    K / V cache type: f16 (default), f32, bf16, q8_0, q4_0 ...\n"
    "  -fa on|off|auto   flash attention (default auto: llama.cpp resolves it, the result is printed)\n"
    "  -kvu              unified KV buffer across sequences (default off, as llama-batched-bench and\n"
    "                    llama-server -np N without --kv-unified)\n"
    "  --random          feed random next tokens (batched-bench) instead of the greedy argmax\n"
    "  -r N              repetitions per B, best total reported (default 1)\n"
    "  --seed N          prompt token seed (default 17)\n"
    "  --backend-dir DIR directory of the ggml CPU backend variants (default: the one this tool was built with)\n"
    "  --json            one JSON object per run on stdout instead of the table\n"
    "  --tokens          also print each sequence's generated token ids (sequence j's prompt depends only on\n"
    "                    --seed and j, so B = 1 and B = 8 can be compared: batching must not change a sequence)\n";

std::vector<int> ParseList(const std::string& s) {
  std::vector<int> v;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.empty()) continue;
    char* end = nullptr;
    const long x = std::strtol(item.c_str(), &end, 10);
    if (*end || x <= 0) Die("bad list value '" + item + "'");
    v.push_back(static_cast<int>(x));
  }
  if (v.empty()) Die("empty list '" + s + "'");
  return v;
}

ggml_type ParseType(const std::string& s) {
  for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
    const char* n = ggml_type_name(static_cast<ggml_type>(t));
    if (n && s == n) return static_cast<ggml_type>(t);
  }
  Die("unknown cache type '" + s + "'");
}

// Log lines worth echoing as settings (backend variant, flash attention as resolved, context sizes).
std::string g_log;

std::string JsonEscape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\', o += c;
    else if (c == '\n') o += "\\n";
    else if (static_cast<unsigned char>(c) < 0x20) o += ' ';
    else o += c;
  }
  return o;
}

int Argmax(const float* x, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

struct Result {
  double t_pp = 0, t_tg = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, backend_dir = DI_LLAMA_BACKEND_DIR, fa = "auto", ctk = "f16", ctv = "f16";
  std::vector<int> npl = {1};
  int npp = 32, ntg = 64, threads = 2, n_ctx = 0, n_batch = 2048, n_ubatch = 512, reps = 1;
  unsigned seed = 17;
  bool kvu = false, random_tokens = false, json = false, dump_tokens = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Die("flag " + a + " needs a value");
      return argv[++i];
    };
    auto next_int = [&]() {
      const std::string v = next();
      char* end = nullptr;
      const long x = std::strtol(v.c_str(), &end, 10);
      if (*end || v.empty() || x < 0) Die("flag " + a + ": bad number '" + v + "'");
      return static_cast<int>(x);
    };
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "-npl") npl = ParseList(next());
    else if (a == "-npp") npp = next_int();
    else if (a == "-ntg") ntg = next_int();
    else if (a == "-t") threads = next_int();
    else if (a == "-c") n_ctx = next_int();
    else if (a == "-b") n_batch = next_int();
    else if (a == "-ub") n_ubatch = next_int();
    else if (a == "-ctk") ctk = next();
    else if (a == "-ctv") ctv = next();
    else if (a == "-fa") fa = next();
    else if (a == "-kvu") kvu = true;
    else if (a == "--random") random_tokens = true;
    else if (a == "-r") reps = std::max(1, next_int());
    else if (a == "--seed") seed = static_cast<unsigned>(next_int());
    else if (a == "--backend-dir") backend_dir = next();
    else if (a == "--json") json = true;
    else if (a == "--tokens") dump_tokens = true;
    else if (!a.empty() && a[0] == '-') Die("unknown flag " + a + " (see --help)");
    else if (model_path.empty()) model_path = a;
    else Die("more than one model given");
  }
  if (model_path.empty()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  if (npp < 1 || ntg < 1) Die("-npp and -ntg must be >= 1");
  if (fa != "on" && fa != "off" && fa != "auto") Die("-fa must be on, off or auto");
  if (threads < 1) Die("-t must be >= 1");

  llama_log_set([](ggml_log_level level, const char* text, void*) {
    g_log += text;
    if (level >= GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
  }, nullptr);
  if (!backend_dir.empty()) ggml_backend_load_all_from_path(backend_dir.c_str());
  else ggml_backend_load_all();
  llama_backend_init();

  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  mp.progress_callback = [](float, void*) { return true; };
  llama_model* model = llama_model_load_from_file(model_path.c_str(), mp);
  if (!model) Die("cannot load " + model_path);
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const int n_vocab = llama_vocab_n_tokens(vocab);

  const int max_pl = *std::max_element(npl.begin(), npl.end());
  if (n_batch < max_pl || n_ubatch < 1 || n_ubatch > n_batch)
    Die("need n_ubatch <= n_batch and n_batch >= B (one generation step is one llama_decode)");
  llama_context_params cp = llama_context_default_params();
  // Default context: what llama.cpp would end up with for B sequences of npp + ntg tokens (per-sequence
  // contexts are padded to 256; unified: the sum, padded), so that n_batch is not cut to a smaller request
  // (llama.cpp caps n_batch at n_ctx).
  const int pad256 = [](int x) { return (x + 255) / 256 * 256; }(npp + ntg);
  cp.n_ctx = n_ctx > 0 ? n_ctx : kvu ? (max_pl * (npp + ntg) + 255) / 256 * 256 : max_pl * pad256;
  cp.n_batch = n_batch;
  cp.n_ubatch = n_ubatch;
  cp.n_seq_max = max_pl;
  cp.n_threads = cp.n_threads_batch = threads;
  cp.type_k = ParseType(ctk);
  cp.type_v = ParseType(ctv);
  cp.flash_attn_type = fa == "on" ? LLAMA_FLASH_ATTN_TYPE_ENABLED : fa == "off" ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                                                                 : LLAMA_FLASH_ATTN_TYPE_AUTO;
  cp.kv_unified = kvu;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) Die("cannot create the context");
  llama_memory_t mem = llama_get_memory(ctx);

  // Settings as llama.cpp resolved them.
  char desc[256] = {};
  llama_model_desc(model, desc, sizeof desc);
  std::string backend = "?";
  if (size_t p = g_log.find("loaded CPU backend from "); p != std::string::npos) {
    p += std::strlen("loaded CPU backend from ");
    backend = g_log.substr(p, g_log.find('\n', p) - p);
    if (size_t s = backend.rfind('/'); s != std::string::npos) backend = backend.substr(s + 1);
  }
  // Flash attention: "auto" is resolved at context creation by a probe that logs "Flash Attention enabled" or
  // "... not supported, set to disabled".
  std::string fa_resolved = fa;
  if (fa == "auto") {
    if (g_log.find("Flash Attention enabled") != std::string::npos) fa_resolved = "auto -> on";
    else if (g_log.find("Flash Attention not supported") != std::string::npos) fa_resolved = "auto -> off";
    else fa_resolved = "auto -> (not reported)";
  }
  const std::string settings =
      std::string("model ") + desc + " | CPU backend " + backend + " | threads " + std::to_string(threads) +
      " (batch " + std::to_string(threads) + ") | n_ctx " + std::to_string(llama_n_ctx(ctx)) + ", n_ctx_seq " +
      std::to_string(llama_n_ctx_seq(ctx)) + ", n_seq_max " + std::to_string(llama_n_seq_max(ctx)) + " | n_batch " +
      std::to_string(llama_n_batch(ctx)) + ", n_ubatch " + std::to_string(llama_n_ubatch(ctx)) + " | K " +
      ggml_type_name(cp.type_k) + ", V " + ggml_type_name(cp.type_v) + " | flash attention " + fa_resolved +
      " | unified KV " + (kvu ? "on" : "off") + " | next token " + (random_tokens ? "random (batched-bench)" : "greedy argmax") +
      ", EOS ignored";
  if (!json) {
    std::printf("llama_batched_ref: %s\n", settings.c_str());
    std::printf("system: %s\n", llama_print_system_info());
    std::printf("%5s %5s %5s | %9s %11s | %9s %11s | %9s %11s\n", "B", "PP", "TG", "T_PP s", "S_PP tok/s", "T_TG s",
                "S_TG tok/s", "T s", "S_out tok/s");
  }

  llama_batch batch = llama_batch_init(std::max(max_pl * npp, max_pl), 0, 1);
  auto add = [&](llama_token t, llama_pos pos, llama_seq_id seq, bool logits) {
    const int i = batch.n_tokens++;
    batch.token[i] = t;
    batch.pos[i] = pos;
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = seq;
    batch.logits[i] = logits;
  };
  std::mt19937 rng(seed);
  auto rand_token = [&]() { return static_cast<llama_token>(rng() % static_cast<unsigned>(n_vocab)); };
  // As batched-bench's decode_helper: views of n_batch tokens, one llama_decode each. After each call, the next
  // token of every sequence whose row asked for logits (greedy: the argmax; llama_get_logits_ith indexes the
  // rows of the last call, so they are read view by view).
  std::vector<llama_token> next(max_pl);
  std::vector<std::vector<llama_token>> generated(max_pl);
  auto decode = [&]() {
    for (int i = 0; i < batch.n_tokens; i += n_batch) {
      const int n = std::min(n_batch, batch.n_tokens - i);
      llama_batch view = {n, batch.token + i, nullptr, batch.pos + i, batch.n_seq_id + i, batch.seq_id + i, batch.logits + i};
      if (const int rc = llama_decode(ctx, view); rc != 0) Die("llama_decode failed: " + std::to_string(rc));
      for (int k = 0; k < n; ++k)
        if (batch.logits[i + k])
          next[batch.seq_id[i + k][0]] = random_tokens ? rand_token() : Argmax(llama_get_logits_ith(ctx, k), n_vocab);
    }
  };

  // Warm-up (batched-bench's): 16 tokens of one sequence, then clear.
  batch.n_tokens = 0;
  for (int i = 0; i < 16; ++i) add(rand_token(), i, 0, false);
  decode();
  llama_synchronize(ctx);

  for (int pl : npl) {
    const int need = kvu ? pl * (npp + ntg) : static_cast<int>(llama_n_ctx_seq(ctx));
    if ((kvu && need > static_cast<int>(llama_n_ctx(ctx))) || (!kvu && npp + ntg > need))
      Die("context too small for B = " + std::to_string(pl) + " (raise -c)");
    Result best;
    for (int r = 0; r < reps; ++r) {
      llama_memory_clear(mem, false);
      batch.n_tokens = 0;
      for (int j = 0; j < pl; ++j) {
        std::mt19937 prompt_rng(seed * 1000003u + static_cast<unsigned>(j));  // sequence j's prompt: seed and j only
        for (int i = 0; i < npp; ++i)
          add(static_cast<llama_token>(prompt_rng() % static_cast<unsigned>(n_vocab)), i, j, i == npp - 1);
        generated[j].clear();
      }
      const auto t0 = Clock::now();
      decode();  // and the first generated token of each sequence, from its last prompt position's logits
      llama_synchronize(ctx);
      const auto t1 = Clock::now();
      for (int j = 0; j < pl; ++j) generated[j].push_back(next[j]);
      for (int s = 1; s < ntg; ++s) {
        batch.n_tokens = 0;
        for (int j = 0; j < pl; ++j) add(next[j], npp + s - 1, j, true);
        decode();  // B tokens, one llama_decode (n_batch >= B)
        if (dump_tokens)
          for (int j = 0; j < pl; ++j) generated[j].push_back(next[j]);
      }
      llama_synchronize(ctx);
      const auto t2 = Clock::now();
      Result res{std::chrono::duration<double>(t1 - t0).count(), std::chrono::duration<double>(t2 - t1).count()};
      if (r == 0 || res.t_pp + res.t_tg < best.t_pp + best.t_tg) best = res;
    }
    const double s_pp = double(pl) * npp / best.t_pp;
    const double s_tg = ntg > 1 ? double(pl) * (ntg - 1) / best.t_tg : 0;
    const double s_out = double(pl) * ntg / (best.t_pp + best.t_tg);
    if (dump_tokens) {  // before the result: the result stays the last line
      for (int j = 0; j < pl; ++j) {
        std::printf(json ? "{\"concurrency\":%d,\"seq\":%d,\"tokens\":[" : "  B=%d seq %d:", pl, j);
        for (size_t i = 0; i < generated[j].size(); ++i) std::printf(json ? (i ? ",%d" : "%d") : " %d", generated[j][i]);
        std::printf(json ? "]}\n" : "\n");
      }
    }
    if (json) {
      std::printf(
          "{\"engine\":\"llama.cpp (libllama of node-llama-cpp, llama_batched_ref)\",\"concurrency\":%d,\"n_prompt\":%d,"
          "\"n_gen\":%d,\"threads\":%d,\"prompt_seconds\":%.6f,\"prompt_tokens_per_second\":%.4f,\"gen_seconds\":%.6f,"
          "\"gen_tokens_per_second\":%.4f,\"output_tokens_per_second\":%.4f,\"seconds\":%.6f,\"generated\":%d,"
          "\"settings\":{\"cpu_backend\":\"%s\",\"n_ctx\":%u,\"n_ctx_seq\":%u,\"n_seq_max\":%u,\"n_batch\":%u,"
          "\"n_ubatch\":%u,\"type_k\":\"%s\",\"type_v\":\"%s\",\"flash_attn\":\"%s\",\"kv_unified\":%s,"
          "\"next_token\":\"%s\"},\"settings_text\":\"%s\"}\n",
          pl, npp, ntg, threads, best.t_pp, s_pp, best.t_tg, s_tg, s_out, best.t_pp + best.t_tg, pl * ntg,
          JsonEscape(backend).c_str(), llama_n_ctx(ctx), llama_n_ctx_seq(ctx), llama_n_seq_max(ctx), llama_n_batch(ctx),
          llama_n_ubatch(ctx), ggml_type_name(cp.type_k), ggml_type_name(cp.type_v), JsonEscape(fa_resolved).c_str(),
          kvu ? "true" : "false", random_tokens ? "random" : "greedy", JsonEscape(settings).c_str());
    } else {
      std::printf("%5d %5d %5d | %9.3f %11.2f | %9.3f %11.2f | %9.3f %11.2f\n", pl, npp, ntg, best.t_pp, s_pp, best.t_tg,
                  s_tg, best.t_pp + best.t_tg, s_out);
    }
    std::fflush(stdout);
  }
  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
