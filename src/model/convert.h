// Hugging Face checkpoint -> GGUF, in the layout llama.cpp's own converter writes (tensor names, q/k row order,
// stacked experts, DeepSeek's split attn_k_b/attn_v_b, MTP "nextn" blocks, tokenizer metadata), so any HF
// checkpoint deepinfer runs can also be run, and checked, in llama.cpp.
#pragma once
#include <string>

#include "deepinfer/status.h"
#include "tensor/dtype.h"

namespace deepinfer {

struct ConvertOptions {
  // Matrix type in the GGUF. kInvalid keeps f32/f16/bf16 as stored and writes FP8 (which GGUF lacks) as bf16;
  // f32/f16/bf16/q8_0/q4_0 convert every matrix. Norms, biases and routers' bias stay f32 either way.
  DType outtype = DType::kInvalid;
  bool mtp = true;  // keep DeepSeek MTP modules (blk.{n_layers}.nextn.*)
  bool progress = true;
};

// Reads the HF directory (config.json, safetensors, tokenizer.json ...) and writes `out` (atomically: a
// temporary file renamed at the end). Tensors are produced one at a time, never the whole model in memory.
Status ConvertHfToGguf(const std::string& hf_dir, const std::string& out, const ConvertOptions& opts);

}  // namespace deepinfer
