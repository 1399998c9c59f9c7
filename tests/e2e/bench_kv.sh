#!/usr/bin/env bash
# Issue 32, must-show 3 (bench half): `deepinfer bench kv` prints the KV bytes per sequence and the concurrency a
# 16 GiB budget holds for the gpt-oss-20b and Gemma-3-4b shapes at 8k and 32k, hybrid next to --swa-full, and the
# hybrid cache holds more sequences. The figures are checked against the layout arithmetic done here by hand.
set -euo pipefail
bin="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" bench kv --shape gpt-oss-20b,gemma-3-4b --ctx 8192,32768 --kv-cache 16GiB --out "$tmp/kv.json" | tee "$tmp/kv.txt"
grep -q "^gpt-oss-20b *32768" "$tmp/kv.txt"
node -e '
const rows = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
const get = (s, c) => rows.find((r) => r.shape === s && r.ctx === c);
let fails = 0;
const check = (ok, what) => { if (!ok) { console.log("FAIL " + what); fails++; } };
for (const r of rows) check(r.hybrid_concurrency > r.swa_full_concurrency, `${r.shape} ${r.ctx}: hybrid holds more`);
// gpt-oss-20b at 32k, bf16, blocks of 16, chunks of 512 in flight twice: 12 full layers x 2048 blocks and 12
// windowed layers x ceil((128 + 1024 + 14) / 16) = 73 blocks, 8 x 64 x 2 (K, V) x 2 bytes per layer-token.
const layerBlockMiB = 16 * 8 * 64 * 2 * 2 / 1048576;
const g = get("gpt-oss-20b", 32768);
check(Math.abs(g.hybrid_mib_per_seq - 12 * (2048 + 73) * layerBlockMiB) < 1e-6, "gpt-oss-20b 32k hybrid bytes");
check(Math.abs(g.swa_full_mib_per_seq - 24 * 2048 * layerBlockMiB) < 1e-6, "gpt-oss-20b 32k full bytes");
check(g.swa_full_concurrency === Math.floor(16 * 1024 / (24 * 2048 * layerBlockMiB)), "gpt-oss-20b 32k full concurrency");
// Gemma-3-4b: 5 full / 29 windowed layers -> 5 planes, 1 + 6 groups (one padding plane).
const m = get("gemma-3-4b", 32768);
check(m.kv_groups === 7 && m.planes === 5 && m.padding_planes === 1, "gemma-3-4b grouping");
process.exit(fails ? 1 : 0);
' "$tmp/kv.json"
echo "bench kv: ok"
