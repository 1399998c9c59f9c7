#include "kernels/cpu/cpu_features.h"

namespace deepinfer {

const CpuFeatures& DetectCpu() {
  static const CpuFeatures f = [] {
    CpuFeatures c;
    __builtin_cpu_init();
    c.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    c.avx512 = c.avx2_fma && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    c.avx512_bf16 = c.avx512 && __builtin_cpu_supports("avx512bf16");
    c.avx512_vnni = c.avx512 && __builtin_cpu_supports("avx512vnni");
    return c;
  }();
  return f;
}

Isa BestIsa() {
  const auto& c = DetectCpu();
  return c.avx512 ? Isa::kAvx512 : c.avx2_fma ? Isa::kAvx2 : Isa::kScalar;
}

}  // namespace deepinfer
