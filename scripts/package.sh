#!/usr/bin/env bash
# Builds the release binary and the Debian package (docs/PACKAGE.md), as root on Debian 12:
#   scripts/package.sh [cargo-deb options, e.g. --deb-version 0.1.0-2]
# Prints the path and size of the packaged binary and of the .deb. The package holds the binary,
# the unit, /etc/edgevlm, the scenes model and ONNX Runtime's library, taken from the onnxruntime
# wheel that scripts/setup.sh installs into .venv (Debian ships no ONNX Runtime).
set -euo pipefail
cd "$(dirname "$0")/.."

# cargo-deb turns [package.metadata.deb] of Cargo.toml into the .deb. Pinned, and installed under
# the target directory (not ~/.cargo/bin, not the repository): only this script uses it.
CARGO_DEB_VERSION=3.8.0

./scripts/setup.sh

target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
[ -n "$target_dir" ] || { echo "package: cannot find the cargo target directory" >&2; exit 1; }

tools="$target_dir/tools"
cargo_deb="$tools/bin/cargo-deb"
if ! "$cargo_deb" --version 2>/dev/null | grep -qx "cargo-deb $CARGO_DEB_VERSION\|$CARGO_DEB_VERSION"; then
  echo "package: installing cargo-deb $CARGO_DEB_VERSION into $tools (a few minutes, once)"
  # Built in a temporary directory, not in our target directory.
  env -u CARGO_TARGET_DIR cargo install cargo-deb --version "$CARGO_DEB_VERSION" --locked --root "$tools" --quiet
fi

# The ONNX Runtime library of the wheel, installed as its soname (libonnxruntime.so.1) so that the
# packaged config's path survives a newer 1.x; its licence and third-party notices go with it.
# Staged under target/ next to Cargo.toml, where [package.metadata.deb] assets expects them.
mapfile -t libs < <(ls .venv/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so.1.* 2>/dev/null)
if [ ${#libs[@]} -ne 1 ]; then
  echo "package: expected one libonnxruntime.so.1.* in .venv (scripts/setup.sh), found ${#libs[@]}" >&2
  exit 1
fi
lib=${libs[0]}
wheel_dir=$(dirname "$(dirname "$lib")")
ort_version=${lib##*libonnxruntime.so.}
stage=target/deb-assets
rm -rf "$stage"
mkdir -p "$stage/onnxruntime"
install -m 644 "$lib" "$stage/libonnxruntime.so.1"
install -m 644 "$wheel_dir/LICENSE" "$wheel_dir/ThirdPartyNotices.txt" "$stage/onnxruntime/"
cat > "$stage/onnxruntime/SOURCE" <<EOF
/usr/lib/edgevlm/libonnxruntime.so.1 is libonnxruntime.so.$ort_version, unmodified, from the PyPI
wheel onnxruntime==$ort_version ($(sed -n 's/^Tag: //p' "$wheel_dir"/../onnxruntime-"$ort_version".dist-info/WHEEL | head -1)), MIT licence (LICENSE, ThirdPartyNotices.txt).
sha256 $(sha256sum "$lib" | cut -d' ' -f1)
EOF

# jemalloc (the default allocator) fixes the largest page size it supports when it is built: on
# arm64 the kernel's page may be 4 KiB (Jetson, Debian), 16 KiB (Raspberry Pi 5) or 64 KiB, and a
# binary built for a smaller page than the kernel's cannot allocate at all. 64 KiB runs on all three
# (docs/PACKAGE.md, "arm64").
if [ "$(uname -m)" = aarch64 ]; then export JEMALLOC_SYS_WITH_LG_PAGE=${JEMALLOC_SYS_WITH_LG_PAGE:-16}; fi
cargo build --release --locked --bin edgevlm
deb_log=$(mktemp)
trap 'rm -f "$deb_log"' EXIT
# Stripped: the release profile's line tables make the binary 6x larger (88 MB against 14.6 MB).
# `--dbgsym` instead keeps them, in a separate edgevlm-dbgsym .ddeb.
strip=(--strip)
for a in "$@"; do case $a in --dbgsym|--no-strip|--separate-debug-symbols) strip=() ;; esac; done
"$cargo_deb" deb --no-build --locked "${strip[@]}" "$@" | tee "$deb_log"
deb=$(tail -n 1 "$deb_log")
[ -f "$deb" ] || { echo "package: cargo-deb did not print the .deb's path" >&2; exit 1; }

# The binary as packaged (stripped), read back from the .deb.
packaged=$(mktemp -d)
trap 'rm -rf "$packaged" "$deb_log"' EXIT
dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$packaged" ./usr/bin/edgevlm
size() { stat -c %s "$1" | awk '{ printf "%d bytes (%.1f MiB)", $1, $1 / 1048576 }'; }
echo "package: binary  $target_dir/release/edgevlm, packaged as /usr/bin/edgevlm: $(size "$packaged/usr/bin/edgevlm")"
echo "package: .deb    $deb: $(size "$deb")"
