#!/usr/bin/env bash
# Sanitizer pass: builds everything with clang under ASan+UBSan (build-san/), runs the unit tests and the CLI
# error checks there (LeakSanitizer included), then runs each libFuzzer target for a short budget
# (FUZZ_SECONDS, default 60) from a seed corpus of real files. Any report fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${FUZZ_SECONDS:-60}"
cmake -S . -B build-san -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DDEEPINFER_FUZZ=ON -DDEEPINFER_TESTS=ON -DDEEPINFER_SANITIZE=ON >/dev/null
cmake --build build-san -j "$(nproc)" --target deepinfer unit_tests gguf_fuzz safetensors_fuzz
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
echo "[asan] unit tests"
build-san/tests/unit_tests --gtest_brief=1
echo "[asan] CLI error checks"
bash tests/e2e/cli_errors.sh build-san/deepinfer >/dev/null

corpus=build-san/corpus
rm -rf "$corpus"; mkdir -p "$corpus/gguf" "$corpus/safetensors"
shared="${DEEPINFER_SHARED_MODELS:-../shared/models}"
build/deepinfer make-tiny --arch qwen3 --vocab 300 --hidden 32 --layers 1 --heads 2 --kv-heads 1 --ffn 32 --out "$corpus/tiny" -q
cp "$corpus/tiny/model.gguf" "$corpus/gguf/tiny.gguf"
cp "$corpus/tiny/model.safetensors" "$corpus/safetensors/tiny.safetensors"
[[ -f "$shared/stories260K.gguf" ]] && head -c 65536 "$shared/stories260K.gguf" > "$corpus/gguf/stories_head.gguf"
for t in gguf safetensors; do
  echo "[fuzz] ${t}_fuzz for ${secs}s"
  build-san/fuzz/${t}_fuzz -max_total_time="$secs" -max_len=262144 -rss_limit_mb=4096 -print_final_stats=1 \
    "$corpus/$t" 2>&1 | tail -n 12
done
echo "[sanitizers] clean"
