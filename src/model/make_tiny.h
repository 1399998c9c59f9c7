// Random-weight models (seeded) in real architectures' exact layouts, written as an HF directory and/or a GGUF
// holding the same weights (GGUF q/k rows permuted for llama-style RoPE, exactly as llama.cpp's converter does),
// so the same numbers run in deepinfer and in llama.cpp.
#pragma once
#include <cstdint>
#include <string>

#include "deepinfer/status.h"
#include "model/config.h"
#include "tensor/dtype.h"

namespace deepinfer {

struct TinySpec {
  Arch arch = Arch::kLlama;
  int vocab = 512;
  int hidden = 64;
  int layers = 2;
  int heads = 4;
  int kv_heads = 2;
  int head_dim = 0;  // 0: hidden / heads
  int intermediate = 128;
  int ctx = 2048;
  double rope_theta = 10000.0;
  bool tie_embeddings = false;
  bool llama3_rope_scaling = false;
  double rope_linear = 1.0;  // rope_scaling linear with this factor (1: none)
  DType dtype = DType::kF32;
  // gpt_oss: the routed experts' type (kInvalid: dtype). MXFP4 experts go to the HF directory as HF's MXFP4
  // blocks and scales, the GGUF's bytes repacked.
  DType expert_dtype = DType::kInvalid;
  // qwen3_moe: every layer routes over `experts` experts (moe_intermediate each), experts_used per token.
  int experts = 8, experts_used = 2, moe_intermediate = 32;
  // deepseek_v3: MLA sizes (q_lora 0 = a plain q projection, as V2-Lite), shared experts, leading dense layers,
  // group-limited sigmoid routing with a correction bias (noaux_tc) and the routed scaling factor.
  int q_lora = 48, kv_lora = 32, qk_nope = 16, qk_rope = 8, v_head = 16;
  int shared_experts = 1, first_dense = 1, n_group = 4, topk_group = 2;
  float routed_scale = 2.5f;
  bool yarn = false;  // deepseek_v3: rope_scaling yarn (factor 4, original context 32, mscale = mscale_all_dim = 1)
  // deepseek_v3: one MTP (next-n) module after the last layer: model.layers.{layers}.* with enorm/hnorm/eh_proj/
  // shared_head and its own embed_tokens/head copies (GGUF: blk.{layers}.nextn.*, block_count = layers + 1).
  bool mtp = false;
  // The spelling of the HF directory's tensors and config for families with more than one (ArchSpec::hf_layout;
  // deepseek_v4: "deepseek", the default, or "transformers"). Empty: the family's own.
  std::string hf_layout;
  // deepseek_v3 GGUF: write kv_b pre-split as attn_k_b (W_UK transposed) / attn_v_b, as llama.cpp's converter
  // does today (MQA form: key_length = kv_lora + rope, head_count_kv = 1). The HF directory keeps kv_b_proj.
  bool split_kv_b = false;
  // Sliding-window families (gemma3): the window and its layer pattern (0: the family's tiny default).
  int window = 0, swa_period = 0;
  uint64_t seed = 1;
  // The tokenizer's seed (0: seed). Two models with the same vocab_seed and vocab share a vocabulary whatever
  // their weights: a target and its draft for speculative decoding.
  uint64_t vocab_seed = 0;
};

// Named realistic shapes: "llama-3.2-1b", "qwen3-0.6b", "qwen2.5-0.5b", "gemma-3-1b", "gemma-3-4b", "gpt-oss-20b",
// "gpt-oss-120b"; returns false if unknown.
bool TinyPreset(const std::string& name, TinySpec* spec);

enum class TinyFormat { kHf, kGguf, kBoth };

// kHf: `out` is a directory. kGguf: `out` is a file. kBoth: `out` is an HF directory that also holds model.gguf.
Status MakeTinyModel(const TinySpec& spec, TinyFormat format, const std::string& out, bool quiet = false);

}  // namespace deepinfer
