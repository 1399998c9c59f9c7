#!/usr/bin/env bash
# The public-API example (examples/generate.cc) must generate exactly what `deepinfer generate` does: same
# model, same prompt, greedy. Also checks that the public headers include only the standard library and
# deepinfer/* (what keeps internals out of programs built against include/).
set -u
bin="$1" example="$2" include_dir="$3"
shared="${DEEPINFER_SHARED_MODELS:-$(dirname "$0")/../../../shared/models}"
model="$shared/stories260K.gguf"
fails=0

for prompt in "Once upon a time" "The little dog" ""; do
  want=$("$bin" generate -m "$model" -p "$prompt" -n 48 --temp 0 -q) || { echo "FAIL deepinfer generate ($prompt)"; fails=$((fails + 1)); continue; }
  got=$("$example" "$model" "$prompt" 48 2>/dev/null) || { echo "FAIL example_generate ($prompt)"; fails=$((fails + 1)); continue; }
  if [[ "$got" != "$want" || -z "$got" ]]; then
    echo "FAIL '$prompt': example printed"; echo "  $got"; echo "deepinfer generate printed"; echo "  $want"
    fails=$((fails + 1))
  else
    echo "ok   '$prompt': ${got:0:60}..."
  fi
done

# A model that does not load: a clear error and a non-zero exit from the example too.
out=$("$example" /nonexistent/model.gguf "x" 2>&1 >/dev/null)
rc=$?
if ((rc == 0 || rc >= 128)) || [[ "$out" != *"model.gguf"* ]]; then
  echo "FAIL missing model: rc=$rc, stderr: $out"
  fails=$((fails + 1))
fi

# Public headers: <standard header> or "deepinfer/..." only.
while IFS= read -r line; do
  file=${line%%:*} inc=${line#*#include }
  inc=${inc%%//*}
  inc=${inc%"${inc##*[![:space:]]}"}
  if [[ ! "$inc" =~ ^\<[a-z_]+\>$ && ! "$inc" =~ ^\"deepinfer/[a-z_]+\.h\"$ ]]; then
    echo "FAIL $file includes $inc (public headers may include only the standard library and deepinfer/*)"
    fails=$((fails + 1))
  fi
done < <(grep -H '^[[:space:]]*#[[:space:]]*include' "$include_dir"/deepinfer/*.h | sed 's/:[[:space:]]*#[[:space:]]*include[[:space:]]*/:#include /')

((fails == 0)) && echo "example matches deepinfer generate"
exit $((fails > 0))
