#!/usr/bin/env bash
# The test command: set up, build, run every test (unit, parity against llama.cpp, end-to-end), then the
# fuzz smoke runs under ASan+UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export DEEPINFER_NO_PROGRESS=1
# ctest counts a skipped test (GTEST_SKIP) as not failed and exits 0: a skip fails CI here. The one allowed skip
# is a CPU feature the machine lacks and DEEPINFER_TEST_CPU_LACKS declares (tests/unit/isa_test_util.h).
# With -j, ctest starts the longest tests first when it knows their times (build/Testing/Temporary/
# CTestCostData.txt, which it rewrites after each run). A fresh build starts from a CI run's times kept in
# tests/ctest_cost_data.txt (refresh it from that file after adding long tests), so the multi-process tests, which a
# resource lock runs one at a time, start early instead of forming a tail on one core.
mkdir -p build/Testing/Temporary
[[ -f build/Testing/Temporary/CTestCostData.txt ]] || cp tests/ctest_cost_data.txt build/Testing/Temporary/CTestCostData.txt
ctest --test-dir build --output-on-failure -j 2 --timeout 900 2>&1 | tee build/ctest.log
if grep -E '\*\*\*(Skipped|Not Run)' build/ctest.log && [[ -z "${DEEPINFER_TEST_CPU_LACKS:-}" ]]; then
  echo "[test] the tests above were skipped or not run: a skip counts as a failure"
  exit 1
fi
scripts/sanitize.sh
