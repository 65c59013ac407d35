#!/usr/bin/env bash
# DiffFP GPU check: GPU-vs-CPU parity tests (a missing GPU FAILS here, it does not skip) and the
# GPU bench. Under 5 minutes on a GPU machine.
#
#   scripts/device-check.sh            build with --features prune-cuda and run (needs cargo on the
#                                      GPU machine)
#   scripts/device-check.sh build DIR  build here only: copy the test and bench binaries to DIR
#   scripts/device-check.sh run DIR    run binaries built by `build` (GPU machine without cargo;
#                                      same CPU architecture; carry DIR there)
#
# The binaries load libcuda and libnvrtc at run time. cudarc is built for CUDA 12.6 names
# (`libnvrtc.so`, `libnvrtc.so.12`, ...); on a CUDA 13 machine only `libnvrtc.so.13` may exist,
# so `run` links the first NVRTC it finds as `libnvrtc.so` in a private directory.
set -euo pipefail

cd "$(dirname "$0")/.."
mode="${1:-all}"
dir="${2:-target/device-check}"

build() {
    mkdir -p "$dir"
    # One line per built artefact; keep the test and bench executables we need.
    cargo test --release --features prune-cuda --test gpu_parity --no-run --message-format=json \
        | grep -o '"executable":"[^"]*gpu_parity[^"]*"' | cut -d'"' -f4 \
        | xargs -I{} cp {} "$dir/gpu_parity"
    cargo bench --features prune-cuda --bench prune --no-run --message-format=json \
        | grep -o '"executable":"[^"]*prune[^"]*"' | cut -d'"' -f4 \
        | xargs -I{} cp {} "$dir/prune_bench"
    ls -l "$dir"
}

find_nvrtc() {
    # Look where CUDA toolkits and the pip nvidia-* wheels put it; first hit wins.
    local roots=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu)
    local site
    for site in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
        roots+=("$site/nvidia")
    done
    find "${roots[@]}" -name 'libnvrtc.so*' ! -name '*builtins*' 2>/dev/null | sort | head -n 1
}

run() {
    local libdir nvrtc
    libdir="$(mktemp -d)"
    nvrtc="$(find_nvrtc || true)"
    if [[ -n "$nvrtc" ]]; then
        ln -sf "$nvrtc" "$libdir/libnvrtc.so"
        # NVRTC dlopens its builtins library from its own directory.
        export LD_LIBRARY_PATH="$libdir:$(dirname "$nvrtc"):${LD_LIBRARY_PATH:-}"
        echo "NVRTC: $nvrtc"
    else
        echo "NVRTC: not found (the parity tests will fail with the reason)"
    fi
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true

    echo "== GPU parity (EDGEVLM_REQUIRE_GPU=1: no GPU is a failure)"
    EDGEVLM_REQUIRE_GPU=1 timeout 120 "$dir/gpu_parity" --nocapture --test-threads 1

    echo "== Bench (cuda/ batches and the cpu/ cases of this machine)"
    timeout 150 "$dir/prune_bench" --bench --warm-up-time 1 --measurement-time 3
}

case "$mode" in
    build) build ;;
    run) run ;;
    all) build && run ;;
    *) echo "usage: $0 [build DIR | run DIR]" >&2; exit 2 ;;
esac
