// The CLI's commands (one per cmd_*.cc) and the helpers more than one of them uses.
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "startup.h"

namespace deepinfer::cli {

int CmdGenerate(int argc, char** argv);
int CmdServe(int argc, char** argv);
int CmdRoute(int argc, char** argv);
int CmdMakeTiny(int argc, char** argv);
int CmdConvert(int argc, char** argv);
int CmdPull(int argc, char** argv);
int CmdBench(int argc, char** argv);
int CmdBenchServe(int argc, char** argv);
int CmdBenchLayers(int argc, char** argv);
int CmdBenchGrammar(int argc, char** argv);
int CmdBenchKv(int argc, char** argv);
int CmdBenchSpec(int argc, char** argv);
int CmdBenchEngine(const std::string& mode, int argc, char** argv);  // sim, throughput
int CmdLogprobs(int argc, char** argv);
int CmdTokenize(int argc, char** argv);
int CmdTemplate(int argc, char** argv);
int CmdEplb(int argc, char** argv);

// Runs `node ARGS` (reference tools) and parses its stdout as JSON; null if it fails or prints no JSON.
nlohmann::json RunNodeJson(const std::string& args);
// Runs a shell command and parses the last non-empty line of its stdout as JSON; null if the command fails or
// that line is not JSON. stderr is discarded unless keep_stderr.
nlohmann::json RunJsonCommand(const std::string& cmd, bool keep_stderr = false);

}  // namespace deepinfer::cli
