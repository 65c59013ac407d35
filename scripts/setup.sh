#!/usr/bin/env bash
# Installs what edgevlm needs on Debian 12 and prepares the tiny model. Idempotent: anything
# already present is skipped, so it is cheap to run before every build or test.
#   scripts/setup.sh          Debian packages, Python venv, tiny model
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  pkg-config
  # jemalloc, the default allocator, is built from its C sources (tikv-jemalloc-sys runs make).
  make
  libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev libgstrtspserver-1.0-dev
  gstreamer1.0-plugins-base gstreamer1.0-plugins-good gstreamer1.0-plugins-bad
  gstreamer1.0-plugins-ugly gstreamer1.0-libav gstreamer1.0-tools
  mosquitto mosquitto-clients
  openssl
  python3-venv
  curl
  # The web page's test (tests/web_page.py): headless Chromium through chromedriver.
  chromium chromium-driver
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: no Rust toolchain found. Install one with rustup (https://rustup.rs), rustc >= 1.95," >&2
  echo "       then run this command again. (Debian's own rustc is too old for gstreamer-rs 0.25.)" >&2
  exit 1
fi

if ! .venv/bin/python -c 'import onnx, numpy, onnxruntime, tokenizers, jinja2, openai, jsonschema' >/dev/null 2>&1; then
  echo "setup: creating the Python venv (.venv) for ONNX Runtime and the tiny-model generator"
  python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check -r engines/requirements.txt
fi

if [ ! -f engines/tiny/model/manifest.toml ]; then
  echo "setup: generating the tiny test model (engines/tiny/model)"
  .venv/bin/python engines/tiny/generate.py --out engines/tiny/model >/dev/null
fi

if [ ! -f engines/apollo/model/manifest.toml ]; then
  echo "setup: generating the tiny Apollo-shaped test model (engines/apollo/model)"
  .venv/bin/python engines/apollo/generate.py --out engines/apollo/model >/dev/null
fi
