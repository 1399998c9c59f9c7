// Runtime instruction-set detection so one binary runs on any x86-64. DEEPINFER_ISA=scalar|avx2|avx512 caps it.
#pragma once

namespace deepinfer {

enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

struct CpuFeatures {
  bool avx2_fma = false;
  bool avx512 = false;       // F + BW + VL + DQ
  bool avx512_bf16 = false;  // vdpbf16ps
  bool avx512_vnni = false;  // vpdpbusd
};

const CpuFeatures& DetectCpu();
// The best ISA this CPU supports.
Isa BestIsa();

// The ISA kernels dispatch to (best supported, capped by DEEPINFER_ISA or SetIsa). Choosing the ISA is choosing
// the kernel table, so these are defined with it (dispatch.cc); SetIsa re-resolves the table.
Isa ActiveIsa();
void SetIsa(Isa isa);  // clamps to what the CPU supports
const char* IsaName(Isa isa);

}  // namespace deepinfer
