// deepinfer bench layers: one layer's MoE MLP and one layer's attention (MLA decode for DeepSeek models) on their
// own, tokens/s against batch size, with the bytes each step actually reads and the fraction of the measured
// memory bandwidth that makes (the decode roofline). MoE: the router, the shared experts and every expert at
// least one token of the batch was routed to. Attention decode: the attention weights as the kernels read them
// (for absorbed MLA: W_UK^T in f32, the W_UV rows, q/kv projections, wo) plus every sequence's cached K/V rows.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "args.h"
#include "base/thread_pool.h"
#include "commands.h"
#include "engine_flags.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/membw.h"
#include "model/transformer.h"
#include "startup.h"

namespace deepinfer::cli {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double ExpertBytes(const LayerWeights& L, int e) {
  return static_cast<double>(L.moe.gate[e].nbytes + L.moe.up[e].nbytes + L.moe.down[e].nbytes);
}

// Bytes the attention block reads from weights for one step (batch-independent).
double AttentionWeightBytes(const ModelConfig& c, const LayerWeights& L) {
  double b = 0;
  for (const TensorView* t : {&L.gqa.wq, &L.gqa.wk, &L.gqa.wv, &L.gqa.wo, &L.mla.wq, &L.mla.wo, &L.mla.wq_a, &L.mla.wq_b, &L.mla.wkv_a})
    b += static_cast<double>(t->nbytes);
  if (c.mla) {
    b += static_cast<double>(L.mla.uk_t.size() * sizeof(float));
    b += L.mla.wv_b.data ? static_cast<double>(L.mla.wv_b.nbytes)
                         : static_cast<double>(L.mla.wkv_b.nbytes) * c.v_head_dim / (c.qk_nope_dim + c.v_head_dim);
  }
  return b;
}

// Weight elements the attention block multiplies per token (the same tensors as AttentionWeightBytes).
double AttentionWeightElems(const ModelConfig& c, const LayerWeights& L) {
  double e = 0;
  for (const TensorView* t : {&L.gqa.wq, &L.gqa.wk, &L.gqa.wv, &L.gqa.wo, &L.mla.wq, &L.mla.wo, &L.mla.wq_a, &L.mla.wq_b, &L.mla.wkv_a})
    if (t->data) e += static_cast<double>(t->numel());
  if (c.mla) e += static_cast<double>(c.n_heads) * c.kv_lora_rank * (c.qk_nope_dim + c.v_head_dim);  // W_UK^T, W_UV
  return e;
}

}  // namespace

