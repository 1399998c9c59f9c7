// Batch-1 GEMV microbenchmark: y = W x for one weight matrix in a stored type, timed over many calls on a weight
// set larger than the caches (several copies of the matrix, cycled), so each call streams its weights from DRAM
// as a decode step does. Reports GB/s of weight bytes read and the matrix's time per call.
//   build/bench_gemv [type=q4_K] [rows=8192] [cols=2048] [threads=1] [m=1] [novnni] [cached] [x16]
//   build/bench_gemv layers TYPE [layers=16] [threads=2] [novnni] [x16] [vs TYPE2]
// type: any type the project quantizes to (q4_K, q6_K, q8_0, bf16, f16, f32, ...). m > 1 times a batch of m x rows
// (GB/s counts the weights once). novnni: the AVX-512 kernels without AVX512-VNNI (SetVnni(false)), for comparison
// on a VNNI CPU. cached: one copy of the matrix, so a matrix that fits the caches gives the kernel's compute rate
// (the bound it would meet with infinite memory bandwidth). x16 (q4_K, q6_K, q8_0, mxfp4): the matrix regrouped as the loader
// does (the _X16 types, dtype.h), so the product runs the layout's decode kernel. "layers": a whole Llama-3.2-1B-shaped decode step (Layers below);
// "vs TYPE2" alternates it with the same step in TYPE2 (file layout) and prints the GB/s ratio pair by pair.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/gemm.h"
#include "tensor/dtype.h"

using namespace deepinfer;

// A Llama-3.2-1B-shaped decode step over `layers` layers of distinct weights in one type: q, k, v, o, gate + up
// (one MatMulMany, as the model runs them), down.
struct LayerSet {
  std::vector<uint8_t> buf;
  std::vector<TensorView> views;  // 7 per layer
};

LayerSet MakeLayers(DType dt, int layers, bool x16) {
  struct Shape { int64_t n, k; };
  const Shape shapes[] = {{2048, 2048}, {512, 2048}, {512, 2048}, {2048, 2048}, {8192, 2048}, {8192, 2048}, {2048, 8192}};
  size_t per_layer = 0;
  for (const Shape& sh : shapes) per_layer += DTypeBytes(dt, static_cast<size_t>(sh.n * sh.k));
  LayerSet set;
  set.buf.resize(per_layer * layers);
  std::mt19937 rng(3);
  for (size_t i = 0; i < set.buf.size(); i += 4096) set.buf[i] = static_cast<uint8_t>(rng());  // fault in; block bytes
  // Random bytes are valid blocks except for non-finite f16 scales: the first 4 bytes of each block are set to a
  // finite 0x1010 pattern (d, dmin where the type keeps them first; bf16/f16 elements are 2 bytes: only those).
  const size_t bb = GetDTypeInfo(dt).block_bytes;
  for (size_t i = 0; i < set.buf.size(); i += bb) std::memset(set.buf.data() + i, 0x10, std::min<size_t>(4, bb));
  const DType vt = !x16 ? dt
                   : dt == DType::kQ4_K ? DType::kQ4_K_X16
                   : dt == DType::kQ6_K ? DType::kQ6_K_X16
                   : dt == DType::kQ8_0 ? DType::kQ8_0_X16
                                        : DType::kMXFP4_X16;
  size_t off = 0;
  for (int l = 0; l < layers; ++l)
    for (const Shape& sh : shapes) {
      const size_t b = DTypeBytes(dt, static_cast<size_t>(sh.n * sh.k));
      uint8_t* const w = set.buf.data() + off;
      if (x16 && dt == DType::kQ4_K) RepackQ4KX16(w, sh.n, sh.k);  // the loader's regrouping (dtype.h)
      if (x16 && dt == DType::kQ6_K) RepackQ6KX16(w, sh.n, sh.k);
      if (x16 && dt == DType::kQ8_0) RepackQ8_0X16(w, sh.n, sh.k);
      if (x16 && dt == DType::kMXFP4) RepackMXFP4X16(w, sh.n, sh.k);
      set.views.push_back(TensorView{vt, {sh.n, sh.k}, w, b});
      off += b;
    }
  return set;
}

