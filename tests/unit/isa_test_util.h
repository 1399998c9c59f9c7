// Running a kernel test on every ISA the machine has: the list, and a guard that restores the active ISA.
#pragma once
#include <vector>

#include "kernels/cpu/cpu_features.h"

namespace deepinfer::testing {

inline std::vector<Isa> AvailableIsas() {
  std::vector<Isa> out = {Isa::kScalar};
  if (DetectCpu().avx2_fma) out.push_back(Isa::kAvx2);
  if (DetectCpu().avx512) out.push_back(Isa::kAvx512);
  return out;
}

struct IsaGuard {
  Isa saved = ActiveIsa();
  ~IsaGuard() { SetIsa(saved); }
};

}  // namespace deepinfer::testing