int CmdBenchLayers(int argc, char** argv) {
  Args args("bench layers",
            "MoE-layer and attention-decode microbenchmarks: tokens/s vs batch size for one layer's routed MLP and one\n"
            "layer's attention (MLA for DeepSeek models) decoding one token per sequence after --ctx cached tokens, with\n"
            "the bytes read per step and the fraction of the measured read bandwidth achieved (the decode roofline).",
            {
                {"model", "m", "MODEL", "", "GGUF file or HF directory (a MoE and/or MLA model)"},
                {"threads", "t", "N", "all cores", "compute threads"},
                {"batch-sizes", "b", "LIST", "1,2,4,8,16,32,64", "batch sizes (tokens for MoE, sequences for attention)"},
                {"ctx", "", "N", "1024", "attention: cached tokens per sequence"},
                {"kv-cache-dtype", "", "TYPE", "f32", "attention: KV cache type (f32 | bf16 | f16)"},
                {"reps", "r", "N", "5", "repetitions per point (best is reported)"},
                {"out", "", "FILE", "", "write the results as JSON"},
                DI_WEIGHT_FLAGS,
            });
  if (auto exit_code = ParseCommandLine(args, argc, argv)) return *exit_code;
  const int threads = args.Has("threads") ? static_cast<int>(args.GetInt("threads")) : DefaultThreadCount();
  SetComputeThreads(threads);
  std::vector<int> batches;
  {
    std::stringstream ss(args.Get("batch-sizes"));
    for (std::string item; std::getline(ss, item, ',');) {
      const int b = std::atoi(item.c_str());
      if (b <= 0 || b > 4096) return Fail(InvalidArgument("--batch-sizes: each must be in [1, 4096]"));
      batches.push_back(b);
    }
  }
  const int ctx = static_cast<int>(args.GetInt("ctx")), reps = std::max<int>(1, static_cast<int>(args.GetInt("reps")));
  if (ctx < 1 || ctx > (1 << 20)) return Fail(InvalidArgument("--ctx must be in [1, 1048576]"));
  if (Status s = CheckKvCacheDtype(args.Get("kv-cache-dtype")); !s.ok()) return Fail(s);
  const DType kv_dtype = DTypeFromName(args.Get("kv-cache-dtype"));
  auto model = LoadModelOrDie(args.Get("model"), LoadOptionsFromArgs(args));
  const Model& m = *model;
  const ModelConfig& c = m.config;
  const int max_b = *std::max_element(batches.begin(), batches.end());
  Transformer tf(m, max_b, nullptr);  // one process
  const double bw = MeasureReadBandwidthGBs();
  std::printf("deepinfer bench layers: %s, %d threads, kernels %s, read bandwidth %.2f GB/s\n", c.Summary().c_str(), threads,
              IsaName(ActiveIsa()), bw);
  nlohmann::json result = {{"benchmark", "layers"}, {"threads", threads}, {"membw_gbs", bw}, {"moe", nlohmann::json::array()},
                           {"attention", nlohmann::json::array()}};
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.f, 1.f);

  // ---- MoE layer
  int moe_layer = -1;
  for (int l = 0; l < c.n_layers && moe_layer < 0; ++l)
    if (m.layers[l].is_moe()) moe_layer = l;
  if (moe_layer >= 0) {
    const LayerWeights& L = m.layers[moe_layer];
    double fixed = static_cast<double>(L.moe.router.nbytes + L.moe.shared.gate.nbytes + L.moe.shared.up.nbytes +
                                       L.moe.shared.down.nbytes + L.moe.shared_gate.nbytes);
    std::printf("\nMoE layer %d: %d experts, %d used per token, expert FFN %d, %d shared (%s)\n", moe_layer, c.n_experts,
                c.n_experts_used, c.moe_intermediate, c.n_shared_experts, DTypeName(L.moe.gate[0].dtype));
    std::printf("%6s %8s %12s %12s %10s %10s\n", "batch", "experts", "tokens/s", "MB/step", "GB/s", "roofline");
    for (int b : batches) {
      std::vector<float> xn(static_cast<size_t>(b) * c.hidden);
      for (float& v : xn) v = normal(rng);
      double best = 1e30;
      int hit = 0;
      for (int r = 0; r < reps + 1; ++r) {  // the first run warms caches and page tables
        const auto t0 = Clock::now();
        auto h = tf.BenchMoe(moe_layer, xn.data(), b);
        if (!h.ok()) return Fail(h.status());
        if (r) best = std::min(best, Seconds(t0));
        hit = *h;
      }
      // The routing is the same every rep; experts are equal-sized.
      const double bytes = fixed + ExpertBytes(L, 0) * hit;
      const double gbs = bytes / best / 1e9;
      std::printf("%6d %8d %12.1f %12.1f %10.2f %9.1f%%\n", b, hit, b / best, bytes / 1e6, gbs, 100 * gbs / bw);
      result["moe"].push_back({{"batch", b}, {"experts_hit", hit}, {"tokens_per_second", b / best}, {"bytes_per_step", bytes},
                               {"gbs", gbs}, {"roofline_fraction", gbs / bw}});
    }
  }

  // ---- attention decode: every sequence holds ctx cached tokens and decodes one
  const LayerWeights& L0 = m.layers[0];
  const double wbytes = AttentionWeightBytes(c, L0);
  const double weight_elems = AttentionWeightElems(c, L0);
  std::printf("\n%s decode, layer 0: %d cached tokens per sequence, %s KV cache (%zu B per token per layer)\n",
              c.mla ? "MLA (absorbed)" : "attention", ctx, DTypeName(kv_dtype),
              PagedKvCache::BytesPerToken(c.kv_layout(), kv_dtype) / static_cast<size_t>(c.n_layers));
  // Arithmetic per decoded token: every weight once (2 FLOP per element) and, per head, q.k over hd_k and p.v over
  // hd_v for each cached position. Absorbed MLA is compute-heavy: all heads read the same latent rows.
  const int hd_k = c.mla ? c.kv_lora_rank + c.qk_rope_dim : c.head_dim, hd_v = c.mla ? c.kv_lora_rank : c.head_dim;
  const double attn_flops_per_pos = 2.0 * c.n_heads * (hd_k + hd_v);
  // The attention arithmetic runs as f32 FMAs (K/V converted to f32 on load): its compute ceiling.
  const PeakInfo fma_pk = MeasurePeak(PeakOp::kF32Fma);
  const double fma_peak = fma_pk.gops;
  std::printf("f32 FMA peak %.1f GFLOP/s (%s)\n", fma_peak, DescribePeak(fma_pk).c_str());
  result["f32_fma_peak_gflops"] = fma_peak;
  std::printf("%6s %12s %12s %12s %10s %10s %10s %9s\n", "seqs", "tokens/s", "weights MB", "KV MB", "GB/s", "roofline",
              "GFLOP/s", "of peak");
  constexpr int kBlock = 16;
  const int blocks_per_seq = (ctx + 1 + kBlock - 1) / kBlock;
  for (int b : batches) {
    auto kv = PagedKvCache::Create(c.kv_layout(), b * blocks_per_seq, kBlock, kv_dtype);
    if (!kv.ok()) return Fail(kv.status());
    // Real bytes in every slot of layer 0 (an untouched buffer would read the shared zero page).
    {
      const int slots = b * blocks_per_seq * kBlock, chunk = 1024;
      std::vector<float> krow(static_cast<size_t>(chunk) * (*kv)->k_row_elems()), vrow(static_cast<size_t>(chunk) * std::max(1, (*kv)->v_row_elems()));
      for (float& v : krow) v = normal(rng);
      for (float& v : vrow) v = normal(rng);
      std::vector<int32_t> rows(chunk);
      for (int s0 = 0; s0 < slots; s0 += chunk) {
        const int n = std::min(chunk, slots - s0);
        for (int i = 0; i < n; ++i) rows[i] = s0 + i;
        (*kv)->Write(0, krow.data(), (*kv)->v_row_elems() ? vrow.data() : nullptr, rows.data(), n);
      }
    }
    std::vector<std::vector<int32_t>> tables(b);
    std::vector<int32_t> toks(b);
    std::vector<SeqForward> seqs(b);
    for (int s = 0; s < b; ++s) {
      for (int k = 0; k < blocks_per_seq; ++k) tables[s].push_back(s * blocks_per_seq + k);
      toks[s] = static_cast<int32_t>(rng() % static_cast<uint64_t>(c.vocab_size));
      seqs[s] = {&toks[s], 1, ctx, tables[s].data(), blocks_per_seq, false};
    }
    double best = 1e30;
    for (int r = 0; r < reps + 1; ++r) {
      const auto t0 = Clock::now();
      if (Status st = tf.BenchAttention(0, seqs.data(), b, **kv); !st.ok()) return Fail(st);
      if (r) best = std::min(best, Seconds(t0));
    }
    const double kv_bytes = static_cast<double>(b) * (ctx + 1) * (*kv)->bytes_per_token_per_layer();
    const double gbs = (wbytes + kv_bytes) / best / 1e9;
    const double gflops = b * (2.0 * weight_elems + attn_flops_per_pos * (ctx + 1)) / best / 1e9;
    std::printf("%6d %12.1f %12.1f %12.1f %10.2f %9.1f%% %10.1f %8.1f%%\n", b, b / best, wbytes / 1e6, kv_bytes / 1e6, gbs,
                100 * gbs / bw, gflops, fma_peak > 0 ? 100 * gflops / fma_peak : 0.0);
    if (fma_peak > 0 && gflops > fma_peak)
      std::printf("  !!! WARNING: %.1f GFLOP/s is ABOVE the measured f32 FMA peak (%.1f%%): the probe or the FLOP count is\n"
                  "  !!! wrong, or part of this work runs on another instruction (bf16 weights on vdpbf16ps)\n",
                  gflops, 100 * gflops / fma_peak);
    result["attention"].push_back({{"batch", b}, {"tokens_per_second", b / best}, {"weight_bytes", wbytes}, {"kv_bytes", kv_bytes},
                                   {"gbs", gbs}, {"roofline_fraction", gbs / bw}, {"gflops", gflops},
                                   {"peak_fraction", fma_peak > 0 ? gflops / fma_peak : 0.0}, {"peak_above_limit", fma_peak > 0 && gflops > fma_peak}});
  }
  if (args.Has("out")) std::ofstream(args.Get("out")) << result.dump(2) << "\n";
  return 0;
}

}  // namespace deepinfer::cli
