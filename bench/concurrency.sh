#!/usr/bin/env bash
# Re-measures the concurrency rows of docs/benchmarks.md against llama.cpp batched as llama.cpp batches (issue 30),
# and `deepinfer serve` against llama.cpp's `llama-server -np N`, on Llama-3.2-1B-shaped models (random weights):
#   bf16    build/deepinfer make-tiny --preset llama-3.2-1b --dtype bf16 --format gguf
#   Q4_K_M  build/deepinfer convert --outtype q4_k_m (from the bf16 GGUF)
# Run it on a QUIET machine (nothing else building or testing): every number is a rate on 2 shared cores.
#
#   bench/concurrency.sh                      everything below (~35 min on the 2-vCPU EPYC VM, quiet)
# Environment:
#   THREADS=2            compute threads (deepinfer, llama_batched_ref, llama-batched-bench, llama-server)
#   MODELS="bf16 q4km"   which models (also: q8 f16, converted from the bf16 GGUF like q4km)
#   MODEL_DIR=/tmp/bench where the GGUFs are (made when missing)
#   LLAMA_BIN=/work/llama-build/build/bin     llama-batched-bench and llama-server (bench/llama_peer_build.sh);
#                        when missing, the cross-check and the server comparison are skipped with a message
#   SERVE=1 CROSSCHECK=1 set to 0 to skip the server comparison / the llama-batched-bench cross-check
#   CLIENTS=1,8,32,64    server client counts;  CONCURRENCY=1,8,32,64  offline sequence counts
#   OUT=bench/results/concurrency-<UTC time>
#   PEER_ARGS="..."      extra llama_batched_ref flags for step 1 (e.g. "-ctk f32 -ctv f32": deepinfer's KV type)
#   DI_SERVE_ARGS="..." LLAMA_SERVE_ARGS="..."   extra flags for deepinfer serve / llama-server in step 3
#
# What runs, per model (the commands are printed as they run, results land in $OUT as JSON and logs):
#  1. offline, the docs' rows: `bench throughput --peer --prefix-len 0 --concurrency 1,8,32,64 -t 2` with
#     -n 64 (bf16 only: the "Engine: offline throughput" table) and -n 32 (the k-quant and "issue's table" rows);
#     prompts of 32 random ids; the peer is build/llama_batched_ref with llama.cpp's defaults (f16 KV, flash
#     attention auto, KV not unified, n_batch 2048 / n_ubatch 512); prompt / generation / total ratios.
#  2. cross-check (-n 32): llama.cpp's own llama-batched-bench (built from the same source bundle with the release
#     build's CPU flags) and llama_batched_ref --random (batched-bench's random next tokens) with the same -c:
#     their S_PP / S_TG must agree within noise, or the batched peer is not what llama.cpp does.
#  3. server: bench/serve_peer.mjs, the same streaming client for `deepinfer serve` and `llama-server -np C`, at
#     CLIENTS streaming clients, 2 requests each, 32-id prompts, 64 tokens, ignore_eos.
# Finally bench/concurrency_report.mjs prints the markdown tables for docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${THREADS:-2}
MODELS=${MODELS:-bf16 q4km}
MODEL_DIR=${MODEL_DIR:-/tmp/bench}
LLAMA_BIN=${LLAMA_BIN:-/work/llama-build/build/bin}
SERVE=${SERVE:-1}
CROSSCHECK=${CROSSCHECK:-1}
CLIENTS=${CLIENTS:-1,8,32,64}
CONCURRENCY=${CONCURRENCY:-1,8,32,64}
PEER_ARGS=${PEER_ARGS:-}
DI_SERVE_ARGS=${DI_SERVE_ARGS:-}
LLAMA_SERVE_ARGS=${LLAMA_SERVE_ARGS:-}
OUT=${OUT:-bench/results/concurrency-$(date -u +%Y%m%d-%H%M)}
DI=build/deepinfer
PEER=build/llama_batched_ref
[[ -x $DI && -x $PEER ]] || { echo "concurrency.sh: build first (cmake --build build; $PEER needs scripts/setup.sh)" >&2; exit 1; }
mkdir -p "$OUT" "$MODEL_DIR"
run() { echo "+ $*" | tee -a "$OUT/commands.txt"; "$@"; }

