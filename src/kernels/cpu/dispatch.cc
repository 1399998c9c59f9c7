#include "kernels/cpu/dispatch.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace deepinfer {
namespace {

// One table per ISA, indexed by Isa, with the variants the CPU's extensions allow (AVX512-BF16, AVX512-VNNI).
// Every table exists on every CPU (IsaName names any ISA); only tables the CPU supports are ever made active.
struct Tables {
  KernelTable by_isa[3];
  Tables() {
    const CpuFeatures& cpu = DetectCpu();
    by_isa[static_cast<int>(Isa::kScalar)] = {Isa::kScalar, "scalar", false, isa_scalar::GemmSlice,
                                              isa_scalar::AttendRows, QuantizeActivationsQ8_0,
                                              QuantizeActivationsQ8_K, nullptr, nullptr, nullptr, nullptr, nullptr};
    by_isa[static_cast<int>(Isa::kAvx2)] = {Isa::kAvx2, "avx2", false, isa_avx2::GemmSlice, isa_avx2::AttendRows,
                                            QuantizeActivationsQ8_0, QuantizeActivationsQ8_K, nullptr, nullptr, nullptr, nullptr, nullptr};
    by_isa[static_cast<int>(Isa::kAvx512)] = {
        Isa::kAvx512, cpu.avx512_bf16 ? "avx512+bf16" : "avx512", cpu.avx512_bf16,
        cpu.avx512_vnni ? isa_avx512::GemmSliceVnni : isa_avx512::GemmSlice,
        cpu.avx512_bf16 ? isa_avx512::AttendRowsBf16Dot : isa_avx512::AttendRows,
        isa_avx512::QuantizeQ8_0, isa_avx512::QuantizeQ8_K, cpu.avx512_vnni ? isa_avx512::Q4KX16Decode : nullptr,
        cpu.avx512_vnni ? isa_avx512::Q6KX16Decode : nullptr, cpu.avx512_vnni ? isa_avx512::Q8X16Gemm : nullptr,
        cpu.avx512_vnni ? isa_avx512::MxX16Gemm : nullptr, isa_avx512::UnpackX16};
  }
};

// Mutable only through SetVnni and SetBf16Dot.
Tables& AllTables() {
  static Tables tables;
  return tables;
}

Isa Clamp(Isa want) { return static_cast<int>(want) < static_cast<int>(BestIsa()) ? want : BestIsa(); }

Isa FromEnv() {
  const char* v = std::getenv("DEEPINFER_ISA");
  if (!v) return BestIsa();
  if (!std::strcmp(v, "scalar")) return Isa::kScalar;
  if (!std::strcmp(v, "avx2")) return Clamp(Isa::kAvx2);
  if (std::strcmp(v, "avx512") && *v)  // not a silent fallback: a mistyped name would run the best ISA unnoticed
    std::fprintf(stderr, "warning: DEEPINFER_ISA=%s is not scalar, avx2 or avx512; using the best ISA\n", v);
  return BestIsa();
}

// The active table. A function-local static, so it is resolved on first use even from another unit's static
// initializer.
const KernelTable*& Active() {
  static const KernelTable* active = &AllTables().by_isa[static_cast<int>(FromEnv())];
  return active;
}

}  // namespace

const KernelTable& Kernels() { return *Active(); }

Isa ActiveIsa() { return Active()->isa; }
void SetIsa(Isa isa) { Active() = &AllTables().by_isa[static_cast<int>(Clamp(isa))]; }
const char* IsaName(Isa isa) { return AllTables().by_isa[static_cast<int>(isa)].name; }

bool SetVnni(bool enable) {
  KernelTable& t = AllTables().by_isa[static_cast<int>(Isa::kAvx512)];
  const bool was = t.gemm_slice == isa_avx512::GemmSliceVnni;
  t.gemm_slice = enable && DetectCpu().avx512_vnni ? isa_avx512::GemmSliceVnni : isa_avx512::GemmSlice;
  t.q4k_x16_decode = enable && DetectCpu().avx512_vnni ? isa_avx512::Q4KX16Decode : nullptr;
  t.q6k_x16_decode = enable && DetectCpu().avx512_vnni ? isa_avx512::Q6KX16Decode : nullptr;
  t.q8_0_x16 = enable && DetectCpu().avx512_vnni ? isa_avx512::Q8X16Gemm : nullptr;
  t.mxfp4_x16 = enable && DetectCpu().avx512_vnni ? isa_avx512::MxX16Gemm : nullptr;
  return was;
}

bool SetBf16Dot(bool enable) {
  KernelTable& t = AllTables().by_isa[static_cast<int>(Isa::kAvx512)];
  const bool was = t.bf16_dot;
  t.bf16_dot = enable && DetectCpu().avx512_bf16;
  t.attend_rows = t.bf16_dot ? isa_avx512::AttendRowsBf16Dot : isa_avx512::AttendRows;
  t.name = t.bf16_dot ? "avx512+bf16" : "avx512";
  return was;
}

}  // namespace deepinfer
