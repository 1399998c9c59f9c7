#!/usr/bin/env bash
# Reproduces the foundation benchmarks in docs/benchmarks.md: a Llama-3.2-1B-shaped bf16 model from make-tiny,
# deepinfer vs llama.cpp (node-llama-cpp) on the same GGUF, same threads, same run; decode and 512-token prefill,
# each REPEAT times (default 3). Results as JSON lines in bench/results/ (git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
threads="${THREADS:-2}" repeat="${REPEAT:-3}"
model="${MODEL:-/tmp/deepinfer-bench/llama-3.2-1b-bf16.gguf}"
if [[ ! -f "$model" ]]; then
  mkdir -p "$(dirname "$model")"
  build/deepinfer make-tiny --preset llama-3.2-1b --dtype bf16 --format gguf --out "$model"
fi
mkdir -p bench/results
for i in $(seq "$repeat"); do
  build/deepinfer bench decode -m "$model" -t "$threads" -n 64 --peer --out "bench/results/decode-$i.json" 2>/dev/null
  build/deepinfer bench prefill -m "$model" -t "$threads" --n-prompt 512 -r 2 --peer --out "bench/results/prefill-$i.json" 2>/dev/null
done
