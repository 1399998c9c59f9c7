#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine for deepinfer: system packages, the npm reference tools (from the lockfile)
# and a Release build in build/. Idempotent; safe to rerun.
#   scripts/setup.sh            install + build
#   SKIP_APT=1 scripts/setup.sh skip apt (packages already present)
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(build-essential cmake ninja-build pkg-config git ca-certificates curl openmpi-bin libopenmpi-dev
  nlohmann-json3-dev libcurl4-openssl-dev libssl-dev libpcre2-dev libutf8proc-dev libgtest-dev libgmock-dev zlib1g-dev
  clang libclang-rt-14-dev chromium  # chromium: the web chat page's browser test (tests/webui, headless)
  python3-dev python3-pybind11 pybind11-dev python3-pytest python3-pip python3-setuptools python3-wheel)  # the Python package
# node/npm may come from elsewhere (nvm, nodesource): only ask apt for them when absent.
command -v node >/dev/null && command -v npm >/dev/null || APT_PACKAGES+=(nodejs npm)

if [[ "${SKIP_APT:-0}" != 1 ]]; then
  missing=()
  for p in "${APT_PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if ((${#missing[@]})); then
    echo "[setup] apt-get install ${missing[*]}"
    SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
  fi
fi

# Reference implementations for the parity tests and benchmarks (pinned by tools/ref/package-lock.json).
stamp=tools/ref/node_modules/.deepinfer-lock-sha256
want=$(sha256sum tools/ref/package-lock.json | cut -d' ' -f1)
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  echo "[setup] npm ci (tools/ref)"
  (cd tools/ref && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --omit=optional --no-audit --no-fund)
  echo "$want" > "$stamp"
fi

# playwright-core for the web chat page's browser test (pinned by tests/webui/package-lock.json; it drives Debian's
# chromium and downloads no browser).
stamp=tests/webui/node_modules/.deepinfer-lock-sha256
want=$(sha256sum tests/webui/package-lock.json | cut -d' ' -f1)
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  echo "[setup] npm ci (tests/webui)"
  (cd tests/webui && npm ci --no-audit --no-fund)
  echo "$want" > "$stamp"
fi

scripts/extract_llama_data.sh

echo "[setup] building (Release)"
# A unity build (eight sources compiled as one) halves a fresh build: most of a unit's time is parsing the same
# headers (the STL, nlohmann/json). DEEPINFER_UNITY_BUILD=OFF compiles file by file, for editing a file at a time.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD="${DEEPINFER_UNITY_BUILD:-ON}" >/dev/null
cmake --build build -j "$(nproc)"

# The Python package (python/, docs/python.md) into Debian's python3: pip packages the extension CMake just built
# (nothing is compiled or downloaded: --no-build-isolation uses Debian's setuptools, --no-index never asks PyPI).
# Debian marks its python3 externally managed (PEP 668), hence --break-system-packages; as root the package lands
# in /usr/local/lib/python3.*/dist-packages, otherwise in the user's site-packages.
if [[ -f build/python/deepinfer/__init__.py ]]; then
  echo "[setup] pip install ./python (system python3)"
  PIP_USER=(); [[ $(id -u) -ne 0 ]] && PIP_USER=(--user)
  DEEPINFER_BUILD_DIR="$PWD/build" /usr/bin/python3 -m pip install -q --no-build-isolation --no-deps --no-index \
    --force-reinstall --break-system-packages --root-user-action=ignore "${PIP_USER[@]}" ./python
  (cd /tmp && /usr/bin/python3 -c "import deepinfer")  # from outside the repo: the installed copy
fi
echo "[setup] done: build/deepinfer"
