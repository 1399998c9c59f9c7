#!/bin/bash
# Long-prompt prefill rounds: 512 / 2048 / 8192, bf16 and f32 KV, then the llama.cpp peer at 2048 and 8192.
# Usage: bench/long_prompt_prefill.sh [MODEL.gguf]   (docs/benchmarks.md, "long prompts")
cd "$(dirname "$0")/.."
M=${1:-/tmp/bench/l1b-bf16.gguf}
for round in 1 2 3; do
  for n in 512 2048 8192; do
    build/deepinfer bench prefill -m $M --n-prompt $n -r 1 -t 2 --kv-cache-dtype bf16 2>&1 | grep "deepinfer prefill"
  done
done
for n in 512 2048 8192; do
  build/deepinfer bench prefill -m $M --n-prompt $n -r 1 -t 2 --kv-cache-dtype f32 2>&1 | grep "deepinfer prefill"
done
for n in 2048 8192; do
  build/deepinfer bench prefill -m $M --n-prompt $n -r 1 -t 2 --kv-cache-dtype bf16 --peer 2>&1 | grep -E "deepinfer prefill|llama.cpp"
done
