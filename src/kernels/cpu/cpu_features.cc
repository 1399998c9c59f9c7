#include "kernels/cpu/cpu_features.h"

#include <cstdlib>
#include <cstring>

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

namespace {
Isa BestIsa() {
  const auto& c = DetectCpu();
  return c.avx512 ? Isa::kAvx512 : c.avx2_fma ? Isa::kAvx2 : Isa::kScalar;
}
Isa Clamp(Isa want) { return static_cast<int>(want) < static_cast<int>(BestIsa()) ? want : BestIsa(); }
Isa FromEnv() {
  const char* v = std::getenv("DEEPINFER_ISA");
  if (!v) return BestIsa();
  if (!std::strcmp(v, "scalar")) return Isa::kScalar;
  if (!std::strcmp(v, "avx2")) return Clamp(Isa::kAvx2);
  return BestIsa();
}
Isa g_isa = FromEnv();
}  // namespace

Isa ActiveIsa() { return g_isa; }
void SetIsa(Isa isa) { g_isa = Clamp(isa); }
const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return DetectCpu().avx512_bf16 ? "avx512+bf16" : "avx512";
    case Isa::kAvx2: return "avx2";
    default: return "scalar";
  }
}

}  // namespace deepinfer
