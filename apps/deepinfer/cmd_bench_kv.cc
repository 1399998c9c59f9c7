// `deepinfer bench kv`: KV cache bytes per sequence and the concurrency a --kv-cache budget holds, for the hybrid
// cache (sliding-window layers in KV groups whose blocks leave with the window) next to --swa-full (every layer
// keeps every position), at the context lengths asked for. Arithmetic over the layouts the engine builds
// (GroupKvLayout, MaxSeqBlocks), no weights: a model's shape comes from a built-in preset or a model file.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "args.h"
#include "commands.h"
#include "kv/kv_groups.h"
#include "model/arch/arch.h"
#include "kv/paged_kv_cache.h"
#include "model/make_tiny.h"
#include "model/model.h"
#include "startup.h"

namespace deepinfer::cli {
namespace {

struct KvShape {
  std::string name;
  KvLayout base;             // every layer, one group
  std::vector<int> windows;  // per layer: 0 = full attention
};

// The shapes of make-tiny's presets (the same ones `make-tiny --preset` writes): gpt-oss's even layers and five of
// Gemma 3's six are windowed, by the families' shared pattern rule.
// DeepSeek-V4-Flash's published config.json (the fields the KV layout reads), and DeepSeek-V3's MLA cache next to
// it (61 layers of the 512 + 64 latent, nothing windowed).
constexpr const char* kDeepseekV4Flash = R"({"model_type": "deepseek_v4", "vocab_size": 129280, "hidden_size": 4096,
  "num_hidden_layers": 43, "num_attention_heads": 64, "num_key_value_heads": 1, "head_dim": 512, "qk_rope_head_dim": 64,
  "q_lora_rank": 1024, "o_groups": 8, "o_lora_rank": 1024, "sliding_window": 128, "compress_rope_theta": 160000,
  "compress_ratios": [0, 0, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128,
                      4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 0],
  "index_n_heads": 64, "index_head_dim": 128, "index_topk": 512, "n_routed_experts": 256, "num_experts_per_tok": 6,
  "n_shared_experts": 1, "moe_intermediate_size": 2048, "intermediate_size": 2048, "routed_scaling_factor": 1.5,
  "swiglu_limit": 10.0, "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6, "num_hash_layers": 3,
  "max_position_embeddings": 1048576, "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 65536}})";

StatusOr<KvShape> Preset(const std::string& name) {
  KvShape k;
  k.name = name;
  if (name == "deepseek-v4-flash") {
    DI_ASSIGN_OR_RETURN(const ModelConfig c, ParseHfConfig(kDeepseekV4Flash, "deepseek-v4-flash"));
    k.base = c.kv_layout();
    k.windows = c.kv_layer_windows();
    return k;
  }
  if (name == "deepseek-v3") {
    k.base = KvLayout::Plain(61, 512 + 64, 0);
    k.windows.assign(61, 0);
    return k;
  }
  TinySpec s;
  if (!TinyPreset(name, &s)) return InvalidArgument("bench kv: unknown --shape '" + name + "'");
  k.base = KvLayout::Plain(s.layers, s.kv_heads * s.head_dim, s.kv_heads * s.head_dim);
  const std::vector<bool> windowed = SwaLayerPattern(s.layers, s.swa_period);
  for (int l = 0; l < s.layers; ++l) k.windows.push_back(s.window > 0 && windowed[static_cast<size_t>(l)] ? s.window : 0);
  return k;
}

}  // namespace

int CmdBenchKv(int argc, char** argv) {
  Args args("bench kv",
            "KV cache bytes per sequence and the concurrency that fits --kv-cache, hybrid (windowed layers release\n"
            "the blocks that left their window) next to --swa-full (every layer keeps every position), at each\n"
            "context length. Counts what the engine would hold at most: every block of a full-attention layer, and a\n"
            "windowed layer's window plus the chunks in flight (two with the overlap scheduler).",
            {
                {"shape", "", "LIST", "gpt-oss-20b,gemma-3-4b", "comma-separated shapes: gpt-oss-20b, gpt-oss-120b, deepseek-v4-flash, deepseek-v3 (MLA), or a make-tiny preset (gemma-3-1b, gemma-3-4b, ...)"},
                {"ctx", "", "LIST", "8192,32768", "context lengths (tokens per sequence)"},
                {"kv-cache", "", "SIZE", "16GiB", "the KV budget (as serve's --kv-cache, bytes with a unit)"},
                {"kv-cache-dtype", "", "T", "bf16", "K/V element type: f32, bf16 or f16"},
                {"block-size", "", "N", "16", "tokens per KV block"},
                {"max-batched-tokens", "", "N", "512", "the chunk size (prefill tokens per step)"},
                {"no-overlap", "", "", "", "overlap depth 0: one chunk in flight, not two"},
                {"out", "", "FILE", "", "write the results as JSON"},
            });
  if (auto exit_code = ParseCommandLine(args, argc, argv)) return *exit_code;
  size_t budget = 0;
  double fraction = 0;
  if (Status s = ParseSize(args.Get("kv-cache"), &budget, &fraction); !s.ok()) return Fail(s);
  if (budget == 0) return Fail(InvalidArgument("bench kv: --kv-cache must be a size in bytes (16GiB), not a fraction"));
  if (Status s = CheckKvCacheDtype(args.Get("kv-cache-dtype")); !s.ok()) return Fail(s);
  const DType dtype = DTypeFromName(args.Get("kv-cache-dtype"));
  const int bs = static_cast<int>(args.GetInt("block-size"));
  const int64_t chunk = args.GetInt("max-batched-tokens");
  if (bs < 1 || chunk < 1) return Fail(InvalidArgument("bench kv: --block-size and --max-batched-tokens must be >= 1"));

  std::vector<int64_t> ctxs;
  {
    std::stringstream ss(args.Get("ctx"));
    for (std::string t; std::getline(ss, t, ',');) {
      const long long v = std::atoll(t.c_str());
      if (v < 1) return Fail(InvalidArgument("bench kv: bad --ctx entry '" + t + "'"));
      ctxs.push_back(v);
    }
  }
  nlohmann::json out = nlohmann::json::array();
  std::printf("%-14s %7s %16s %16s %14s %14s %7s\n", "shape", "ctx", "hybrid MiB/seq", "swa-full MiB/seq", "hybrid seqs",
              "swa-full seqs", "ratio");
  std::stringstream shapes(args.Get("shape"));
  for (std::string name; std::getline(shapes, name, ',');) {
    auto shape = Preset(name);
    if (!shape.ok()) return Fail(shape.status());
    const KvLayout hybrid = GroupKvLayout(shape->base, shape->windows, bs);
    // --swa-full: every layer keeps every position (sparse layers still packed, as the engine does).
    const KvLayout swa_full = GroupKvLayout(shape->base, std::vector<int>(shape->windows.size(), 0), bs);
    for (const int64_t ctx : ctxs) {
      // Bytes one sequence holds at most, and how many such sequences the budget's blocks hold at once.
      auto fit = [&](const KvLayout& l, double* mib) {
        // What the engine sizes and admits by (Engine::Create, Engine::Validate).
        const int64_t ahead = KvAhead(args.Has("no-overlap") ? 1 : 2, chunk, 0);
        const size_t block_bytes = PagedKvCache::BytesPerToken(l, dtype) * bs;
        const int64_t seq_blocks = MaxSeqBlocks(l, bs, ctx, ahead);
        *mib = static_cast<double>(seq_blocks) * block_bytes / 1048576.0;
        return static_cast<int64_t>(budget / block_bytes) / seq_blocks;
      };
      double mib_h = 0, mib_f = 0;
      const int64_t seqs_h = fit(hybrid, &mib_h), seqs_f = fit(swa_full, &mib_f);
      std::printf("%-14s %7lld %16.1f %16.1f %14lld %14lld %6.2fx\n", name.c_str(), static_cast<long long>(ctx), mib_h,
                  mib_f, static_cast<long long>(seqs_h), static_cast<long long>(seqs_f),
                  seqs_f > 0 ? static_cast<double>(seqs_h) / seqs_f : INFINITY);
      out.push_back({{"shape", name}, {"ctx", ctx}, {"kv_groups", hybrid.num_groups()}, {"planes", hybrid.num_planes()},
                     {"padding_planes", PaddingPlanes(hybrid)}, {"hybrid_mib_per_seq", mib_h},
                     {"swa_full_mib_per_seq", mib_f}, {"hybrid_concurrency", seqs_h}, {"swa_full_concurrency", seqs_f}});
    }
  }
  if (args.Has("out")) std::ofstream(args.Get("out")) << out.dump(2) << "\n";
  return 0;
}

}  // namespace deepinfer::cli
