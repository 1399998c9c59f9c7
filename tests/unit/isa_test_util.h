// Running a kernel test on every ISA: the list, a guard that restores the active ISA, and the rule for a case
// that needs a CPU feature.
//
// No case skips because of the CPU it runs on. The scalar and AVX2 paths run on any AVX-512 machine (SetIsa
// picks the table, as DEEPINFER_ISA does for the binary), so only a feature the CPU really lacks can keep a case
// from running, and then the case FAILS, naming the feature, unless the person running the tests declared the
// machine's limitation by name:
//   DEEPINFER_TEST_CPU_LACKS=avx512_vnni,avx512_bf16   (any of avx2, avx512, avx512_vnni, avx512_bf16)
// A declared feature the CPU lacks skips the case (GTEST_SKIP, or a printed "not run" line for one ISA of a loop)
// with that reason. CI sets no declaration: its machine has AVX-512 with VNNI and BF16, so every case runs
// there, and TestMachine.DeclaredCpuLimitationsAreTrue fails if a declaration names a feature the CPU has (or an
// unknown name), so a stale declaration cannot hide a case on a machine that could run it.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstdio>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.h"

namespace deepinfer::testing {

enum class CpuFeature { kAvx2, kAvx512, kAvx512Vnni, kAvx512Bf16 };

inline const char* CpuFeatureName(CpuFeature f) {
  switch (f) {
    case CpuFeature::kAvx2: return "avx2";
    case CpuFeature::kAvx512: return "avx512";
    case CpuFeature::kAvx512Vnni: return "avx512_vnni";
    case CpuFeature::kAvx512Bf16: return "avx512_bf16";
  }
  return "?";
}

inline bool CpuHas(CpuFeature f) {
  const CpuFeatures& c = DetectCpu();
  switch (f) {
    case CpuFeature::kAvx2: return c.avx2_fma;
    case CpuFeature::kAvx512: return c.avx512;
    case CpuFeature::kAvx512Vnni: return c.avx512_vnni;
    case CpuFeature::kAvx512Bf16: return c.avx512_bf16;
  }
  return false;
}

// The names in DEEPINFER_TEST_CPU_LACKS (comma-separated, spaces ignored).
inline std::vector<std::string> DeclaredCpuLacks() {
  std::vector<std::string> out;
  const char* env = std::getenv("DEEPINFER_TEST_CPU_LACKS");
  std::stringstream ss(env ? env : "");
  for (std::string item; std::getline(ss, item, ',');) {
    std::string name;
    for (char ch : item)
      if (ch != ' ') name += ch;
    if (!name.empty()) out.push_back(name);
  }
  return out;
}

inline bool DeclaredLacking(CpuFeature f) {
  for (const std::string& n : DeclaredCpuLacks())
    if (n == CpuFeatureName(f)) return true;
  return false;
}

// The message of a case that cannot run here. declared: whether DEEPINFER_TEST_CPU_LACKS says so.
inline std::string CpuMissingMessage(CpuFeature f, const std::string& what) {
  return what + " needs " + CpuFeatureName(f) + ", which this CPU lacks" +
         (DeclaredLacking(f) ? " (declared by DEEPINFER_TEST_CPU_LACKS: not run here; CI's AVX-512 VNNI/BF16 machine runs it)"
                             : "; set DEEPINFER_TEST_CPU_LACKS=" + std::string(CpuFeatureName(f)) +
                                   " to declare this machine's limitation, or run on a machine that has it");
}

// For part of a test (one ISA of a loop, one extra comparison): true when the CPU has f. Otherwise a non-fatal
// failure, or, where the limitation is declared, a printed "not run" line; false either way.
// Said once per test and message (loops call this per case).
inline bool CpuRuns(CpuFeature f, const std::string& what) {
  if (CpuHas(f)) return true;
  const std::string msg = CpuMissingMessage(f, what);
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string test = t ? std::string(t->test_suite_name()) + "." + t->name() : std::string("-");
  static std::set<std::string> said;
  if (!said.insert(test + "\n" + msg).second) return false;
  if (DeclaredLacking(f)) std::printf("[ NOT RUN  ] %s: %s\n", test.c_str(), msg.c_str());
  else ADD_FAILURE() << msg;
  return false;
}

// Every ISA, each one the CPU has; a missing one fails the calling test unless declared (CpuRuns).
inline std::vector<Isa> AvailableIsas() {
  std::vector<Isa> out = {Isa::kScalar};
  if (CpuRuns(CpuFeature::kAvx2, "the avx2 pass of this test")) out.push_back(Isa::kAvx2);
  if (CpuRuns(CpuFeature::kAvx512, "the avx512 pass of this test")) out.push_back(Isa::kAvx512);
  return out;
}

struct IsaGuard {
  Isa saved = ActiveIsa();
  ~IsaGuard() { SetIsa(saved); }
};

}  // namespace deepinfer::testing

// For a whole test (or a fixture's SetUp): fails, naming the feature, when the CPU lacks it; skips only where
// DEEPINFER_TEST_CPU_LACKS declares it. Returns from the calling function either way.
#define DEEPINFER_REQUIRE_CPU(feature, what)                                                              \
  do {                                                                                                    \
    if (!::deepinfer::testing::CpuHas(feature)) {                                                         \
      if (::deepinfer::testing::DeclaredLacking(feature))                                                 \
        GTEST_SKIP() << ::deepinfer::testing::CpuMissingMessage(feature, what);                           \
      else                                                                                                \
        FAIL() << ::deepinfer::testing::CpuMissingMessage(feature, what);                                 \
    }                                                                                                     \
  } while (0)
