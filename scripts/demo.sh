#!/usr/bin/env bash
# Quick start: installs what is missing, builds in release mode and runs the demo configuration
# (a live test-pattern camera on the CPU). Stop it with Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cargo build --release --locked
exec ./target/release/edgevlm run -c "${1:-configs/edgevlm.toml}"
