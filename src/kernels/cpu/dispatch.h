// The one place kernels are chosen by ISA. Each ISA's kernels form one table of function pointers (in the
// manner of ggml-cpu's type_traits_cpu); the table of the active ISA (the best the CPU has, capped by
// DEEPINFER_ISA or SetIsa) is resolved on first use and again by every SetIsa, so tests can run each ISA in
// turn. Kernel drivers (MatMul, PagedAttention) read the table once per call, in the calling thread, and hand
// the function pointers to the pool's workers; nothing outside dispatch.cc switches on Isa or picks a variant by
// CPU extension (AVX512-BF16, AVX512-VNNI).
#pragma once
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/isa_kernels.h"

namespace deepinfer {

struct KernelTable {
  Isa isa;
  const char* name;  // for logs and benchmark reports: "scalar", "avx2", "avx512", "avx512+bf16"
  // bf16 weights are multiplied as stored, in bf16 pairs (AVX512-BF16 vdpbf16ps): MatMul hands gemm_slice x
  // rounded to bf16 as `xq`, instead of x rounded through bf16 back to f32.
  bool bf16_dot;
  GemmSliceFn gemm_slice;
  AttendRowsFn attend_rows;
  QuantizeQ8_0Fn quantize_q8_0;
  QuantizeQ8_KFn quantize_q8_k;
  // kQ4_K_X16 / kQ6_K_X16 weights at small m (gemm.cc: up to 20 / 16 x rows), whole groups (isa_kernels.h), where the table has a kernel for that
  // layout (AVX-512 with VNNI); null otherwise: MatMul then runs the groups as q4_K / q6_K rows (gemm.cc). The
  // loader regroups q4_K / q6_K matrices only where it is set (Ops::RegroupForMatMul).
  GemmSliceFn q4k_x16_decode;
  GemmSliceFn q6k_x16_decode;
  // kQ8_0_X16 / kMXFP4_X16 weights at every m (whole groups), where the table has kernels for them (AVX-512 with
  // VNNI).
  GemmSliceFn q8_0_x16;
  GemmSliceFn mxfp4_x16;
  // One such group back in row order (dtype.h's Unpack functions' bytes), for the products on
  // the plain kernels; null: dtype.h's.
  void (*unpack_x16)(DType t, const uint8_t* group, int64_t k, uint8_t* out);
  // The kernel above for regrouped type t (dtype.h's RegroupedLayout), or null: none for t in this table.
  GemmSliceFn LayoutKernel(DType t) const {
    switch (t) {
      case DType::kQ4_K_X16: return q4k_x16_decode;
      case DType::kQ6_K_X16: return q6k_x16_decode;
      case DType::kQ8_0_X16: return q8_0_x16;
      case DType::kMXFP4_X16: return mxfp4_x16;
      default: return nullptr;
    }
  }
};

// The active ISA's table.
const KernelTable& Kernels();

// Whether the AVX-512 table multiplies q8_0/q4_0 with the AVX512-VNNI tiles (bitwise the same results as the
// generic AVX-512 tiles; the default wherever the CPU has VNNI). Returns the previous setting; enabling is a
// no-op on a CPU without VNNI. For tests and benchmarks.
bool SetVnni(bool enable);
// Whether the AVX-512 table multiplies bf16 weights and a bf16 KV cache on AVX512-BF16 vdpbf16ps (the default
// wherever the CPU has it). Off, it runs what an AVX-512 CPU without BF16 runs (f32 tiles over bf16 rows), so
// tests reach that path on any AVX-512 machine. Returns the previous setting.
bool SetBf16Dot(bool enable);

}  // namespace deepinfer
