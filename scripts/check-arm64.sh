#!/usr/bin/env bash
# Checks edgevlm for arm64 (aarch64-unknown-linux-gnu) from an x86_64 Debian 12 box:
#   1. cargo clippy --all-targets -D warnings for aarch64 (a `cargo check` of the whole crate,
#      lib, bins, tests, benches and examples, plus the lints), the GStreamer sys crates
#      resolved through pkg-config against the arm64 -dev packages (Debian multiarch);
#   2. the prune unit tests, cross-linked against arm64 GStreamer and run under qemu-user (on
#      aarch64 they exercise the NEON SAD kernel and the portable one), and base::memory's (jemalloc,
#      built for 64 KiB pages, boots and purges);
#   3. the prune bench in criterion's test mode under qemu: every case once, and the NEON and
#      portable kernels compared on the bench frames. Timings under qemu mean nothing.
# Idempotent: installs what is missing (Debian packages, rustup target) and skips the rest.
#   scripts/check-arm64.sh
# Builds go to $CARGO_TARGET_DIR (default target/). On an arm64 machine none of this is needed:
# `cargo test --lib prune::` runs the NEON kernel natively.
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET=aarch64-unknown-linux-gnu
MULTIARCH=aarch64-linux-gnu

run() {
  echo "+ $*" >&2
  "$@"
}

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

if ! rustup target list --installed | grep -qx "$TARGET"; then
  run rustup target add "$TARGET"
fi

# Cross C compiler and linker (ring compiles C for the target; the test binaries link with it),
# qemu-user to run them, and arm64 GStreamer next to the amd64 one (Debian multiarch).
# libgstreamer-plugins-base1.0-dev is not Multi-Arch: same in Debian 12 (its arm64 and amd64
# packages conflict, and apt would remove the amd64 one), and libgstrtspserver-1.0-0:arm64 pulls
# the arm64 plugin packages: those two -dev packages are unpacked into $DEB_ROOT instead (below).
APT_PACKAGES=(
  gcc-aarch64-linux-gnu libc6-dev-arm64-cross
  qemu-user
  libgstreamer1.0-dev:arm64 libgstreamer-plugins-base1.0-0:arm64
  # gstreamer-video-1.0.pc and friends name orc-0.4 in Requires.private (pkg-config --cflags
  # follows it).
  liborc-0.4-dev:arm64
)
# Wait for another apt or dpkg run instead of failing on its lock.
APT=(apt-get -o DPkg::Lock::Timeout=900)
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  run $SUDO dpkg --add-architecture arm64
  run $SUDO "${APT[@]}" update -qq
fi
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  run $SUDO "${APT[@]}" update -qq
  # --no-remove: abort rather than remove anything (the amd64 -dev packages the build needs).
  run $SUDO env DEBIAN_FRONTEND=noninteractive "${APT[@]}" install -y -qq --no-install-recommends \
    --no-remove "${missing[@]}" >/dev/null
fi

# The -dev packages that cannot be installed for arm64, unpacked (with their libraries, so the
# lib*.so links resolve) under $DEB_ROOT; their .pc files get that prefix. Redone when Debian's
# versions change. At run time the tests load the multiarch libraries installed above.
TARGET_DIR=$(realpath -m "${CARGO_TARGET_DIR:-target}")
DEB_ROOT=$TARGET_DIR/arm64-deb
DEB_PACKAGES=(
  libgstreamer-plugins-base1.0-dev libgstreamer-plugins-base1.0-0
  libgstrtspserver-1.0-dev libgstrtspserver-1.0-0
)
versions() {
  for p in "${DEB_PACKAGES[@]}"; do
    echo "$p $(apt-cache show --no-all-versions "$p:arm64" | sed -n 's/^Version: //p')"
  done
}
if [ "$(cat "$DEB_ROOT/versions" 2>/dev/null)" != "$(versions)" ]; then
  run rm -rf "$DEB_ROOT"
  mkdir -p "$DEB_ROOT/debs"
  args=()
  for p in "${DEB_PACKAGES[@]}"; do args+=("$p:arm64"); done
  # apt-get download writes to the current directory (as root it warns about _apt: harmless).
  (cd "$DEB_ROOT/debs" && run apt-get download "${args[@]}")
  for deb in "$DEB_ROOT"/debs/*.deb; do
    run dpkg-deb -x "$deb" "$DEB_ROOT/root"
  done
  run sed -i "s|^prefix=/usr\$|prefix=$DEB_ROOT/root/usr|" \
    "$DEB_ROOT"/root/usr/lib/$MULTIARCH/pkgconfig/*.pc
  versions >"$DEB_ROOT/versions"
fi

# pkg-config for the target only (host build scripts keep the host's .pc files): the unpacked
# .pc files first, then the multiarch ones, which live in the real root (no sysroot).
export PKG_CONFIG_ALLOW_CROSS=1
export PKG_CONFIG_LIBDIR_aarch64_unknown_linux_gnu=$DEB_ROOT/root/usr/lib/$MULTIARCH/pkgconfig:/usr/lib/$MULTIARCH/pkgconfig:/usr/share/pkgconfig
export PKG_CONFIG_PATH_aarch64_unknown_linux_gnu=
export CC_aarch64_unknown_linux_gnu=$MULTIARCH-gcc
export AR_aarch64_unknown_linux_gnu=$MULTIARCH-ar
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=$MULTIARCH-gcc
# The arm64 loader and libraries (libc6:arm64, GStreamer) are in /lib/ld-linux-aarch64.so.1 and
# /usr/lib/aarch64-linux-gnu, where qemu finds them without -L.
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER=qemu-aarch64
# jemalloc (the default allocator) for the largest arm64 page, 64 KiB: a cross build would
# otherwise assume 4 KiB and fail to allocate on a 16 or 64 KiB kernel (docs/PACKAGE.md, "arm64").
export JEMALLOC_SYS_WITH_LG_PAGE=${JEMALLOC_SYS_WITH_LG_PAGE:-16}

t0=$SECONDS
run cargo clippy --target "$TARGET" --all-targets -- -D warnings
t1=$SECONDS
# The prune kernels, and the allocator: jemalloc boots for arm64 and gives freed memory back.
run cargo test --target "$TARGET" --lib -- prune:: base::memory::
t2=$SECONDS
run cargo test --target "$TARGET" --bench prune
t3=$SECONDS
echo "check-arm64: clippy/check $((t1 - t0)) s, prune unit tests (qemu) $((t2 - t1)) s," \
  "prune bench test mode (qemu) $((t3 - t2)) s" >&2
