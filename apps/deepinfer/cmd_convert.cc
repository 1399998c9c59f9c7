#include <cstdio>

#include "args.h"
#include "base/logging.h"
#include "base/thread_pool.h"
#include "commands.h"
#include "model/convert.h"

namespace deepinfer::cli {

int CmdConvert(int argc, char** argv) {
  Args args("convert",
            "Convert a Hugging Face checkpoint directory (config.json, *.safetensors, tokenizer.json) to one GGUF file\n"
            "in the layout llama.cpp's converter writes, so the same weights run in llama.cpp. Architectures: llama,\n"
            "mistral, mixtral, qwen2, qwen3, qwen2_moe, qwen3_moe, olmo2, smollm3, deepseek_v2/v3 (MLA as split\n"
            "attn_k_b/attn_v_b, MTP modules as blk.N.nextn.*). Tokenizers: byte-level BPE (Llama 3, Qwen, DeepSeek).",
            {
                {"model", "m", "DIR", "", "Hugging Face model directory, or an f32/f16/bf16 .gguf to re-type (needs --outtype)"},
                {"out", "o", "FILE", "", "output .gguf file (written atomically)"},
                {"outtype", "", "TYPE", "auto", "matrix type: auto (keep f32/f16/bf16; FP8 -> bf16) | f32 | f16 | bf16 | q8_0 | q4_0 | q4_1 | q5_0 | q5_1 | q2_k | q3_k_s | q3_k_m | q3_k_l | q4_k_s | q4_k_m | q5_k_s | q5_k_m | q6_k | mxfp4_moe (experts MXFP4, other matrices q8_0), with llama.cpp's per-tensor mixes (q3_k, q4_k, q5_k: llama-quantize's aliases of the _m mixes)"},
                {"pure", "", "", "", "no mix: every quantized matrix in the type's base type (llama-quantize --pure)"},
                {"no-mtp", "", "", "", "leave DeepSeek MTP modules out (DeepSeek-V3: blk.N.nextn.* in the GGUF; DeepSeek-V4: the block goes to mtp-NAME.gguf beside it, which --mtp-model loads)"},
                {"threads", "t", "N", "all cores", "threads quantizing each tensor's rows (the output bytes do not depend on it)"},
                {"quiet", "q", "", "", "no progress output"},
            });
  if (auto exit_code = ParseCommandLine(args, argc, argv)) return *exit_code;
  if (!args.Has("model") || !args.Has("out")) return Fail(InvalidArgument("convert needs -m DIR and -o FILE"));
  ConvertOptions opts;
  const std::string t = args.Get("outtype");
  if (t != "auto") {
    if (!ParseOutType(t, &opts)) return Fail(InvalidArgument("unknown --outtype '" + t + "'"));
  }
  if (args.Has("threads")) SetComputeThreads(static_cast<int>(args.GetInt("threads")));
  opts.pure = args.Has("pure");
  if (opts.pure && opts.ftype < 0) return Fail(InvalidArgument("--pure needs a quantized --outtype"));
  opts.mtp = !args.Has("no-mtp");
  opts.progress = !args.Has("quiet");
  if (args.Has("quiet")) SetLogLevel(LogLevel::kWarn);
  if (Status s = ConvertHfToGguf(args.Get("model"), args.Get("out"), opts); !s.ok()) return Fail(s);
  return 0;
}

}  // namespace deepinfer::cli
