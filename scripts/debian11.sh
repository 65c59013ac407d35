#!/usr/bin/env bash
# Builds edgevlm and runs its test suite inside a Debian 11 (bullseye) root: GStreamer 1.18 and
# GLib 2.66, older than JetPack 6's 1.20 / 2.72, so a pass here bounds our floor from below
# (docs/ARCHITECTURE.md, "Platform floors").
#
#   scripts/debian11.sh            after scripts/test.sh, as root, on Debian 12: the tests
#   scripts/debian11.sh root       only makes the root
#   scripts/debian11.sh measure    the release binary's size and time to READY there instead
#
# - The root is made once with debootstrap from the mirror the host's apt uses, and kept in
#   $DEBIAN11_ROOT (default /var/tmp/edgevlm-debian11, outside the repository so that no clean of
#   the repository can walk into it); it is remade when the package list below changes.
# - The Rust toolchain is the host's (rustup's binaries need only glibc 2.17), mounted in.
# - Everything is mounted in a private mount namespace (unshare), so nothing stays mounted when
#   the script ends, however it ends.
# - The fixtures the host's scripts/test.sh makes with transformers and torch (the tiny and
#   Apollo-shaped models, the Qwen tokenizer, the VideoLLaMA3 parity and resize references) are
#   copied in: Debian 11's Python 3.9 cannot run that torch. For the same reason one test binary
#   does not run here: tests/videollama3_export.rs runs the Python export recipe itself (torch),
#   not the runtime.
# - The project venv is Debian 11's Python with the versions of scripts/debian11-requirements.txt;
#   the ONNX Runtime library the runtime loads is the host venv's 1.32 (a manylinux_2_28 build).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
ROOT=${DEBIAN11_ROOT:-/var/tmp/edgevlm-debian11}
SRC=/src/edgevlm

PACKAGES=(
  ca-certificates gcc libc6-dev make pkg-config
  libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev libgstrtspserver-1.0-dev
  gstreamer1.0-plugins-base gstreamer1.0-plugins-good gstreamer1.0-plugins-bad
  gstreamer1.0-plugins-ugly gstreamer1.0-libav gstreamer1.0-tools
  mosquitto mosquitto-clients openssl curl systemd procps
  python3 python3-venv
  chromium chromium-driver
)

[ "$(id -u)" -eq 0 ] || { echo "debian11: run as root (debootstrap and chroot)" >&2; exit 1; }
for tool in debootstrap unshare; do
  command -v "$tool" >/dev/null 2>&1 || {
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
  }
done

RUSTUP_DIR=${RUSTUP_HOME:-$HOME/.rustup}
CARGO_DIR=${CARGO_HOME:-$HOME/.cargo}
TOOLCHAIN=$(rustup show active-toolchain | cut -d' ' -f1)

