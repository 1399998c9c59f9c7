// MXFP4 as HF checkpoints pack it (transformers' integrations/mxfp4.py, gpt-oss's `*_blocks` / `*_scales`
// tensors): 32-element blocks of 16 bytes, byte j holding element 2j in its LOW nibble and element 2j+1 in its
// HIGH nibble, and the E8M0 exponent bytes in a separate tensor. ggml's block_mxfp4 (BlockMXFP4, GGUF type 39)
// holds the same e2m1 codes and the same exponent byte, [e, qs[16]] with qs[j] = element j (low) | element j+16
// (high). Only the nibble order differs, so the conversion is exact in both directions; the repack is what
// llama.cpp's converter does (GptOssModel.transform_nibble_layout + repack_mxfp4).
#pragma once
#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace deepinfer {

// nb blocks: HF's 16-byte blocks (16 * nb bytes) and exponent bytes (nb) -> ggml's block_mxfp4.
void HfMxfp4ToBlocks(const uint8_t* hf_blocks, const uint8_t* hf_scales, BlockMXFP4* out, size_t nb);
// The inverse: ggml's blocks -> HF's 16-byte blocks and exponent bytes.
void BlocksToHfMxfp4(const BlockMXFP4* in, uint8_t* hf_blocks, uint8_t* hf_scales, size_t nb);

}  // namespace deepinfer
