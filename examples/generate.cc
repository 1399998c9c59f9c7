// Generates text with the deepinfer public API (include/deepinfer/ only; CMake target deepinfer::deepinfer).
//
//   example_generate MODEL [PROMPT] [MAX_TOKENS]
//
// Greedy decoding; prints the prompt and its continuation the way `deepinfer generate -p PROMPT --temp 0`
// prints them to stdout, so the two can be compared (tests/e2e/example_generate.sh does).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "deepinfer/deepinfer.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL [PROMPT] [MAX_TOKENS]\n", argv[0]);
    return 2;
  }
  namespace di = deepinfer::api;
  const std::string prompt = argc > 2 ? argv[2] : "";
  di::SetLogLevel(di::LogLevel::kError);

  auto model = di::Model::Load(argv[1]);
  if (!model.ok()) {
    std::fprintf(stderr, "error: %s\n", model.status().ToString().c_str());
    return 1;
  }
  di::EngineOptions options;
  options.max_num_seqs = 4;  // one request
  auto engine = di::Engine::Create(**model, options);
  if (!engine.ok()) {
    std::fprintf(stderr, "error: %s\n", engine.status().ToString().c_str());
    return 1;
  }

  di::GenerationParams params;  // temperature 0: greedy
  params.max_tokens = argc > 3 ? std::atoi(argv[3]) : 128;
  std::fputs(prompt.c_str(), stdout);
  std::string finish_reason;
  auto id = (*engine)->AddText(prompt, params, [&](const di::Output& out) {
    std::fwrite(out.text.data(), 1, out.text.size(), stdout);  // streamed as it is generated
    if (out.finished) finish_reason = out.finish_reason;
  });
  if (!id.ok()) {
    std::fprintf(stderr, "error: %s\n", id.status().ToString().c_str());
    return 1;
  }
  if (deepinfer::Status s = (*engine)->RunUntilIdle(); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("\n");
  std::fprintf(stderr, "finish_reason=%s\n", finish_reason.c_str());
  // Shutdown checks that every KV block and sequence slot came back.
  if (deepinfer::Status s = (*engine)->Shutdown(); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
