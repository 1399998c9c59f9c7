#!/usr/bin/env bash
# The main job: set up, then generate from the default model (stories260K). The model comes from a local mirror
# directory when one exists (DEEPINFER_MODEL_DIR, default ../shared/models), else from the hub through
# `deepinfer pull` (HF_ENDPOINT honoured).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
mirror="${DEEPINFER_MODEL_DIR:-../shared/models}"
if [[ -f "$mirror/stories260K.gguf" ]]; then
  model="$mirror/stories260K.gguf"
else
  model="${DEEPINFER_DEFAULT_MODEL:-ggml-org/models:tinyllamas/stories260K.gguf}"
fi
exec build/deepinfer generate -m "$model" -n "${N:-200}" --temp "${TEMP:-0}" "$@"
