// Test tool for tests/parity/convert_quant.mjs: llama.cpp's own quantizer (llama_model_quantize, what the
// llama-quantize binary runs, from the library node-llama-cpp ships) on a GGUF, so the per-tensor type mix and
// the blocks `deepinfer convert --outtype q4_k_m ...` writes can be compared with llama.cpp's. Built only as a
// test tool (tests/CMakeLists.txt); it is not part of deepinfer.
//
// usage: llama_quantize_ref IN.gguf OUT.gguf FTYPE [pure]   (FTYPE: a llama_ftype number, e.g. 15 = Q4_K_M;
//        pure: every matrix in the file type's base type, as llama-quantize --pure)
#include <cstdio>
#include <cstdlib>
#include <string>

#include "llama.h"

int main(int argc, char** argv) {
  if (argc != 4 && !(argc == 5 && std::string(argv[4]) == "pure")) {
    std::fprintf(stderr, "usage: llama_quantize_ref IN.gguf OUT.gguf FTYPE [pure]\n");
    return 2;
  }
  llama_backend_init();
  llama_model_quantize_params p = llama_model_quantize_default_params();
  p.ftype = static_cast<llama_ftype>(std::atoi(argv[3]));
  p.nthread = 1;
  p.pure = argc == 5;
  const uint32_t rc = llama_model_quantize(argv[1], argv[2], &p);
  llama_backend_free();
  if (rc) std::fprintf(stderr, "llama_quantize_ref: llama_model_quantize failed (%u)\n", rc);
  return rc ? 1 : 0;
}
