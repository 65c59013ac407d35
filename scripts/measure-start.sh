#!/usr/bin/env bash
# The binary's size and its start-up time to READY=1 (sd_notify) on the tiny model, one test
# camera, MQTT off: the median of 5 starts after one warm-up start (the page cache holds the
# model and libraries, as on a device that restarts the service).
#
#   scripts/measure-start.sh [BINARY]      default target/release/edgevlm
#
# scripts/debian11.sh measure runs it inside the Debian 11 root; docs/ARCHITECTURE.md, "Platform
# floors", has the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release/edgevlm}
[ -x "$BIN" ] || { echo "measure-start: no binary at $BIN (cargo build --release)" >&2; exit 1; }
BIN=$(realpath "$BIN")
[ -f engines/tiny/model/manifest.toml ] || { echo "measure-start: run scripts/setup.sh first" >&2; exit 1; }

python3 - "$BIN" "$PWD/engines/tiny/model" <<'EOF'
import os, signal, socket, statistics, subprocess, sys, tempfile, time

binary, model = sys.argv[1], sys.argv[2]
size = os.path.getsize(binary)
work = tempfile.mkdtemp(prefix="edgevlm-start-")
cfg = os.path.join(work, "edgevlm.toml")
with open(cfg, "w") as f:
    f.write(f'[mqtt]\nenabled = false\n\n[runtime]\nstate_dir = "state"\n\n'
            f'[engine]\nmodel_dir = "{model}"\n\n'
            f'[[cameras]]\nid = "cam"\nuri = "test://ball"\n')

def start_to_ready():
    path = os.path.join(work, "notify.sock")
    if os.path.exists(path):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(120)
    env = dict(os.environ, NOTIFY_SOCKET=path, RUST_LOG="warn")
    t0 = time.monotonic()
    child = subprocess.Popen([binary, "run", "-c", cfg], env=env, cwd=work,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        while True:
            msg = sock.recv(4096).decode()
            if "READY=1" in msg.split("\n"):
                return time.monotonic() - t0
    finally:
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=60)
        sock.close()
        if child.returncode != 0:
            sys.exit(f"measure-start: the run exited {child.returncode}: {err.decode()[-2000:]}")

start_to_ready()
times = [start_to_ready() for _ in range(5)]
with open("/etc/os-release") as f:
    osname = dict(l.rstrip().split("=", 1) for l in f if "=" in l).get("PRETTY_NAME", "?").strip('"')
print(f"measure-start: {osname}: binary {size / 2**20:.1f} MiB ({size} bytes); READY after "
      f"{statistics.median(times) * 1000:.0f} ms median of 5 "
      f"(min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f})")
EOF
