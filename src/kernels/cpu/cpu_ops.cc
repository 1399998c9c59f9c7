#include "kernels/cpu/cpu_ops.h"

#include <cstdlib>
#include <cstring>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/ops.h"

namespace deepinfer {
namespace {

// A gated activation over n elements, split over the compute pool when large (a prefill chunk's MLP: millions of
// exp/tanh). Each element is computed alone, so the split changes no bit.
void Elementwise(void (*fn)(const float*, const float*, float*, int64_t), const float* gate, const float* up, float* out,
                 int64_t n) {
  constexpr int64_t kMinParallel = 1 << 15;
  if (n < kMinParallel || ComputePool().size() == 1) return fn(gate, up, out, n);
  ComputePool().Run([&](int tid, int nt) {
    const auto [b, e] = ThreadPool::Range(static_cast<size_t>(n), tid, nt, 64);
    if (e > b) fn(gate + b, up + b, out + b, static_cast<int64_t>(e - b));
  });
}

// Forwards to the free kernels (qualified: the members share their names).
class CpuOpsImpl final : public Ops {
 public:
  Device device() const override { return Device::kCpu; }
  const char* kernels() const override { return IsaName(ActiveIsa()); }
  void MatMul(const TensorView& w, const float* x, int m, float* y, const float* bias) const override {
    deepinfer::MatMul(w, x, m, y, bias);
  }
  void MatMulMany(const MatMulJob* jobs, int count) const override { deepinfer::MatMulMany(jobs, count); }
  void MatMulHeads(const HeadsMatMul& spec) const override { deepinfer::MatMulHeads(spec); }
  void RmsNorm(const float* x, const float* w, float eps, int m, int n, float* y) const override {
    deepinfer::RmsNorm(x, w, eps, m, n, y);
  }
  void ApplyRope(const RopeTable& t, float* x, int m, int n_heads, int head_dim, const int32_t* pos) const override {
    deepinfer::ApplyRope(t, x, m, n_heads, head_dim, pos);
  }
  void SwiGLU(const float* gate, const float* up, float* out, int64_t n) const override {
    Elementwise(deepinfer::SwiGLU, gate, up, out, n);
  }
  void GeGLU(const float* gate, const float* up, float* out, int64_t n) const override {
    Elementwise(deepinfer::GeGLU, gate, up, out, n);
  }
  void SwiGluOai(const float* gate, const float* up, float* out, int64_t n) const override {
    Elementwise(deepinfer::SwiGluOai, gate, up, out, n);
  }
  void PagedAttention(const float* q, const AttnSeq* seqs, int num_seqs, const void* k_base, const void* v_base, DType kv_type,
                      const AttnShape& shape, float scale, float* out) const override {
    deepinfer::PagedAttention(q, seqs, num_seqs, k_base, v_base, kv_type, shape, scale, out);
  }
  void DequantizeRow(DType t, const void* src, float* dst, size_t n) const override { deepinfer::DequantizeRow(t, src, dst, n); }
  // q4_K, q6_K, q8_0 and MXFP4 -> their _X16 layouts (dtype.h) where the active kernels have kernels for those
  // layouts (AVX-512 with VNNI), unless DEEPINFER_Q4K_X16=0 (for comparisons; it covers all four).
  // A regrouped row: its group back in row order (thread-local), then the row as the plain type's.
  void MatrixRow(const TensorView& w, int64_t r, float* out) const override {
    const Regrouped* kind = Find(w.dtype, false);
    if (!kind) return Ops::MatrixRow(w, r, out);
    const int64_t k = w.cols(), g = r / kQ4KX16Rows * kQ4KX16Rows;
    if (g + kQ4KX16Rows > w.rows()) return deepinfer::DequantizeRow(kind->plain, w.row(r), out, static_cast<size_t>(k));  // past the groups
    thread_local std::vector<uint8_t> buf;
    buf.resize(kQ4KX16Rows * w.row_bytes());
    kind->unpack(w.row(g), k, buf.data());
    deepinfer::DequantizeRow(kind->plain, buf.data() + (r - g) * w.row_bytes(), out, static_cast<size_t>(k));
  }
  bool RegroupForMatMul(TensorView& w) const override {
    static const bool off = [] {
      const char* v = std::getenv("DEEPINFER_Q4K_X16");
      return v && !std::strcmp(v, "0");
    }();
    if (off || w.shape.size() != 2 || w.rows() < kQ4KX16Rows) return false;
    const Regrouped* kind = Find(w.dtype, true);
    if (!kind || !(Kernels().*kind->kernel)) return false;
    kind->repack(static_cast<uint8_t*>(const_cast<void*>(w.data)), w.rows(), w.cols());
    w.dtype = kind->grouped;
    return true;
  }

 private:
  struct Regrouped {
    DType plain, grouped;
    GemmSliceFn KernelTable::*kernel;  // the table's kernel for the layout: regrouped only where it is set
    void (*repack)(uint8_t* data, int64_t rows, int64_t k);
    void (*unpack)(const uint8_t* group, int64_t k, uint8_t* out);
  };
  // The entry whose plain type (by_plain) or regrouped type is t; null if none.
  static const Regrouped* Find(DType t, bool by_plain) {
    static const Regrouped kAll[] = {
        {DType::kQ4_K, DType::kQ4_K_X16, &KernelTable::q4k_x16_decode, RepackQ4KX16, UnpackQ4KX16},
        {DType::kQ6_K, DType::kQ6_K_X16, &KernelTable::q6k_x16_decode, RepackQ6KX16, UnpackQ6KX16},
        {DType::kQ8_0, DType::kQ8_0_X16, &KernelTable::q8_0_x16, RepackQ8_0X16, UnpackQ8_0X16},
        {DType::kMXFP4, DType::kMXFP4_X16, &KernelTable::mxfp4_x16, RepackMXFP4X16, UnpackMXFP4X16},
    };
    for (const Regrouped& e : kAll)
      if ((by_plain ? e.plain : e.grouped) == t) return &e;
    return nullptr;
  }
};

}  // namespace

const Ops& CpuOps() {
  static const CpuOpsImpl ops;
  return ops;
}

}  // namespace deepinfer
