#!/usr/bin/env bash
# The test command: set up, build, run every test (unit, parity against llama.cpp, end-to-end), then the
# fuzz smoke runs under ASan+UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export DEEPINFER_NO_PROGRESS=1
ctest --test-dir build --output-on-failure -j 2 --timeout 900
scripts/sanitize.sh
