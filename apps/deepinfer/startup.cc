#include "startup.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "deepinfer/parallel.h"
#include "deepinfer/runtime.h"

namespace deepinfer::cli {

Status ParseSize(const std::string& s, size_t* bytes, double* fraction) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || !std::isfinite(v) || v <= 0) return InvalidArgument("--kv-cache: '" + s + "' is not a size");
  std::string unit(end);
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double mult = 1;
  if (unit.empty() || unit == "b") {
    if (v < 1) {
      *fraction = v;
      *bytes = 0;
      return Status::Ok();
    }
  } else if (unit == "k" || unit == "kb" || unit == "kib") {
    mult = 1024.0;
  } else if (unit == "m" || unit == "mb" || unit == "mib") {
    mult = 1024.0 * 1024;
  } else if (unit == "g" || unit == "gb" || unit == "gib") {
    mult = 1024.0 * 1024 * 1024;
  } else {
    return InvalidArgument("--kv-cache: unknown unit '" + unit + "' (use B, KiB, MiB, GiB or a fraction < 1)");
  }
  *bytes = static_cast<size_t>(v * mult);
  return Status::Ok();
}

int Fail(const Status& s) {
  std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
  return 1;
}

std::optional<int> ParseCommandLine(Args& args, int argc, char** argv) {
  if (!args.Parse(argc, argv)) return 2;
  if (args.help_requested()) {
    args.PrintHelp();
    return 0;
  }
  return std::nullopt;
}

void ApplyLogFlags(const Args& args) {
  if (args.Has("quiet")) api::SetLogLevel(api::LogLevel::kError);
}

Status CheckKvCacheDtype(const std::string& name) {
  if (name == "f32" || name == "bf16" || name == "f16") return Status::Ok();
  return InvalidArgument("--kv-cache-dtype must be f32, bf16 or f16, not '" + name + "'");
}

Status EngineOptionsFromArgs(const Args& args, api::EngineOptions* opt) {
  if (args.Has("threads")) {
    opt->threads = static_cast<int>(args.GetInt("threads"));
    api::SetComputeThreads(opt->threads);
  }
  if (args.Has("ctx-size")) {
    const long long c = args.GetInt("ctx-size");
    if (c < 2) return InvalidArgument("--ctx-size must be >= 2");
    opt->max_model_len = static_cast<int>(std::min<long long>(c, 1 << 30));
  }
  if (args.Has("kv-cache")) DI_RETURN_IF_ERROR(ParseSize(args.Get("kv-cache"), &opt->kv_cache_bytes, &opt->kv_cache_fraction));
  const std::string dt = args.Get("kv-cache-dtype");
  DI_RETURN_IF_ERROR(CheckKvCacheDtype(dt));
  opt->kv_cache_dtype = dt == "f32" ? api::KvCacheDtype::kF32 : dt == "bf16" ? api::KvCacheDtype::kBF16 : api::KvCacheDtype::kF16;
  opt->block_size = static_cast<int>(args.GetInt("block-size"));
  opt->max_num_seqs = static_cast<int>(args.GetInt("max-num-seqs"));
  opt->max_batched_tokens = static_cast<int>(args.GetInt("max-batched-tokens"));
  opt->prefix_caching = !args.Has("no-prefix-cache");
  opt->swa_full = args.Has("swa-full");
  if (args.Has("swa-replay")) {
    const std::string mode = args.Get("swa-replay");
    if (mode != "exact" && mode != "approx") return InvalidArgument("--swa-replay must be exact or approx, not '" + mode + "'");
    opt->swa_replay_approx = mode == "approx";
  }
  if (args.Has("swa-replay-max")) {
    opt->swa_replay_max = static_cast<int>(args.GetInt("swa-replay-max"));
    if (opt->swa_replay_max < 0) return InvalidArgument("--swa-replay-max must be >= 0");
  }
  if (args.Has("swa-checkpoint-every")) {
    opt->swa_checkpoint_every = static_cast<int>(args.GetInt("swa-checkpoint-every"));
    if (opt->swa_checkpoint_every < 0) return InvalidArgument("--swa-checkpoint-every must be >= 0");
  }
  opt->overlap = !args.Has("no-overlap");
  // KV tiers: sizes in bytes with a unit (a fraction of RAM would make the store's size depend on the machine).
  auto tier_size = [&](const char* flag, size_t* bytes) -> Status {
    double fraction = 0;
    Status s = ParseSize(args.Get(flag), bytes, &fraction);
    if (!s.ok() || *bytes == 0)
      return InvalidArgument(std::string("--") + flag + ": '" + args.Get(flag) + "' is not a size in bytes (4GiB, 512MiB)");
    return Status::Ok();
  };
  if (args.Has("kv-offload-ram")) DI_RETURN_IF_ERROR(tier_size("kv-offload-ram", &opt->kv_offload_ram_bytes));
  if (args.Has("kv-store")) {
    opt->kv_store_dir = args.Get("kv-store");
    if (opt->kv_store_dir.empty()) return InvalidArgument("--kv-store needs a directory");
    if (!args.Has("kv-store-size")) return InvalidArgument("--kv-store needs --kv-store-size SIZE (the most bytes it may hold)");
  }
  if (args.Has("kv-store-size")) {
    if (!args.Has("kv-store")) return InvalidArgument("--kv-store-size is only used with --kv-store DIR");
    DI_RETURN_IF_ERROR(tier_size("kv-store-size", &opt->kv_store_bytes));
  }
  if (args.Has("target-itl-ms")) {
    const std::string v = args.Get("target-itl-ms");
    char* end = nullptr;
    const double ms = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !std::isfinite(ms) || ms < 0)
      return InvalidArgument("--target-itl-ms must be a number of milliseconds >= 0 (0: off), not '" + v + "'");
    opt->target_itl_ms = ms;
  }
  if (args.Has("speculative")) {
    const std::string m = args.Get("speculative");
    if (m == "ngram") opt->speculative = api::SpeculativeMethod::kNgram;
    else if (m == "draft") opt->speculative = api::SpeculativeMethod::kDraft;
    else if (m == "mtp") opt->speculative = api::SpeculativeMethod::kMtp;
    else if (m == "off" || m == "none") opt->speculative = api::SpeculativeMethod::kNone;
    else return InvalidArgument("--speculative must be ngram, draft or mtp, not '" + m + "'");
  }
  const bool spec = opt->speculative != api::SpeculativeMethod::kNone;
  for (const char* f : {"num-speculative-tokens", "ngram-min", "ngram-max", "spec-verify", "draft-model"})
    if (args.Has(f) && !spec) return InvalidArgument(std::string("--") + f + " needs --speculative");
  if (args.Has("draft-model") && opt->speculative != api::SpeculativeMethod::kDraft)
    return InvalidArgument("--draft-model is only used with --speculative draft");
  if (opt->speculative == api::SpeculativeMethod::kDraft && !args.Has("draft-model"))
    return InvalidArgument("--speculative draft needs --draft-model MODEL");
  if (args.Has("num-speculative-tokens")) {
    const long long k = args.GetInt("num-speculative-tokens");
    if (k < 1 || k > 16) return InvalidArgument("--num-speculative-tokens must be in [1, 16], got " + std::to_string(k));
    opt->num_speculative_tokens = static_cast<int>(k);
  }
  if (args.Has("ngram-min")) opt->ngram_min = static_cast<int>(std::clamp<long long>(args.GetInt("ngram-min"), -1, 1000));
  if (args.Has("ngram-max")) opt->ngram_max = static_cast<int>(std::clamp<long long>(args.GetInt("ngram-max"), -1, 1000));
  if (opt->ngram_min < 1 || opt->ngram_max < opt->ngram_min || opt->ngram_max > 64)
    return InvalidArgument("--ngram-min / --ngram-max: need 1 <= min <= max <= 64");
  if (args.Has("spec-verify")) {
    const std::string v = args.Get("spec-verify");
    if (v == "exact") opt->spec_verify = api::SpeculativeVerify::kExact;
    else if (v == "rejection") opt->spec_verify = api::SpeculativeVerify::kRejection;
    else return InvalidArgument("--spec-verify must be exact or rejection, not '" + v + "'");
  }
  return Status::Ok();
}

