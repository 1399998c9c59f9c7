#include "tensor/mxfp4_hf.h"

namespace deepinfer {

void HfMxfp4ToBlocks(const uint8_t* hf_blocks, const uint8_t* hf_scales, BlockMXFP4* out, size_t nb) {
  for (size_t b = 0; b < nb; ++b, hf_blocks += 16) {
    // Element k of the block: byte k / 2 of HF's, low nibble for even k, high for odd.
    auto nib = [&](int k) { return static_cast<uint8_t>((hf_blocks[k >> 1] >> (4 * (k & 1))) & 0xF); };
    out[b].e = hf_scales[b];
    for (int j = 0; j < 16; ++j) out[b].qs[j] = static_cast<uint8_t>(nib(j) | nib(j + 16) << 4);
  }
}

void BlocksToHfMxfp4(const BlockMXFP4* in, uint8_t* hf_blocks, uint8_t* hf_scales, size_t nb) {
  for (size_t b = 0; b < nb; ++b, hf_blocks += 16) {
    // Element k of ggml's block: low nibble of qs[k] for k < 16, high nibble of qs[k - 16] otherwise.
    auto nib = [&](int k) { return static_cast<uint8_t>(k < 16 ? in[b].qs[k] & 0xF : in[b].qs[k - 16] >> 4); };
    hf_scales[b] = in[b].e;
    for (int j = 0; j < 16; ++j) hf_blocks[j] = static_cast<uint8_t>(nib(2 * j) | nib(2 * j + 1) << 4);
  }
}

}  // namespace deepinfer
