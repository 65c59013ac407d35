#!/usr/bin/env python3
"""Runs a command as systemd runs a Type=notify, NotifyAccess=main service, where no service
manager runs (scripts/package-test.sh):

  sd_notify_run.py --socket PATH [--ready-timeout S] [--stop-timeout S] [--after-ready CMD] -- COMMAND...

Binds the datagram socket PATH (the caller gives the command NOTIFY_SOCKET pointing at it), starts
COMMAND, takes notifications only from its PID (SO_PASSCRED, as NotifyAccess=main does), prints the
seconds from the start to READY=1, runs the shell command --after-ready while the service runs,
then sends SIGTERM and waits for the exit. Exit status 0 only when READY=1 came in time, the
after-ready command succeeded and the service exited 0 within the stop timeout after SIGTERM.
"""

import argparse
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--ready-timeout", type=float, default=120.0)
    ap.add_argument("--stop-timeout", type=float, default=30.0)
    ap.add_argument("--after-ready", default="")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        ap.error("no command")

    if os.path.exists(a.socket):
        os.unlink(a.socket)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    sock.bind(a.socket)
    os.chmod(a.socket, 0o777)  # the service runs as its own user

    messages = []  # (seconds since start, text)
    ignored = []

    def drain(timeout: float) -> None:
        ready, _, _ = select.select([sock], [], [], timeout)
        while ready:
            data, anc, _, _ = sock.recvmsg(65536, socket.CMSG_SPACE(12))
            pid = None
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    pid = struct.unpack("iII", payload[:12])[0]
            text = data.decode(errors="replace")
            if pid != proc.pid:
                ignored.append((pid, text))
            else:
                messages.append((time.monotonic() - t0, text))
            ready, _, _ = select.select([sock], [], [], 0)

    def seen(field: str) -> bool:
        return any(field in t.split("\n") for _, t in messages)

    t0 = time.monotonic()
    proc = subprocess.Popen(cmd)
    ok = True
    ready_at = None
    deadline = t0 + a.ready_timeout
    while ready_at is None:
        left = deadline - time.monotonic()
        if left <= 0:
            print(f"notify: no READY=1 within {a.ready_timeout:.0f} s", flush=True)
            ok = False
            break
        drain(min(left, 0.05))
        for at, text in messages:
            if "READY=1" in text.split("\n"):
                ready_at = at
                break
        if ready_at is None and proc.poll() is not None:
            drain(0)
            print(f"notify: the service exited with {proc.returncode} before READY=1", flush=True)
            ok = False
            break
    if ready_at is not None:
        print(f"ready_secs={ready_at:.3f}", flush=True)
        if a.after_ready:
            r = subprocess.run(a.after_ready, shell=True)
            if r.returncode != 0:
                print(f"notify: the after-ready check failed ({r.returncode})", flush=True)
                ok = False
        drain(0)
        if proc.poll() is not None:
            print(f"notify: the service exited with {proc.returncode} before SIGTERM", flush=True)
            ok = False

    if proc.poll() is None:
        t_term = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=a.stop_timeout)
            print(f"stop_secs={time.monotonic() - t_term:.3f}", flush=True)
            print(f"exit_status={proc.returncode}", flush=True)
            if proc.returncode != 0:
                ok = False
        except subprocess.TimeoutExpired:
            print(f"notify: no exit within {a.stop_timeout:.0f} s of SIGTERM; killing it", flush=True)
            proc.kill()
            proc.wait()
            ok = False
    drain(0.2)
    if ready_at is not None and not seen("STOPPING=1"):
        print("notify: no STOPPING=1", flush=True)
        ok = False
    # READY, STOPPING and errors in full; status updates and watchdog pings counted.
    for at, text in messages:
        fields = text.split("\n")
        if any(f in ("READY=1", "STOPPING=1") or f.startswith("ERRNO=") for f in fields):
            print(f"notify: +{at:.3f}s " + " ".join(fields), flush=True)
    pings = sum("WATCHDOG=1" in t.split("\n") for _, t in messages)
    print(f"notify: {len(messages)} messages from the main pid, {pings} WATCHDOG=1", flush=True)
    for pid, text in ignored:
        print(f"notify: ignored (pid {pid}, not the main pid {proc.pid}): " + text.replace("\n", " "), flush=True)
    sock.close()
    os.unlink(a.socket)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
