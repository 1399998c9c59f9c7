// deepinfer: one binary, subcommands in the style of llama.cpp and vLLM.
#include <cstdio>
#include <cstring>
#include <string>

#include "commands.h"
#include "deepinfer/parallel.h"

namespace {

void Usage() {
  std::printf(
      "usage: deepinfer COMMAND [flags]     (deepinfer COMMAND --help for the flags of one command)\n\n"
      "commands:\n"
      "  generate    generate text from a prompt (streams to the terminal; --json for machine output)\n"
      "  serve       OpenAI-compatible HTTP API server (completions, chat, SSE streaming, metrics)\n"
      "  route       cache-aware router in front of several serve replicas (same OpenAI API)\n"
      "  pull        download a model from a Hugging Face-style hub into the local cache\n"
      "  make-tiny   write a random-weight model of a supported architecture (HF directory and/or GGUF)\n"
      "  convert     convert a Hugging Face checkpoint directory to GGUF (llama.cpp's layout)\n"
      "  bench       benchmarks: decode, prefill, membw, throughput, sim (engine), tokenize\n"
      "  tokenize    text to token ids (or ids to text with --decode)\n"
      "  template    render a chat template (Jinja) with a JSON context\n"
      "  logprobs    full-vocabulary log-probabilities at every position of a token sequence (JSON)\n"
      "  eplb        MoE expert placement over expert-parallel ranks from per-expert loads (DeepSeek's EPLB)\n\n"
      "MODEL is a GGUF file, a Hugging Face model directory, or a hub reference owner/name[:file][@revision]\n"
      "(HF_ENDPOINT, HF_HOME, HF_HUB_OFFLINE and HF_TOKEN are honoured).\n"
      "Environment: DEEPINFER_LOG=debug|info|warn|error, DEEPINFER_ISA=scalar|avx2|avx512, DEEPINFER_NO_PROGRESS=1\n");
}

}  // namespace

namespace {
int Run(int argc, char** argv) {
  using namespace deepinfer::cli;
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "help")) {
    Usage();
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::printf("deepinfer %s\n", DEEPINFER_VERSION);
    return 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "generate") return CmdGenerate(argc - 2, argv + 2);
  if (cmd == "serve") return CmdServe(argc - 2, argv + 2);
  if (cmd == "route") return CmdRoute(argc - 2, argv + 2);
  if (cmd == "make-tiny") return CmdMakeTiny(argc - 2, argv + 2);
  if (cmd == "convert") return CmdConvert(argc - 2, argv + 2);
  if (cmd == "pull") return CmdPull(argc - 2, argv + 2);
  if (cmd == "bench") return CmdBench(argc - 2, argv + 2);
  if (cmd == "logprobs") return CmdLogprobs(argc - 2, argv + 2);
  if (cmd == "tokenize") return CmdTokenize(argc - 2, argv + 2);
  if (cmd == "template") return CmdTemplate(argc - 2, argv + 2);
  if (cmd == "eplb") return CmdEplb(argc - 2, argv + 2);
  std::fprintf(stderr, "deepinfer: unknown command '%s'\n\n", cmd.c_str());
  Usage();
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // Under mpirun every rank runs this same binary; a plain run never touches MPI.
  deepinfer::api::InitProcess(&argc, &argv);
  const int rc = Run(argc, argv);
  deepinfer::api::FinalizeProcess();
  return rc;
}
