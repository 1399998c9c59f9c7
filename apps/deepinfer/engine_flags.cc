// The internal-Model variants of startup.h for the tools over the internals (engine_flags.h).
#include "engine_flags.h"

#include <cstdio>
#include <cstdlib>

#include "api/engine_impl.h"
#include "api/model_impl.h"

namespace deepinfer::cli {

Status EngineOptionsFromArgs(const Args& args, EngineOptions* opt) {
  api::EngineOptions parsed;
  DI_RETURN_IF_ERROR(EngineOptionsFromArgs(args, &parsed));
  EngineOptions converted = api::ToInternal(parsed);
  converted.num_kv_blocks = opt->num_kv_blocks;
  converted.host_overhead_us = opt->host_overhead_us;
  *opt = converted;
  return Status::Ok();
}

LoadOptions LoadOptionsFromArgs(const Args& args) { return api::ToInternal(ModelOptionsFromArgs(args)); }

std::unique_ptr<Model> LoadModelOrDie(const std::string& model_arg, const LoadOptions& opts) {
  ExitIfNoModel(model_arg);
  auto m = api::LoadInternalModel(model_arg, opts);
  if (!m.ok()) std::exit(Fail(m.status()));
  return std::move(m).value();
}

}  // namespace deepinfer::cli
