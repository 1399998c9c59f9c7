#pragma once
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "deepinfer/status.h"
#include "model/model.h"

namespace deepinfer::cli {

int CmdGenerate(int argc, char** argv);
int CmdServe(int argc, char** argv);
int CmdMakeTiny(int argc, char** argv);
int CmdConvert(int argc, char** argv);
int CmdPull(int argc, char** argv);
int CmdBench(int argc, char** argv);
int CmdBenchServe(int argc, char** argv);
int CmdBenchLayers(int argc, char** argv);
int CmdBenchEngine(const std::string& mode, int argc, char** argv);  // sim, throughput
int CmdLogprobs(int argc, char** argv);
int CmdTokenize(int argc, char** argv);
int CmdTemplate(int argc, char** argv);

// Resolves MODEL (path or hub reference) and loads it, logging what was loaded. Exits the process with a clear
// message on failure (the CLI's error boundary).
std::unique_ptr<Model> LoadModelOrDie(const std::string& model_arg, const LoadOptions& opts = {});
// The --mmap / --no-mmap flags every model-loading command shares.
class Args;
LoadOptions LoadOptionsFromArgs(const Args& args);
#define DI_WEIGHT_FLAGS                                                                                              \
  {"mmap", "", "", "", "keep weights in the mmapped files (no copy, less RAM; slower decode on 4 KiB pages)"},      \
      {"no-mmap", "", "", "", "always copy weights into huge-page memory (default: copy when they fit in RAM)"}
int Fail(const Status& s);
// Runs `node ARGS` (reference tools) and parses its stdout as JSON; null if it fails or prints no JSON.
nlohmann::json RunNodeJson(const std::string& args);

}  // namespace deepinfer::cli
