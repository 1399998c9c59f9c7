#include "engine_flags.h"

#include <cmath>
#include <cstdlib>

#include "base/thread_pool.h"

namespace deepinfer::cli {
namespace {

// "4GiB", "512MiB", "1.5G", "1000000" -> bytes; "0.25" (< 1) -> a fraction, returned through *fraction.
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

}  // namespace

Status EngineOptionsFromArgs(const Args& args, EngineOptions* opt) {
  if (args.Has("threads")) SetComputeThreads(static_cast<int>(args.GetInt("threads")));
  if (args.Has("ctx-size")) {
    const long long c = args.GetInt("ctx-size");
    if (c < 2) return InvalidArgument("--ctx-size must be >= 2");
    opt->max_model_len = static_cast<int>(std::min<long long>(c, 1 << 30));
  }
  if (args.Has("kv-cache")) DI_RETURN_IF_ERROR(ParseSize(args.Get("kv-cache"), &opt->kv_cache_bytes, &opt->kv_cache_fraction));
  const std::string dt = args.Get("kv-cache-dtype");
  if (dt == "f32") opt->kv_dtype = DType::kF32;
  else if (dt == "bf16") opt->kv_dtype = DType::kBF16;
  else if (dt == "f16") opt->kv_dtype = DType::kF16;
  else return InvalidArgument("--kv-cache-dtype must be f32, bf16 or f16, not '" + dt + "'");
  opt->block_size = static_cast<int>(args.GetInt("block-size"));
  opt->max_num_seqs = static_cast<int>(args.GetInt("max-num-seqs"));
  opt->max_batched_tokens = static_cast<int>(args.GetInt("max-batched-tokens"));
  opt->prefix_caching = !args.Has("no-prefix-cache");
  opt->overlap = !args.Has("no-overlap");
  return Status::Ok();
}

}  // namespace deepinfer::cli
