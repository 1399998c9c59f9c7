#!/usr/bin/env bash
# Builds llama.cpp's own llama-batched-bench, llama-server and llama-bench from the source bundle node-llama-cpp
# ships (tools/ref/node_modules/node-llama-cpp/llama/gitRelease.bundle: the same llama.cpp release as the
# libllama that tools/ref/llama_batched_ref drives), OUTSIDE this repository, as the cross-check peer of
# docs/benchmarks.md. Nothing of llama.cpp is copied into deepinfer.
#
#   bench/llama_peer_build.sh [DIR]        (default DIR: /work/llama-build; binaries in DIR/build/bin)
#
# Configuration = llama.cpp's release build for x86-64 Linux (.github/workflows/release.yml, "ubuntu-cpu"):
#   -DGGML_BACKEND_DL=ON -DGGML_NATIVE=OFF -DGGML_CPU_ALL_VARIANTS=ON, Release, OpenMP at its default (on).
# No -march=native: each CPU backend variant (libggml-cpu-<name>.so, 14 on x86) is compiled with a fixed feature
# list and the loader picks the best one the CPU supports at run time, exactly as the released binaries (and
# node-llama-cpp's prebuilt libggml-cpu-*.so, the same variants) do. On AVX512-BF16 + VBMI + VNNI CPUs without
# AMX (Zen 4 / Zen 5) that is "zen4": SSE42 AVX F16C FMA AVX2 BMI2 AVX512 AVX512_VBMI AVX512_VNNI AVX512_BF16, i.e.
#   -msse4.2 -mavx -mf16c -mfma -mavx2 -mbmi2 -mavx512f -mavx512cd -mavx512vl -mavx512dq -mavx512bw -mavx512vbmi
#   -mavx512vnni -mavx512bf16 (printed from the build at the end).
# ggml's CMake makes every tool depend on every variant, so all 14 are built (25 min wall with -j2 on this VM, busy).
# Environment:
#   LLAMA_CPU_VARIANT=zen4   build only that variant's code instead (GGML_CPU_ALL_VARIANTS=OFF with exactly the
#                            variant's feature list, as ggml_add_cpu_backend_variant sets it): the same kernels for
#                            a CPU that loads that variant, several times faster to build
#   LLAMA_OPENMP=OFF         ggml's own thread pool instead of OpenMP (node-llama-cpp's prebuilt binaries are built
#                            that way; the release build uses OpenMP)
#   JOBS=N                   parallel compile jobs (default: nproc)
# Not used from the release build: -DLLAMA_FATAL_WARNINGS=ON (warnings as errors; no effect on the code
# generated, and this machine's GCC 12 warns where the release's does not), the prebuilt web UI (downloaded
# from Hugging Face at configure time: off, -DLLAMA_USE_PREBUILT_UI=OFF; llama-server serves the API without it).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
dir=${1:-/work/llama-build}
bundle=$repo/tools/ref/node_modules/node-llama-cpp/llama/gitRelease.bundle
[[ -f "$bundle" ]] || { echo "llama_peer_build: $bundle missing (run scripts/setup.sh)" >&2; exit 1; }
case "$(realpath -m "$dir")/" in "$repo"/*) echo "llama_peer_build: $dir is inside the repository; build outside it" >&2; exit 1;; esac
mkdir -p "$dir"

# The source: the bundle's single commit, re-cloned when the bundle changes.
want=$(sha256sum "$bundle" | cut -d' ' -f1)
if [[ ! -f "$dir/src/.bundle-sha256" || "$(cat "$dir/src/.bundle-sha256")" != "$want" ]]; then
  rm -rf "$dir/src"
  git -c advice.detachedHead=false clone -q "$bundle" "$dir/src"
  echo "$want" > "$dir/src/.bundle-sha256"
fi
release=$(node -e 'console.log(require(process.argv[1]).tag)' "$repo/tools/ref/node_modules/node-llama-cpp/llama/llama.cpp.info.json" 2>/dev/null || echo "?")

# The variant ggml's loader scores highest on this CPU (ggml/src/CMakeLists.txt, GGML_CPU_ALL_VARIANTS list).
flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
has() { for f in "$@"; do [[ "$flags" == *" $f "* ]] || return 1; done; }
if has avx512f avx512_bf16 avx512_vnni avx512vbmi amx_tile amx_int8; then here=sapphirerapids
elif has avx512f avx512_bf16 avx512_vnni avx512vbmi; then here=zen4
elif has avx512f avx512_bf16 avx512_vnni; then here=cooperlake
elif has avx512f avx512_vnni avx512vbmi; then here=icelake
elif has avx512f avx512_vnni; then here=cascadelake
elif has avx512f avx512vbmi; then here=cannonlake
elif has avx512f; then here=skylakex
elif has avx2 avx_vnni; then here=alderlake
elif has avx2 fma bmi2; then here=haswell
else here=x64
fi
declare -A features=(
  [x64]="" [sse42]="SSE42" [sandybridge]="SSE42 AVX" [ivybridge]="SSE42 AVX F16C" [piledriver]="SSE42 AVX F16C FMA"
  [haswell]="SSE42 AVX F16C FMA AVX2 BMI2" [skylakex]="SSE42 AVX F16C FMA AVX2 BMI2 AVX512"
  [cannonlake]="SSE42 AVX F16C FMA AVX2 BMI2 AVX512 AVX512_VBMI" [cascadelake]="SSE42 AVX F16C FMA AVX2 BMI2 AVX512 AVX512_VNNI"
  [icelake]="SSE42 AVX F16C FMA AVX2 BMI2 AVX512 AVX512_VBMI AVX512_VNNI"
  [cooperlake]="SSE42 AVX F16C FMA AVX2 BMI2 AVX512 AVX512_VNNI AVX512_BF16"
  [zen4]="SSE42 AVX F16C FMA AVX2 BMI2 AVX512 AVX512_VBMI AVX512_VNNI AVX512_BF16"
  [alderlake]="SSE42 AVX F16C FMA AVX2 BMI2 AVX_VNNI"
  [sapphirerapids]="SSE42 AVX F16C FMA AVX2 BMI2 AVX512 AVX512_VBMI AVX512_VNNI AVX512_BF16 AMX_TILE AMX_INT8")
variant_args=(-DGGML_CPU_ALL_VARIANTS=ON)
cpu_lib=libggml-cpu-$here.so
if [[ -n "${LLAMA_CPU_VARIANT:-}" ]]; then
  [[ -v "features[$LLAMA_CPU_VARIANT]" ]] || { echo "llama_peer_build: unknown variant $LLAMA_CPU_VARIANT" >&2; exit 1; }
  variant_args=(-DGGML_CPU_ALL_VARIANTS=OFF)
  for f in NATIVE SSE42 AVX AVX2 BMI2 AVX_VNNI FMA F16C AVX512 AVX512_VBMI AVX512_VNNI AVX512_BF16 AMX_TILE AMX_INT8 AMX_BF16; do
    on=OFF
    [[ " ${features[$LLAMA_CPU_VARIANT]} " == *" $f "* ]] && on=ON
    variant_args+=("-DGGML_$f=$on")
  done
  cpu_lib=libggml-cpu.so
fi

echo "[llama_peer_build] llama.cpp $release (bundle sha256 ${want:0:12}) in $dir/src; this CPU loads the '$here' variant" \
     "(${features[$here]}); building ${LLAMA_CPU_VARIANT:+only }${LLAMA_CPU_VARIANT:-all variants}; OpenMP ${LLAMA_OPENMP:-ON (default)}"
cmake -S "$dir/src" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_INSTALL_RPATH='$ORIGIN' -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON \
  -DGGML_BACKEND_DL=ON -DGGML_NATIVE=OFF "${variant_args[@]}" \
  ${LLAMA_OPENMP:+-DGGML_OPENMP=$LLAMA_OPENMP} \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF >"$dir/cmake.log" 2>&1 ||
  { tail -30 "$dir/cmake.log" >&2; exit 1; }
cmake --build "$dir/build" -j "${JOBS:-$(nproc)}" --target llama-batched-bench llama-server llama-bench >"$dir/build.log" 2>&1 ||
  { grep -B2 -A8 -m5 "error" "$dir/build.log" >&2; exit 1; }
ls "$dir/build/bin"/llama-batched-bench "$dir/build/bin"/llama-server "$dir/build/bin"/llama-bench "$dir/build/bin/$cpu_lib" >/dev/null
echo "[llama_peer_build] done: $dir/build/bin/{llama-batched-bench,llama-server,llama-bench}, CPU backends: $(cd "$dir/build/bin" && ls libggml-cpu*.so | tr '\n' ' ')"
# The flags the variant this CPU loads was compiled with, from the build itself (for docs/benchmarks.md).
tgt=ggml-cpu-$here
[[ -n "${LLAMA_CPU_VARIANT:-}" ]] && tgt=ggml-cpu
f=$(grep -o -- "-m[a-z0-9.]*" "$dir/build/ggml/src/CMakeFiles/$tgt.dir/flags.make" 2>/dev/null | sort -u | tr '\n' ' ' || true)
echo "[llama_peer_build] $tgt compile flags: ${f:-(see $dir/build/ggml/src/CMakeFiles/$tgt.dir/flags.make)}"
