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
  // f32/f16/bf16 convert every matrix. Norms, biases and routers stay f32 either way.
  DType outtype = DType::kInvalid;
  // For quantized output: llama.cpp's file type (llama_ftype, written as general.file_type) whose per-tensor
  // mix is applied (llama-quant.cpp's llama_tensor_get_type: q6_K output, more bits for some attn_v / ffn_down,
  // fallbacks for rows that do not fill a block). -1 with a quantized outtype (q8_0 ... q5_1 have a file type too;
  // -1 only when set by hand): that type for every matrix.
  int ftype = -1;
  // llama-quantize --pure: no mix, every quantized matrix in the file type's base type (shape fallbacks aside).
  bool pure = false;
  // Keep DeepSeek MTP modules: DeepSeek-V3's as blk.{n_layers}.nextn.* in the GGUF; DeepSeek-V4's in a GGUF of its
  // own beside it (MtpGgufPath), as llama.cpp's converter writes them.
  bool mtp = true;
  bool progress = true;
};

// Parses --outtype: auto | f32 | f16 | bf16 | q8_0 | q4_0 | q4_1 | q5_0 | q5_1 | q4_k_s | q4_k_m | q5_k_s |
// q5_k_m | q6_k (llama.cpp's file types with their mixes) | q2_k | q3_k | q4_k | q5_k (that type for every
// matrix, as llama-quantize --pure). False when unknown.
bool ParseOutType(const std::string& name, ConvertOptions* opts);

// Reads the HF directory (config.json, safetensors, tokenizer.json ...) and writes `out` (atomically: a
// temporary file renamed at the end). Tensors are produced one at a time, never the whole model in memory.
Status ConvertHfToGguf(const std::string& hf_dir, const std::string& out, const ConvertOptions& opts);

// Where `convert` writes DeepSeek-V4's MTP GGUF for the model GGUF `out`: "mtp-<name>" in the same directory.
std::string MtpGgufPath(const std::string& out);

}  // namespace deepinfer
