#!/usr/bin/env bash
# Extracts test data from the llama.cpp source bundle that node-llama-cpp ships (llama/gitRelease.bundle):
# vocab-only GGUFs of real tokenizers with their test vectors (models/ggml-vocab-*.gguf{,.inp,.out}) and the
# real chat templates (models/templates/*.jinja), into tools/ref/llama-data/ (git-ignored), and the public headers
# of that release (include/, ggml/include/, src/llama-ext.h) into tools/ref/llama-data/include, so the MTP
# reference tool (tools/ref/llama_mtp_ref.cc, a test tool) can call the library node-llama-cpp ships. No
# llama.cpp code is copied into deepinfer.
set -euo pipefail
cd "$(dirname "$0")/.."
bundle=tools/ref/node_modules/node-llama-cpp/llama/gitRelease.bundle
out=tools/ref/llama-data
stamp="$out/.bundle-sha256"
want=$(sha256sum "$bundle" | cut -d' ' -f1)
[[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -f "$out/include/llama.h" ]] && exit 0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git clone -q --bare "$bundle" "$tmp/llama.git"
rm -rf "$out" && mkdir -p "$out"
git --git-dir="$tmp/llama.git" archive HEAD models | tar -x -C "$out" --strip-components=1 \
  --wildcards 'models/ggml-vocab-*' 'models/templates/*'
mkdir -p "$out/include"
git --git-dir="$tmp/llama.git" archive HEAD include ggml/include src/llama-ext.h | tar -x -C "$tmp"
cp "$tmp"/include/*.h "$tmp"/ggml/include/*.h "$tmp"/src/llama-ext.h "$out/include/"
echo "$want" > "$stamp"
echo "[setup] llama.cpp test data in $out ($(ls "$out" | grep -c '\.gguf$') vocabularies, $(ls "$out/templates" | wc -l) templates)"
