#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "args.h"
#include "base/logging.h"
#include "base/thread_pool.h"
#include "commands.h"
#include "generate/generator.h"

namespace deepinfer::cli {

int CmdGenerate(int argc, char** argv) {
  Args args("generate", "Generate text from a prompt. Text streams to stdout as it is produced; --json prints one JSON object instead.",
            {
                {"model", "m", "MODEL", "", "GGUF file, HF model directory or hub reference owner/name[:file]"},
                {"prompt", "p", "TEXT", "", "prompt text (default: start from BOS alone)"},
                {"file", "f", "FILE", "", "read the prompt from a file"},
                {"n-predict", "n", "N", "128", "maximum number of tokens to generate"},
                {"temp", "", "T", "0.8", "sampling temperature; 0 = greedy"},
                {"top-k", "", "K", "40", "keep the K most likely tokens; 0 = off"},
                {"top-p", "", "P", "0.95", "nucleus sampling: smallest set with probability mass >= P; 1 = off"},
                {"min-p", "", "P", "0.05", "drop tokens below P x the top probability; 0 = off"},
                {"seed", "s", "S", "random", "sampling seed (same seed, same output)"},
                {"ctx-size", "c", "N", "4096", "context length to allocate (capped at the model's)"},
                {"threads", "t", "N", "all cores", "compute threads"},
                {"ignore-eos", "", "", "", "keep generating past end-of-generation tokens"},
                {"no-bos", "", "", "", "do not add BOS even if the tokenizer asks for it"},
                {"json", "", "", "", "print {\"text\", \"token_ids\", \"finish_reason\", \"usage\", \"timings\"} as one JSON object"},
                {"quiet", "q", "", "", "only errors on stderr"},
                DI_WEIGHT_FLAGS,
            });
  if (!args.Parse(argc, argv)) return 2;
  if (args.help_requested()) {
    args.PrintHelp();
    return 0;
  }
  if (args.Has("quiet")) SetLogLevel(LogLevel::kError);
  if (args.Has("threads")) SetComputeThreads(static_cast<int>(args.GetInt("threads")));
  auto model = LoadModelOrDie(args.Get("model"), LoadOptionsFromArgs(args));
  const Tokenizer& tok = *model->tokenizer;

  std::string prompt = args.Get("prompt");
  if (args.Has("file")) {
    std::ifstream in(args.Get("file"), std::ios::binary);
    if (!in) return Fail(NotFound(args.Get("file") + ": cannot open"));
    std::stringstream ss;
    ss << in.rdbuf();
    prompt = ss.str();
  }
  GenerateRequest req;
  const bool bos = !args.Has("no-bos") && (tok.add_bos() || prompt.empty());
  req.prompt = tok.Encode(prompt, bos && tok.bos_id() >= 0);
  if (req.prompt.empty()) return Fail(InvalidArgument("empty prompt and the tokenizer has no BOS token"));
  req.max_tokens = static_cast<int>(args.GetInt("n-predict"));
  req.ignore_eos = args.Has("ignore-eos");
  req.sampling.temperature = static_cast<float>(args.GetFloat("temp"));
  req.sampling.top_k = static_cast<int>(args.GetInt("top-k"));
  req.sampling.top_p = static_cast<float>(args.GetFloat("top-p"));
  req.sampling.min_p = static_cast<float>(args.GetFloat("min-p"));
  req.sampling.seed = args.Has("seed") ? static_cast<uint64_t>(args.GetInt("seed")) : std::random_device{}();
  if (Status s = req.sampling.Validate(); !s.ok()) return Fail(s);
  const int ctx = static_cast<int>(std::min<long long>(args.GetInt("ctx-size"), model->config.max_ctx));
  if (ctx <= 0) return Fail(InvalidArgument("--ctx-size must be positive"));

  Transformer tf(*model);
  KvCache kv(model->config, ctx);
  const bool json = args.Has("json");
  StreamDecoder stream(tok, req.prompt);
  std::string text;  // the continuation, exactly as streamed
  if (!json) {
    std::fputs(prompt.c_str(), stdout);
    std::fflush(stdout);
  }
  auto res = Generate(tf, kv, req, [&](int32_t id) {
    std::string piece = stream.Push(id);
    text += piece;
    if (!json) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  });
  if (!res.ok()) return Fail(res.status());
  const double dec_tps = res->tokens.size() > 1 ? (res->tokens.size() - 1) / res->decode_seconds : 0;
  const double pre_tps = req.prompt.size() / std::max(1e-9, res->prefill_seconds);
  const std::string rest = stream.Flush();
  text += rest;
  if (json) {
    nlohmann::json out = {
        {"text", text},
        {"token_ids", res->tokens},
        {"finish_reason", res->finish_reason},
        {"prompt_token_ids", req.prompt},
        {"seed", req.sampling.seed},
        {"usage", {{"prompt_tokens", req.prompt.size()}, {"completion_tokens", res->tokens.size()}}},
        {"timings", {{"prefill_seconds", res->prefill_seconds}, {"decode_seconds", res->decode_seconds},
                     {"prefill_tokens_per_second", pre_tps}, {"decode_tokens_per_second", dec_tps}}}};
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::fwrite(rest.data(), 1, rest.size(), stdout);
    std::printf("\n");
    DI_LOG_INFO("prompt %zu tokens (%.1f tok/s), generated %zu tokens (%.1f tok/s), finish_reason=%s", req.prompt.size(),
                pre_tps, res->tokens.size(), dec_tps, res->finish_reason.c_str());
  }
  return 0;
}

}  // namespace deepinfer::cli