{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) vCPUs, $(free -g | awk '/Mem:/{print $2}') GiB"
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "deepinfer: $(git rev-parse --short HEAD)$(git diff --quiet || echo '+dirty')"
  echo "llama.cpp (libllama of node-llama-cpp): $(node -e 'console.log(require(process.argv[1]).version)' "$PWD/tools/ref/node_modules/node-llama-cpp/package.json" 2>/dev/null)," \
       "release $(node -e 'console.log(require(process.argv[1]).tag)' "$PWD/tools/ref/node_modules/node-llama-cpp/llama/llama.cpp.info.json" 2>/dev/null)"
  [[ -x $LLAMA_BIN/llama-batched-bench ]] && echo "llama.cpp built: $LLAMA_BIN ($(cat "$LLAMA_BIN/../../src/.bundle-sha256" 2>/dev/null | cut -c1-12))"
} | tee "$OUT/machine.txt"

bf16=$MODEL_DIR/l1b-bf16.gguf
[[ -f $bf16 ]] || run $DI make-tiny --preset llama-3.2-1b --dtype bf16 --format gguf --out "$bf16" -q
model_of() {
  case $1 in
    bf16) echo "$bf16" ;;
    q4km) echo "$MODEL_DIR/l1b-q4km.gguf" ;;
    q8) echo "$MODEL_DIR/l1b-q8.gguf" ;;
    f16) echo "$MODEL_DIR/l1b-f16.gguf" ;;
    *) echo "concurrency.sh: unknown model '$1'" >&2; exit 2 ;;
  esac
}
outtype_of() { case $1 in q4km) echo q4_k_m ;; q8) echo q8_0 ;; f16) echo f16 ;; esac; }
for t in $MODELS; do
  m=$(model_of "$t")
  [[ -f $m ]] || run $DI convert -m "$bf16" -o "$m" --outtype "$(outtype_of "$t")" -q
done

have_llama=0
[[ -x $LLAMA_BIN/llama-batched-bench && -x $LLAMA_BIN/llama-server ]] && have_llama=1
((have_llama)) || echo "concurrency.sh: no llama.cpp build in $LLAMA_BIN (bench/llama_peer_build.sh): cross-check and server comparison skipped" | tee -a "$OUT/machine.txt"

for t in $MODELS; do
  m=$(model_of "$t")
  # 1. offline rows (stdout kept: the tables and the peer's settings line)
  gens="32"
  [[ $t == bf16 ]] && gens="64 32"
  for n in $gens; do
    run $DI bench throughput -m "$m" --peer --prefix-len 0 -n "$n" --n-prompt 32 --concurrency "$CONCURRENCY" -t "$THREADS" \
      ${PEER_ARGS:+--peer-args "$PEER_ARGS"} --out "$OUT/throughput-$t-n$n.json" 2>"$OUT/throughput-$t-n$n.log" | tee "$OUT/throughput-$t-n$n.txt"
  done
  # 2. cross-check: llama.cpp's own batched-bench against the batched peer in batched-bench's mode
  if ((have_llama && CROSSCHECK)); then
    run "$LLAMA_BIN/llama-batched-bench" -m "$m" -c 16384 -b 2048 -ub 512 -npp 32 -ntg 32 -npl "$CONCURRENCY" -t "$THREADS" \
      -tb "$THREADS" --output-format jsonl >"$OUT/batched-bench-$t.jsonl" 2>"$OUT/batched-bench-$t.log" || true
    grep '^{' "$OUT/batched-bench-$t.log" "$OUT/batched-bench-$t.jsonl" 2>/dev/null | sed 's/^[^{]*//' >"$OUT/batched-bench-$t.rows.jsonl" || true
    cat "$OUT/batched-bench-$t.rows.jsonl"
    run $PEER "$m" -c 16384 -npl "$CONCURRENCY" -npp 32 -ntg 33 -t "$THREADS" --random --json | tee "$OUT/batched-ref-random-$t.jsonl"
  fi
  # 3. server vs llama-server
  if ((have_llama && SERVE)); then
    run node bench/serve_peer.mjs --server deepinfer --bin "$DI" --model "$m" --clients "$CLIENTS" --threads "$THREADS" \
      --n-prompt 32 --n-gen 64 --requests 2 --server-args "$DI_SERVE_ARGS" --out "$OUT/serve-deepinfer-$t.json" --log "$OUT/logs"
    run node bench/serve_peer.mjs --server llama --bin "$LLAMA_BIN/llama-server" --model "$m" --clients "$CLIENTS" \
      --threads "$THREADS" --n-prompt 32 --n-gen 64 --requests 2 --server-args "$LLAMA_SERVE_ARGS" --out "$OUT/serve-llama-$t.json" --log "$OUT/logs"
  fi
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"
node bench/concurrency_report.mjs "$OUT" | tee "$OUT/report.md"
