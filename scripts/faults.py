#!/usr/bin/env python3
"""Fault injection against a real edgevlm (docs/RELIABILITY.md, "Fault injection"): malformed
questions with a fixed seed, mutated configurations, camera kill and freeze cycles, broker
outages with and without persistence. Loopback only; every scenario is bounded in count and time.
Prints one table, tried / survived / lost, and exits 1 if anything crashed or was lost.

    scripts/faults.py                  the long versions (about 15 minutes)
    scripts/faults.py --short          what tests/faults.rs runs (about a minute)
    scripts/faults.py --only questions,configs

Needs the binaries (`cargo build --release --bin edgevlm --example rtsp_test_server`, or
`--bin target/debug/edgevlm`), mosquitto and mosquitto_sub/pub. Standard library only.
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_for(cond, bound, step=0.1):
    """Polls `cond` until it holds (True) or `bound` seconds pass (False)."""
    end = time.time() + bound
    while time.time() < end:
        if cond():
            return True
        time.sleep(step)
    return cond()


class Mosquitto:
    def __init__(self, work, persistence):
        self.port = free_port()
        self.dir = os.path.join(work, f"mosquitto-{self.port}")
        os.makedirs(self.dir, exist_ok=True)
        # Mosquitto started as root drops to its own user: it must be able to write here (its
        # persistence file, its log), or persistence silently does nothing.
        os.chmod(self.dir, 0o777)
        os.chmod(work, 0o755)
        self.conf = os.path.join(self.dir, "mosquitto.conf")
        with open(self.conf, "w") as f:
            f.write(f"listener {self.port} 127.0.0.1\nallow_anonymous true\n"
                    f"log_dest file {self.dir}/mosquitto.log\nlog_type all\n")
            if persistence:
                f.write(f"persistence true\npersistence_location {self.dir}/\nautosave_interval 1\n")
        self.proc = None
        self.start()

    def start(self):
        self.proc = subprocess.Popen(["mosquitto", "-c", self.conf], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        ok = wait_for(lambda: self._accepts(), 10)
        assert ok, "mosquitto did not start"

    def _accepts(self):
        try:
            socket.create_connection(("127.0.0.1", self.port), 0.2).close()
            return True
        except OSError:
            return False

    def stop(self):
        if self.proc:
            self.proc.terminate()
            self.proc.wait()
            self.proc = None


class Runtime:
    """`edgevlm run` on a configuration; its log, its metrics."""

    def __init__(self, args, work, name, mqtt, cameras, engine=None):
        self.dir = os.path.join(work, name)
        os.makedirs(self.dir, exist_ok=True)
        self.metrics = free_port()
        engine = engine or 'enabled = false'
        cfg = (f'[runtime]\nstatus_interval_secs = 1\nstate_dir = "{self.dir}/state"\n'
               f'[telemetry]\nmetrics_listen = "127.0.0.1:{self.metrics}"\n'
               f'[engine]\n{engine}\n[mqtt]\n{mqtt}\n{cameras}')
        self.config = os.path.join(self.dir, "edgevlm.toml")
        with open(self.config, "w") as f:
            f.write(cfg)
        self.log_path = os.path.join(self.dir, "run.log")
        self.proc = subprocess.Popen([args.bin, "run", "-c", self.config],
                                     stdout=subprocess.DEVNULL, stderr=open(self.log_path, "w"))
        assert wait_for(lambda: "MQTT connected" in self.log(), 60), self.log()[-3000:]

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def metric(self, name):
        try:
            body = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics}/metrics", timeout=5)
            for line in body.read().decode().splitlines():
                if line.startswith(name + " ") or line.startswith(name + "{"):
                    return float(line.rsplit(" ", 1)[1])
        except OSError:
            return None
        return None

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.returncode


class Sub:
    """mosquitto_sub writing `topic payload` lines to a file."""

    def __init__(self, port, topics, work, persistent_id=None):
        self.path = os.path.join(work, f"sub-{free_port()}.txt")
        cmd = ["mosquitto_sub", "-p", str(port), "-v", "-q", "1"]
        if persistent_id:
            cmd += ["-c", "-i", persistent_id]
        for t in topics:
            cmd += ["-t", t]
        self.proc = subprocess.Popen(cmd, stdout=open(self.path, "w"), stderr=subprocess.DEVNULL)
        time.sleep(0.5)

    def lines(self):
        with open(self.path, errors="replace") as f:
            return f.read().splitlines()

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def pub(port, topic, payload, retain=False):
    # mosquitto_pub refuses an empty stdin; -n sends the empty payload.
    cmd = ["mosquitto_pub", "-p", str(port), "-q", "1", "-t", topic, "-s" if payload else "-n"]
    if retain:
        cmd.append("-r")
    subprocess.run(cmd, input=payload or None, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=30)


# --- questions ------------------------------------------------------------------------------


def bad_question(rng, i):
    """One question from a family of malformed (and a few valid) payloads, by seed."""
    qid = f"f{i}"
    kind = rng.randrange(14)
    if kind == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 600)))
    if kind == 1:
        return b""
    if kind == 2:
        full = json.dumps({"id": qid, "question": "What is moving?"}).encode()
        return full[: rng.randrange(1, len(full))]
    if kind == 3:
        return json.dumps({"id": rng.randrange(10**6), "question": "x"}).encode()
    if kind == 4:
        return json.dumps({"id": qid, "question": ["a", "b"]}).encode()
    if kind == 5:
        return json.dumps({"id": qid}).encode()
    if kind == 6:
        return ('{"id": "%s", "question": "a", "x": %s1%s}' % (qid, "[" * 200, "]" * 200)).encode()
    if kind == 7:
        return ('{"id": "%s", "question": "\\ud800 lone"}' % qid).encode()
    if kind == 8:
        return json.dumps({"id": qid, "question": "w" * rng.randrange(2000, 20000)}).encode()
    if kind == 9:
        return json.dumps({"id": qid, "question": "ok", "window_secs": -rng.random()}).encode()
    if kind == 10:
        return json.dumps({"id": qid + "/+#", "question": "ok"}).encode()
    if kind == 11:
        return b'{"id": "' + qid.encode() + b'", "question": "\xff\xfe"}'
    if kind == 12:
        return json.dumps({"id": qid, "question": "ok", "max_tokens": 10**9}).encode()
    return json.dumps({"id": qid, "question": "What is moving?", "unknown": 1}).encode()


def scenario_questions(args, work, n):
    broker = Mosquitto(work, persistence=False)
    rt = Runtime(args, work, "questions", f'broker = "mqtt://127.0.0.1:{broker.port}"',
                 '[[cameras]]\nid = "door"\nuri = "test://ball"\nsample_fps = 1\n')
    sub = Sub(broker.port, ["edgevlm/door/answer/+", "edgevlm/errors"], work)
    rng = random.Random(args.seed)
    for i in range(n):
        pub(broker.port, "edgevlm/door/query", bad_question(rng, i))
    names = ["edgevlm_mqtt_queries_accepted_total", "edgevlm_mqtt_queries_rejected_total",
             "edgevlm_mqtt_queries_retained_ignored_total", "edgevlm_mqtt_queries_oversized_total"]
    counted = lambda: sum(rt.metric(m) or 0 for m in names)
    wait_for(lambda: counted() >= n, 60)
    total = counted()
    connects = rt.metric("edgevlm_mqtt_connects_total")
    replies = len(sub.lines())
    alive = rt.alive()
    code = rt.stop()
    sub.stop()
    broker.stop()
    survived = n if alive and connects == 1 and code == 0 else 0
    note = f"{int(total)} counted, {replies} replies, {int(connects or 0)} connection(s)"
    return ("malformed questions", n, survived, int(n - total), note)


# --- configs --------------------------------------------------------------------------------


def mutate(rng, text):
    lines = text.splitlines()
    op = rng.randrange(8)
    i = rng.randrange(len(lines)) if lines else 0
    if op == 0 and lines:
        del lines[i]
    elif op == 1 and lines:
        lines.insert(i, lines[i])
    elif op == 2 and lines and "=" in lines[i]:
        key = lines[i].split("=", 1)[0]
        value = rng.choice(['"x"', "-1", "1e309", "[]", "{}", "true", '"' + "a" * 5000 + '"',
                            "0", '"rtsp://u:p@h/x"', "nan", '"\\u0000"'])
        lines[i] = f"{key}= {value}"
    elif op == 3:
        cut = rng.randrange(len(text) + 1)
        return text[:cut]
    elif op == 4:
        lines.insert(i, rng.choice(["[cameras]", "[[mqtt.users]]", "[engine", "x = = 1",
                                    "[[cameras]]\nid = \"demo\"", "\x00\x01", "[runtime]"]))
    elif op == 5 and lines:
        lines[i] = "".join(chr(rng.randrange(32, 0x3000)) for _ in range(rng.randrange(1, 40)))
    elif op == 6:
        return text.replace("=", rng.choice([":", "==", "= ="]), 1)
    else:
        lines.append(f"unknown_{rng.randrange(100)} = {rng.randrange(100)}")
    return "\n".join(lines) + "\n"


def scenario_configs(args, work, n):
    base = open(os.path.join(REPO, "configs", "edgevlm.toml")).read()
    base += ('\n[mqtt]\nbroker = "mqtt://127.0.0.1:1"\n[[cameras]]\nid = "door"\n'
             'uri = "rtsp://192.0.2.1/stream"\nsample_fps = 2\n')
    rng = random.Random(args.seed)
    path = os.path.join(work, "configs")
    os.makedirs(path, exist_ok=True)
    crashes, clear = 0, 0
    for i in range(n):
        text = base
        for _ in range(rng.randrange(1, 4)):
            text = mutate(rng, text)
        f = os.path.join(path, f"c{i}.toml")
        with open(f, "w", errors="surrogateescape") as out:
            out.write(text)
        r = subprocess.run([args.bin, "validate", f], capture_output=True, timeout=30)
        if r.returncode not in (0, 2) or b"panicked" in r.stderr:
            crashes += 1
            print(f"config {f}: exit {r.returncode}\n{r.stderr.decode(errors='replace')}",
                  file=sys.stderr)
        elif r.returncode == 2 and re.search(rb"[a-z_\]]+(\[\d+\])?(\.[a-z_]+)*: ", r.stderr):
            clear += 1
    return ("mutated configurations", n, n - crashes, crashes,
            f"{clear} refused naming the field")


# --- cameras --------------------------------------------------------------------------------


class Camera:
    def __init__(self, args, port=0):
        self.args = args
        self.port = port
        self.start()

    def start(self):
        self.proc = subprocess.Popen([self.args.server, "--port", str(self.port), "--fps", "15"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        self.port = int(line.split()[1])

    def kill(self):
        self.proc.kill()
        self.proc.wait()


def scenario_cameras(args, work, cycles):
    broker = Mosquitto(work, persistence=False)
    cam = Camera(args)
    rt = Runtime(args, work, "cameras", f'broker = "mqtt://127.0.0.1:{broker.port}"',
                 f'[[cameras]]\nid = "door"\nuri = "rtsp://127.0.0.1:{cam.port}/cam"\n'
                 'sample_fps = 2\nstall_secs = 2\nretry_initial_secs = 0.5\nretry_max_secs = 1\n')
    sub = Sub(broker.port, ["edgevlm/door/status"], work)

    def states():
        out = []
        for line in sub.lines():
            try:
                out.append(json.loads(line.split(" ", 1)[1])["state"])
            except (IndexError, ValueError, KeyError):
                pass
        return out

    def recovered(since):
        s = states()[since:]
        return "retrying" in s and "running" in s[s.index("retrying"):]

    wait_for(lambda: "running" in states(), 60)
    survived = 0
    for i in range(cycles):
        mark = len(states())
        if i % 2 == 0:
            cam.kill()
            time.sleep(1)
            cam.start()
        else:
            os.kill(cam.proc.pid, signal.SIGSTOP)
            time.sleep(4)
            os.kill(cam.proc.pid, signal.SIGCONT)
        if wait_for(lambda: recovered(mark), 60):
            survived += 1
    alive = rt.alive()
    rt.stop()
    sub.stop()
    cam.kill()
    broker.stop()
    return ("camera kills and freezes", cycles, survived if alive else 0, cycles - survived,
            "each back to running, status published on change")


# --- broker ---------------------------------------------------------------------------------


def scenario_broker(args, work, outages, persistence):
    broker = Mosquitto(work, persistence)
    model = os.path.join(REPO, "engines", "tiny", "model")
    sub_id = f"faults-{free_port()}"
    # A persistent subscriber: the broker keeps its messages while it is away (if it persists).
    sub = Sub(broker.port, ["edgevlm/door/narration"], work, persistent_id=sub_id)
    rt = Runtime(args, work, f"broker-{int(persistence)}",
                 f'broker = "mqtt://127.0.0.1:{broker.port}"',
                 '[[cameras]]\nid = "door"\nuri = "test://ball"\nsample_fps = 2\n'
                 'window_secs = 10\nnarrate = ["interval"]\nnarrate_interval_secs = 1\n'
                 'narrate_max_tokens = 8\n',
                 engine=f'model_dir = "{model}"\nthreads = 1')
    reconnects = []
    for _ in range(outages):
        time.sleep(3)
        broker.stop()
        time.sleep(args.down)
        connected = lambda: len(re.findall(r"MQTT (re)?connected", rt.log()))
        before = connected()
        broker.start()
        t0 = time.time()
        if wait_for(lambda: connected() > before, 60, 0.05):
            reconnects.append(time.time() - t0)
    time.sleep(3)
    wait_for(lambda: (rt.metric("edgevlm_mqtt_outbox_pending") or 0) == 0, 30)
    accepted = rt.metric("edgevlm_mqtt_messages_accepted_total") or 0
    dropped = rt.metric("edgevlm_mqtt_messages_dropped_full_total") or 0
    alive = rt.alive()
    rt.stop()
    time.sleep(1)
    got = {json.loads(l.split(" ", 1)[1])["id"] for l in sub.lines() if " " in l}
    with open(os.path.join(rt.dir, "received.txt"), "w") as f:
        f.write("\n".join(sorted(got)))
    produced = len(re.findall(r"tokens=\d+ first_token_ms", rt.log()))
    sub.stop()
    broker.stop()
    with open(os.path.join(broker.dir, "mosquitto.log"), errors="replace") as f:
        at_broker = len(re.findall(r"Received PUBLISH from edgevlm[^\n]*'edgevlm/door/narration'",
                                   f.read()))
    # Lost: narrations that never reached the broker; with persistence, also those the broker
    # had but the persistent subscriber never got.
    lost = int(dropped) + max(0, produced - at_broker)
    if persistence:
        lost = max(lost, produced - len(got))
    worst = max(reconnects) if reconnects else float("nan")
    name = f"broker outages, {'with' if persistence else 'without'} persistence"
    note = (f"{produced} narrations, broker got {at_broker}, subscriber got {len(got)}, "
            f"{int(accepted)} messages, "
            f"reconnected {len(reconnects)}/{outages} (worst {worst:.1f} s after the broker)")
    survived = len(reconnects) if alive else 0
    return (name, outages, survived, lost, note)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--short", action="store_true")
    p.add_argument("--only", default="questions,configs,cameras,broker")
    p.add_argument("--seed", type=int, default=16)
    p.add_argument("--bin", default=os.path.join(REPO, "target", "release", "edgevlm"))
    p.add_argument("--server", default=None)
    p.add_argument("--keep", action="store_true", help="keep the working directory (logs)")
    p.add_argument("--down", type=float, default=3.0, help="seconds each broker outage lasts")
    args = p.parse_args()
    if args.server is None:
        args.server = os.path.join(os.path.dirname(args.bin), "examples", "rtsp_test_server")
    n = {"questions": 150, "configs": 100, "cameras": 2, "broker": 1} if args.short else \
        {"questions": 2500, "configs": 1000, "cameras": 10, "broker": 10}
    work = tempfile.mkdtemp(prefix="edgevlm-faults-")
    rows = []
    try:
        only = args.only.split(",")
        if "questions" in only:
            rows.append(scenario_questions(args, work, n["questions"]))
        if "configs" in only:
            rows.append(scenario_configs(args, work, n["configs"]))
        if "cameras" in only:
            rows.append(scenario_cameras(args, work, n["cameras"]))
        if "broker" in only:
            rows.append(scenario_broker(args, work, n["broker"], persistence=True))
            rows.append(scenario_broker(args, work, n["broker"], persistence=False))
    finally:
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    print("| scenario | tried | survived | lost | notes |")
    print("|---|---|---|---|---|")
    for r in rows:
        print("| %s | %d | %d | %d | %s |" % r)
    bad = [r for r in rows if r[2] != r[1] or r[3] != 0]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
