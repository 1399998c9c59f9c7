#!/usr/bin/env bash
# Sanitizer pass: builds everything with clang under ASan+UBSan (build-san/), runs the unit tests, the engine
# tests and the CLI error checks there (LeakSanitizer included), the engine tests under ThreadSanitizer
# (build-tsan/), then runs each libFuzzer target for a short budget
# (FUZZ_SECONDS, default 60) from a seed corpus of real files. Any report fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${FUZZ_SECONDS:-60}"
cmake -S . -B build-san -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DDEEPINFER_FUZZ=ON -DDEEPINFER_TESTS=ON -DDEEPINFER_SANITIZE=ON >/dev/null
cmake --build build-san -j "$(nproc)" --target deepinfer unit_tests engine_tests gguf_fuzz safetensors_fuzz
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
echo "[asan] unit tests"
build-san/tests/unit_tests --gtest_brief=1
echo "[asan] engine tests"
build-san/tests/engine_tests --gtest_brief=1
echo "[asan] CLI error checks"
bash tests/e2e/cli_errors.sh build-san/deepinfer >/dev/null

# ThreadSanitizer over the engine: the loop thread, the executor stream, the compute pool and client threads
# (Add/Abort from outside), including the random abort fuzz.
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DDEEPINFER_TESTS=ON -DDEEPINFER_TSAN=ON >/dev/null
cmake --build build-tsan -j "$(nproc)" --target engine_tests
echo "[tsan] engine tests"
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 build-tsan/tests/engine_tests --gtest_brief=1

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