double TimeStep(const LayerSet& set) {
  static std::vector<float> x(8192, 0.5f), y(8192 * 2);
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t l = 0; l < set.views.size() / 7; ++l) {
    const TensorView* v = &set.views[l * 7];
    for (int j = 0; j < 4; ++j) MatMul(v[j], x.data(), 1, y.data());
    const MatMulJob jobs[2] = {{&v[4], x.data(), 1, y.data()}, {&v[5], x.data(), 1, y.data() + 8192}};
    MatMulMany(jobs, 2);
    MatMul(v[6], x.data(), 1, y.data());
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Reports ms per step and GB/s of weights. With a second type (`vs`), the two sets' steps alternate (60 pairs) and
// the GB/s ratio is taken pair by pair, so it holds while the machine's bandwidth drifts (shared hosts).
int Layers(DType dt, int layers, int threads, bool vnni, bool x16, DType vs, bool have_vs) {
  SetComputeThreads(threads);
  SetVnni(vnni);
  const LayerSet set = MakeLayers(dt, layers, x16);
  const char* kernels = IsaName(ActiveIsa());
  if (!have_vs) {
    TimeStep(set);
    double best = 1e30;
    for (int rep = 0; rep < 10; ++rep) best = std::min(best, TimeStep(set));
    std::printf("%s %d layers, threads=%d: %.2f ms/step, %.2f GB/s of weights (%s kernels%s%s)\n", DTypeName(dt), layers,
                threads, best * 1e3, set.buf.size() / best / 1e9, kernels, vnni ? "" : ", VNNI off",
                x16 ? ", regrouped (_x16)" : "");
    return 0;
  }
  const LayerSet ref = MakeLayers(vs, layers, false);
  TimeStep(set);
  TimeStep(ref);
  std::vector<double> a, b, ratio;
  for (int rep = 0; rep < 60; ++rep) {
    a.push_back(TimeStep(set));
    b.push_back(TimeStep(ref));
    ratio.push_back((set.buf.size() / a.back()) / (ref.buf.size() / b.back()));
  }
  std::vector<double> r = ratio;
  std::sort(r.begin(), r.end());
  std::printf("%s%s %d layers, threads=%d: median %.2f ms/step, %.2f GB/s of weights (%s kernels%s)\n", DTypeName(dt),
              x16 ? " (regrouped)" : "", layers, threads, Median(a) * 1e3, set.buf.size() / Median(a) / 1e9, kernels,
              vnni ? "" : ", VNNI off");
  std::printf("%s %d layers, threads=%d: median %.2f ms/step, %.2f GB/s of weights\n", DTypeName(vs), layers, threads,
              Median(b) * 1e3, ref.buf.size() / Median(b) / 1e9);
  std::printf("GB/s ratio %s / %s, pair by pair: median %.3f (quartiles %.3f, %.3f)\n", DTypeName(dt), DTypeName(vs),
              r[r.size() / 2], r[r.size() / 4], r[3 * r.size() / 4]);
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 2 && std::string(argv[1]) == "layers") {
    const DType t = DTypeFromName(argv[2]);
    if (!CanQuantizeRow(t)) return 2;
    bool vnni = true, x16 = false, have_vs = false;
    DType vs = DType::kBF16;
    for (int a = 5; a < argc; ++a) {
      vnni = vnni && std::string(argv[a]) != "novnni";
      x16 = x16 || std::string(argv[a]) == "x16";
      if (std::string(argv[a]) == "vs" && a + 1 < argc) {
        vs = DTypeFromName(argv[++a]);
        have_vs = CanQuantizeRow(vs);
        if (!have_vs) return 2;
      }
    }
    if (x16 && t != DType::kQ4_K && t != DType::kQ6_K && t != DType::kQ8_0 && t != DType::kMXFP4) return 2;
    return Layers(t, argc > 3 ? std::atoi(argv[3]) : 16, argc > 4 ? std::atoi(argv[4]) : 2, vnni, x16, vs, have_vs);
  }
  const DType dt = DTypeFromName(argc > 1 ? argv[1] : "q4_K");
  const int64_t n = argc > 2 ? std::atoll(argv[2]) : 8192, k = argc > 3 ? std::atoll(argv[3]) : 2048;
  const int threads = argc > 4 ? std::atoi(argv[4]) : 1, m = argc > 5 ? std::atoi(argv[5]) : 1;
  if (!CanQuantizeRow(dt) || n < 1 || k % 256 || threads < 1 || m < 1) {
    std::fprintf(stderr, "usage: %s [TYPE: q4_K, q6_K, q8_0, bf16, ...] [rows] [cols, multiple of 256] [threads] [m]\n", argv[0]);
    return 2;
  }
  bool vnni = true, cached = false, x16 = false;
  for (int a = 6; a < argc; ++a) {
    vnni = vnni && std::string(argv[a]) != "novnni";
    cached = cached || std::string(argv[a]) == "cached";
    x16 = x16 || std::string(argv[a]) == "x16";
  }
  if (x16 && dt != DType::kQ4_K && dt != DType::kQ6_K && dt != DType::kQ8_0 && dt != DType::kMXFP4) return 2;
  SetComputeThreads(threads);
  SetVnni(vnni);
  const size_t row_bytes = DTypeBytes(dt, static_cast<size_t>(k)), mat_bytes = row_bytes * n;
  // >= 512 MiB in all; "cached": one copy, read from the caches (the kernel's compute rate, when it fits)
  const int copies = cached ? 1 : static_cast<int>(std::max<size_t>(2, (512u << 20) / mat_bytes + 1));
  // 64-byte aligned, as the loader's weights are (4 KiB): a large vector's data sits 16 bytes past a page.
  std::vector<uint8_t> storage(mat_bytes * copies + 64);
  uint8_t* const data = storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> row(k);
  for (int64_t r = 0; r < n; ++r) {
    for (float& v : row) v = nd(rng);
    QuantizeRow(dt, row.data(), data + r * row_bytes, static_cast<size_t>(k));
  }
  if (x16 && dt == DType::kQ4_K) RepackQ4KX16(data, n, k);  // the loader's regrouping (dtype.h)
  if (x16 && dt == DType::kQ6_K) RepackQ6KX16(data, n, k);
  if (x16 && dt == DType::kQ8_0) RepackQ8_0X16(data, n, k);
  if (x16 && dt == DType::kMXFP4) RepackMXFP4X16(data, n, k);
  const DType vt = !x16 ? dt
                   : dt == DType::kQ4_K ? DType::kQ4_K_X16
                   : dt == DType::kQ6_K ? DType::kQ6_K_X16
                   : dt == DType::kQ8_0 ? DType::kQ8_0_X16
                                        : DType::kMXFP4_X16;
  for (int c = 1; c < copies; ++c) std::memcpy(data + c * mat_bytes, data, mat_bytes);
  std::vector<float> x(static_cast<size_t>(m) * k), y(static_cast<size_t>(m) * n);
  for (float& v : x) v = nd(rng);
  std::vector<TensorView> views(copies);
  for (int c = 0; c < copies; ++c)
    views[c] = TensorView{vt, {n, k}, data + c * mat_bytes, mat_bytes};
  for (int c = 0; c < copies; ++c) MatMul(views[c], x.data(), m, y.data());  // warm up, fault in
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const int calls = std::max(copies * 4, 64);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) MatMul(views[i % copies], x.data(), m, y.data());
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls);
  }
  std::printf("%s %lldx%lld m=%d threads=%d: %.1f us/call, %.2f GB/s of weights (%s kernels%s%s%s)\n", DTypeName(dt),
              static_cast<long long>(n), static_cast<long long>(k), m, threads, best * 1e6, mat_bytes / best / 1e9,
              IsaName(ActiveIsa()), vnni ? "" : ", VNNI off", cached ? ", from cache" : "", x16 ? ", regrouped (_x16)" : "");
  return 0;
}
