#include <cstdio>

#include "args.h"
#include "base/logging.h"
#include "commands.h"
#include "model/make_tiny.h"

namespace deepinfer::cli {

int CmdMakeTiny(int argc, char** argv) {
  Args args("make-tiny",
            "Write a random-weight model (seeded, reproducible) in a real architecture's exact layout. With --format both\n"
            "(default) OUT becomes an HF directory (config.json, model.safetensors, tokenizer.json) that also holds\n"
            "OUT/model.gguf with the same weights, so llama.cpp can run the identical model.",
            {
                {"arch", "", "ARCH", "llama", "llama | mistral | qwen2 | qwen3 | qwen3_moe | qwen2_moe | mixtral | deepseek_v3 | olmo2 | smollm3 | gemma3 | gpt_oss"},
                {"preset", "", "NAME", "", "realistic shape: llama-3.2-1b | qwen3-0.6b | qwen2.5-0.5b | gemma-3-1b | gemma-3-4b | gpt-oss-20b | gpt-oss-120b (sets arch and sizes; --layers cuts it)"},
                {"out", "o", "PATH", "", "output directory (hf, both) or file (gguf)"},
                {"format", "", "FMT", "both", "hf | gguf | both"},
                {"dtype", "", "TYPE", "f32", "f32 | f16 | bf16 | q8_0 | q4_0 | q4_1 | q5_0 | q5_1 | q2_K..q6_K | mxfp4 (quantized types: every matrix in the GGUF; the HF copy holds the dequantized values)"},
                {"expert-dtype", "", "TYPE", "", "gpt_oss: the routed experts' type when it differs from --dtype (mxfp4: the GGUF holds ggml's MXFP4 experts, the HF copy the same blocks in HF's *_blocks / *_scales packing; deepseek_v4: mxfp4, the HF copy packed per expert as DeepSeek's checkpoints)"},
                {"seed", "", "N", "1", "random seed"},
                {"vocab-seed", "", "N", "--seed", "tokenizer seed: models made with the same --vocab-seed and --vocab share a vocabulary (a target and its draft)"},
                {"vocab", "", "N", "512", "vocabulary size"},
                {"hidden", "", "N", "64", "hidden size"},
                {"layers", "", "N", "2", "transformer layers"},
                {"heads", "", "N", "4", "attention heads"},
                {"kv-heads", "", "N", "2", "key/value heads (GQA)"},
                {"head-dim", "", "N", "hidden/heads", "head dimension"},
                {"ffn", "", "N", "128", "MLP intermediate size"},
                {"ctx", "", "N", "2048", "context length"},
                {"experts", "", "N", "8", "MoE families: routed experts per layer"},
                {"experts-used", "", "N", "2", "MoE families: experts per token"},
                {"expert-ffn", "", "N", "32", "MoE: expert intermediate size"},
                {"q-lora", "", "N", "48", "deepseek_v3: q_lora_rank (0 = plain q projection, as V2-Lite)"},
                {"kv-lora", "", "N", "32", "deepseek_v3: kv_lora_rank (the cached latent)"},
                {"qk-nope", "", "N", "16", "deepseek_v3: qk_nope_head_dim"},
                {"qk-rope", "", "N", "8", "deepseek_v3: qk_rope_head_dim"},
                {"v-head", "", "N", "16", "deepseek_v3: v_head_dim"},
                {"shared-experts", "", "N", "1", "deepseek_v3, qwen2_moe: shared experts (qwen2_moe: the shared expert is this many expert FFNs wide)"},
                {"first-dense", "", "N", "1", "deepseek_v3: leading dense layers (first_k_dense_replace)"},
                {"groups", "", "N", "4", "deepseek_v3: expert groups (n_group)"},
                {"groups-used", "", "N", "2", "deepseek_v3: groups kept per token (topk_group)"},
                {"mtp", "", "", "", "deepseek_v3, deepseek_v4: add one MTP (next-token prediction) module after the last layer"},
                {"hf-layout", "", "NAME", "", "deepseek_v4: the HF directory's spelling: deepseek (the default: DeepSeek's own checkpoint names, embed / layers.{L}.attn.wq_a / ffn.experts.{e}.w1, mtp.0.*) or transformers (transformers' DeepseekV4ForCausalLM names, model.layers.{L}.self_attn.q_a_proj, fused mlp.experts.gate_up_proj, layer_types / compress_rates in config.json; float types, no MTP block); the same weights either way, and the GGUF is the same"},
                {"split-kv-b", "", "", "", "deepseek_v3 GGUF: store kv_b pre-split as attn_k_b/attn_v_b (llama.cpp's current layout)"},
                {"window", "", "N", "", "sliding window: of gemma3 and gpt_oss's windowed layers (default 16), of every mistral layer (default none)"},
                {"swa-pattern", "", "N", "min(6, layers)", "gemma3: every N-th layer attends globally, the others within --window"},
                {"rope-theta", "", "F", "10000", "RoPE base"},
                {"tie", "", "", "", "tie lm_head to the embeddings"},
                {"rope-scaling", "", "TYPE", "", "llama3: llama-3.1-style frequency scaling (factor 32); linear: positions divided by 8 (gemma3: its global layers); yarn (deepseek_v3): factor 4, original context 32"},
                {"quiet", "q", "", "", "no progress output"},
            });
  if (auto exit_code = ParseCommandLine(args, argc, argv)) return *exit_code;
  TinySpec s;
  if (args.Has("preset")) {
    if (!TinyPreset(args.Get("preset"), &s)) return Fail(InvalidArgument("unknown preset '" + args.Get("preset") + "'"));
    // A preset cut to its first layers keeps the others' weights (tensors are seeded by name): with the same
    // --seed it is the full preset's first --layers layers plus its embeddings and head, a speculative draft.
    if (args.Has("layers")) s.layers = static_cast<int>(args.GetInt("layers"));
  } else {
    if (!ArchFromName(args.Get("arch"), &s.arch)) return Fail(InvalidArgument("unknown architecture '" + args.Get("arch") + "'"));
    s.vocab = static_cast<int>(args.GetInt("vocab"));
    s.hidden = static_cast<int>(args.GetInt("hidden"));
    s.layers = static_cast<int>(args.GetInt("layers"));
    s.heads = static_cast<int>(args.GetInt("heads"));
    s.kv_heads = static_cast<int>(args.GetInt("kv-heads"));
    s.head_dim = args.Has("head-dim") ? static_cast<int>(args.GetInt("head-dim")) : 0;
    s.intermediate = static_cast<int>(args.GetInt("ffn"));
    s.ctx = static_cast<int>(args.GetInt("ctx"));
    s.rope_theta = args.GetFloat("rope-theta");
    s.tie_embeddings = args.Has("tie");
    s.experts = static_cast<int>(args.GetInt("experts"));
    s.experts_used = static_cast<int>(args.GetInt("experts-used"));
    s.moe_intermediate = static_cast<int>(args.GetInt("expert-ffn"));
    s.q_lora = static_cast<int>(args.GetInt("q-lora"));
    s.kv_lora = static_cast<int>(args.GetInt("kv-lora"));
    s.qk_nope = static_cast<int>(args.GetInt("qk-nope"));
    s.qk_rope = static_cast<int>(args.GetInt("qk-rope"));
    s.v_head = static_cast<int>(args.GetInt("v-head"));
    s.shared_experts = static_cast<int>(args.GetInt("shared-experts"));
    s.first_dense = static_cast<int>(args.GetInt("first-dense"));
    s.n_group = static_cast<int>(args.GetInt("groups"));
    s.topk_group = static_cast<int>(args.GetInt("groups-used"));
    if (args.Has("window")) s.window = static_cast<int>(args.GetInt("window"));
    if (args.Has("swa-pattern")) s.swa_period = static_cast<int>(args.GetInt("swa-pattern"));
    if (s.window < 0 || s.swa_period < 0) return Fail(InvalidArgument("--window and --swa-pattern must not be negative"));
    s.mtp = args.Has("mtp");
    s.split_kv_b = args.Has("split-kv-b");
    s.hf_layout = args.Get("hf-layout");  // checked against the family's layouts by MakeTinyModel
    if (s.mtp && s.arch != Arch::kDeepseekV3 && s.arch != Arch::kDeepseekV4)
      return Fail(InvalidArgument("--mtp is for --arch deepseek_v3 and deepseek_v4"));
    if (s.split_kv_b && s.arch != Arch::kDeepseekV3) return Fail(InvalidArgument("--split-kv-b is for --arch deepseek_v3"));
    if (args.Has("rope-scaling")) {
      const std::string rs = args.Get("rope-scaling");
      if (rs == "llama3") s.llama3_rope_scaling = true;
      else if (rs == "linear") s.rope_linear = 8.0;
      else if (rs == "yarn" && s.arch == Arch::kDeepseekV3) s.yarn = true;
      else return Fail(InvalidArgument("--rope-scaling supports llama3, linear, and yarn for deepseek_v3"));
    }
    if (s.vocab <= 0 || s.hidden <= 0 || s.layers <= 0 || s.heads <= 0 || s.kv_heads <= 0 || s.intermediate <= 0 || s.ctx <= 0)
      return Fail(InvalidArgument("sizes must be positive"));
  }
  s.seed = static_cast<uint64_t>(args.GetInt("seed"));
  if (args.Has("vocab-seed")) s.vocab_seed = static_cast<uint64_t>(args.GetInt("vocab-seed"));
  s.dtype = DTypeFromName(args.Get("dtype"));
  if (s.dtype == DType::kInvalid || s.dtype == DType::kI32 || !CanQuantizeRow(s.dtype)) return Fail(InvalidArgument("unknown --dtype '" + args.Get("dtype") + "'"));
  if (args.Has("expert-dtype") && !args.Get("expert-dtype").empty()) {
    s.expert_dtype = DTypeFromName(args.Get("expert-dtype"));
    if (s.expert_dtype == DType::kInvalid || s.expert_dtype == DType::kI32 || !CanQuantizeRow(s.expert_dtype))
      return Fail(InvalidArgument("unknown --expert-dtype '" + args.Get("expert-dtype") + "'"));
  }
  const std::string fmt = args.Get("format");
  TinyFormat f = fmt == "hf" ? TinyFormat::kHf : fmt == "gguf" ? TinyFormat::kGguf : TinyFormat::kBoth;
  if (fmt != "hf" && fmt != "gguf" && fmt != "both") return Fail(InvalidArgument("--format must be hf, gguf or both"));
  if (!args.Has("out")) return Fail(InvalidArgument("--out is required"));
  if (Status st = MakeTinyModel(s, f, args.Get("out"), args.Has("quiet")); !st.ok()) return Fail(st);
  if (!args.Has("quiet")) DI_LOG_INFO("wrote %s (%s, %s, seed %llu)", args.Get("out").c_str(), ArchName(s.arch), DTypeName(s.dtype),
                                      static_cast<unsigned long long>(s.seed));
  return 0;
}

}  // namespace deepinfer::cli