std::unique_ptr<api::Model> OpenDraftModelOrDie(const Args& args, api::EngineOptions* opt) {
  if (!args.Has("draft-model")) return nullptr;
  api::Log(api::LogLevel::kInfo, "loading the draft model");
  api::ModelOptions draft_options = ModelOptionsFromArgs(args);
  draft_options.mtp_model.clear();  // the target's
  auto draft = OpenModelOrDie(args.Get("draft-model"), draft_options);
  opt->draft_model = draft.get();
  return draft;
}

Status SetupParallel(const Args& args) {
  api::ParallelOptions o;
  auto flag = [&](const char* name) { return args.Has(name) ? static_cast<int>(args.GetInt(name)) : 0; };
  o.dp = flag("dp");
  o.tp = flag("tp");
  o.cp = flag("cp");
  o.ep = flag("ep");
  o.redundant_experts = flag("ep-redundant-experts");
  o.eplb_interval = flag("eplb-interval");
  if (args.Has("dp-policy")) o.dp_policy = args.Get("dp-policy");
  o.prefix_caching = !args.Has("no-prefix-cache");
  if (args.Has("cp-split")) o.cp_split = args.Get("cp-split");
  o.two_batch_overlap = args.Has("enable-two-batch-overlap");
  if (args.Has("dist-timeout")) o.timeout_seconds = std::strtod(args.Get("dist-timeout").c_str(), nullptr);
  return api::SetupParallel(o);
}

api::ModelOptions ModelOptionsFromArgs(const Args& args) {
  api::ModelOptions o;
  if (args.Has("mmap")) o.placement = api::WeightPlacement::kMmap;
  if (args.Has("no-mmap")) o.placement = api::WeightPlacement::kCopy;
  if (args.Has("mtp-model")) o.mtp_model = args.Get("mtp-model");
  return o;
}

void ExitIfNoModel(const std::string& model_arg) {
  if (model_arg.empty()) {
    std::fprintf(stderr, "error: no model given (-m MODEL: a .gguf file, an HF directory or owner/name)\n");
    std::exit(2);
  }
}

std::unique_ptr<api::Model> OpenModelOrDie(const std::string& model_arg, const api::ModelOptions& options) {
  ExitIfNoModel(model_arg);
  auto m = api::Model::Load(model_arg, options);
  if (!m.ok()) std::exit(Fail(m.status()));
  return std::move(m).value();
}

}  // namespace deepinfer::cli
