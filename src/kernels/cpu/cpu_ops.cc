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
    const RegroupedLayout* kind = RegroupedLayoutOf(w.dtype);
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
    const RegroupedLayout* kind = RegroupedLayoutFrom(w.dtype);
    if (!kind || !Kernels().LayoutKernel(kind->grouped)) return false;  // regrouped only for a kernel of the layout
    kind->repack(static_cast<uint8_t*>(const_cast<void*>(w.data)), w.rows(), w.cols());
    w.dtype = kind->grouped;
    return true;
  }
};

}  // namespace

const Ops& CpuOps() {
  static const CpuOpsImpl ops;
  return ops;
}

}  // namespace deepinfer
