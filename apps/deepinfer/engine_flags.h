// Start-up for the commands that are tools over the internals (logprobs, tokenize, bench prefill/layers/
// throughput/serve): the same flags and the same loading path as startup.h, into the internal Model and
// EngineOptions (engine_flags.cc; generate and serve never include this file).
#pragma once
#include <memory>
#include <string>

#include "args.h"
#include "deepinfer/status.h"
#include "engine/engine.h"
#include "model/model.h"
#include "startup.h"

namespace deepinfer::cli {

// The same parse as EngineOptionsFromArgs(args, api::EngineOptions*), into the internal options (fields no flag
// sets, like num_kv_blocks, keep their value).
Status EngineOptionsFromArgs(const Args& args, EngineOptions* opt);
// The --mmap / --no-mmap flags (DI_WEIGHT_FLAGS) as internal load options.
LoadOptions LoadOptionsFromArgs(const Args& args);
// Resolves MODEL (path or hub reference) and loads it, logging what was loaded. Exits the process with a clear
// message on failure (the CLI's error boundary).
std::unique_ptr<Model> LoadModelOrDie(const std::string& model_arg, const LoadOptions& opts = {});

}  // namespace deepinfer::cli