# The host's Debian mirror (the first URI of its apt sources).
mirror=$(grep -rhoE '^(URIs:|deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list \
  /etc/apt/sources.list.d/ 2>/dev/null | grep -oE 'https?://[^ ]+' | head -1 || true)
[ -n "$mirror" ] || { echo "debian11: no Debian mirror in the host's apt sources" >&2; exit 1; }

stamp=$(printf '%s\n' "${PACKAGES[@]}" | sha256sum | cut -d' ' -f1)
if [ "$(cat "$ROOT/.edgevlm-stamp" 2>/dev/null)" != "$stamp" ]; then
  echo "== debian11: making the root in $ROOT (debootstrap bullseye from $mirror)"
  # A root left by an interrupted run has no mounts (they lived in a namespace): safe to remove.
  rm -rf --one-file-system "$ROOT"
  mkdir -p "$ROOT"
  t0=$SECONDS
  debootstrap --variant=minbase bullseye "$ROOT" "$mirror" >"$ROOT.debootstrap.log" 2>&1 || {
    tail -20 "$ROOT.debootstrap.log" >&2; exit 1; }
  # bullseye's last point release only: the mirror's bullseye-security pool lacks files its
  # index names (404 on GStreamer's updates, 2026-12-03), and a test root needs no updates.
  echo "deb $mirror bullseye main" >"$ROOT/etc/apt/sources.list"
  cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
  # No services start inside the root.
  printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
  chmod 755 "$ROOT/usr/sbin/policy-rc.d"
  unshare -m --propagation private bash -euc "
    mount -t proc proc '$ROOT/proc'; mount --rbind /dev '$ROOT/dev'; mount --rbind /sys '$ROOT/sys'
    chroot '$ROOT' apt-get update -qq
    DEBIAN_FRONTEND=noninteractive chroot '$ROOT' apt-get install -y -qq --no-install-recommends \
      ${PACKAGES[*]} >/dev/null
    chroot '$ROOT' apt-get clean"
  echo "$stamp" >"$ROOT/.edgevlm-stamp"
  echo "debian11: root made in $((SECONDS - t0)) s"
fi
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
# `localhost` for the MQTT clients (debootstrap writes no /etc/hosts).
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$ROOT/etc/hosts"
[ "${1:-}" = root ] && exit 0

# The fixtures scripts/test.sh makes; this script runs after it.
FIXTURES=(engines/tiny/model engines/apollo/model engines/qwen/tokenizer.json target/videollama3-reduced
  target/resize-reference target/qwen-tokenizer target/smolvlm2-prompt target/smolvlm2-reduced)
for f in "${FIXTURES[@]}"; do
  [ -e "$f" ] || { echo "debian11: $f is missing: run scripts/test.sh first" >&2; exit 1; }
done
ORT_LIB=$(ls .venv/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so.1.* | head -1)

echo "== debian11: copying the tree and the fixtures into $ROOT$SRC"
mkdir -p "$ROOT$SRC" "$ROOT/build" "$ROOT/opt/onnxruntime" "$ROOT$RUSTUP_DIR" "$ROOT$CARGO_DIR"
# The working tree as git sees it (tracked and untracked files it does not ignore), then the
# fixtures; files deleted here since the last copy are deleted there too.
find "$ROOT$SRC" -mindepth 1 -maxdepth 1 ! -name .venv -exec rm -rf --one-file-system {} +
{ git ls-files -z --cached --others --exclude-standard; printf '%s\0' "${FIXTURES[@]}"; } |
  xargs -0 -I{} sh -c '[ -e "{}" ] && printf "%s\0" "{}"' |
  tar --null -T - -cf - | tar -xf - -C "$ROOT$SRC"
cp "$ORT_LIB" "$ROOT/opt/onnxruntime/"
# The host's CA bundle (it may hold a proxy's CA the root's own bundle lacks), for pip and cargo.
cp "${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}" "$ROOT/build/host-ca.crt"
cp scripts/debian11-requirements.txt "$ROOT/build/requirements.txt"

# Inside: the project venv (once per requirements), then the build and the tests.
cat >"$ROOT/build/inner.sh" <<'EOF'
set -euo pipefail
cd /src/edgevlm
echo "== debian11: $(. /etc/os-release; echo "$PRETTY_NAME"), $(gst-inspect-1.0 --version | sed -n 2p), GLib $(pkg-config --modversion glib-2.0)"
req=$(sha256sum /build/requirements.txt | cut -d' ' -f1)
if [ "$(cat .venv/.stamp 2>/dev/null)" != "$req" ]; then
  rm -rf .venv && python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check --upgrade pip
  .venv/bin/pip install -q --disable-pip-version-check -r /build/requirements.txt
  echo "$req" >.venv/.stamp
fi
# The runtime's own search of the venv (tests/engine_cli.rs clears ORT_DYLIB_PATH) must find the
# 1.32 library beside the wheel's 1.19 one; it takes the newest name. Python's onnxruntime does
# not load this file.
cp -f /opt/onnxruntime/libonnxruntime.so.* .venv/lib/python3*/site-packages/onnxruntime/capi/
if [ "${1:-}" = measure ]; then
  cargo build --locked --release --bin edgevlm 2>&1 | tail -1
  bash scripts/measure-start.sh /build/target/release/edgevlm
  exit
fi
tests=$(ls tests/*.rs | xargs -n1 basename | sed 's/\.rs$//' | grep -vx videollama3_export |
  sed 's/^/--test /' | tr '\n' ' ')
# DEBIAN11_ONLY="a b": only those test binaries (while working on a failure there).
[ -z "${DEBIAN11_ONLY:-}" ] || tests=$(printf -- '--test %s ' $DEBIAN11_ONLY)
echo "== debian11: cargo build (tests)"
t0=$SECONDS
# Line tables only, not full debug information: backtraces keep their file and line, and the
# build and its links are faster.
export CARGO_PROFILE_DEV_DEBUG=line-tables-only
cargo build --workspace --locked --examples 2>&1 | tail -1
cargo test --workspace --locked --no-run --lib --bins $tests 2>&1 | grep -v "^ *Executable" | tail -2
echo "debian11: built in $((SECONDS - t0)) s"
echo "== debian11: cargo tests (every test binary but videollama3_export)"
# A hang fails the run after 45 minutes instead of holding CI.
timeout 2700 cargo test --workspace --locked --no-fail-fast --lib --bins $tests
EOF

exec unshare -m --propagation private bash -euc "
  mount -t proc proc '$ROOT/proc'
  mount --rbind /dev '$ROOT/dev'
  mount --rbind /sys '$ROOT/sys'
  mount -t tmpfs tmpfs '$ROOT/tmp'
  mount --bind '$RUSTUP_DIR' '$ROOT$RUSTUP_DIR'
  mount --bind '$CARGO_DIR' '$ROOT$CARGO_DIR'
  exec chroot '$ROOT' env -i HOME='$HOME' TERM=dumb LANG=C.UTF-8 \
    PATH='$CARGO_DIR/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin' \
    RUSTUP_HOME='$RUSTUP_DIR' CARGO_HOME='$CARGO_DIR' RUSTUP_TOOLCHAIN='$TOOLCHAIN' \
    CARGO_TARGET_DIR=/build/target CARGO_TERM_COLOR=never \
    SSL_CERT_FILE=/build/host-ca.crt PIP_CERT=/build/host-ca.crt CARGO_HTTP_CAINFO=/build/host-ca.crt \
    ORT_DYLIB_PATH=/opt/onnxruntime/$(basename "$ORT_LIB") \
    DEBIAN11_ONLY='${DEBIAN11_ONLY:-}' bash /build/inner.sh ${1:-}"
