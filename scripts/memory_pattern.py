#!/usr/bin/env python3
"""ONNX Runtime's memory patterns on a decoder whose input shapes change run by run.

Measures, with the ONNX Runtime of the project's venv and a model directory's decoder, what
docs/RELIABILITY.md ("Memory over a long run") reports: resident memory over many runs at random
(cache length, new positions) pairs, with memory patterns on and off (the arena on in both), and
the time of a decode step at lengths the session has not seen (as in a generation) and at one it
has. Each measurement runs both settings in one process, interleaved.

    .venv/bin/python scripts/memory_pattern.py engines/scenes/model [--runs 9000]
"""
import argparse
import pathlib
import random
import time
import tomllib

import numpy as np
import onnxruntime as ort


def rss_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir", type=pathlib.Path)
    ap.add_argument("--runs", type=int, default=9000)
    ap.add_argument("--max-past", type=int, default=1500)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--pattern", choices=["on", "off"], help="memory only, one setting per process")
    a = ap.parse_args()
    m = tomllib.loads((a.model_dir / "manifest.toml").read_text())
    t = m["text"]
    names = {k: t[k] for k in ("inputs_embeds", "attention_mask", "position_ids")}

    def session(pattern):
        so = ort.SessionOptions()
        so.enable_mem_pattern = pattern
        so.enable_cpu_mem_arena = True
        so.intra_op_num_threads = 1
        return ort.InferenceSession(str(a.model_dir / m["files"]["decoder"]), so)

    def feeds(past, new):
        f = {
            names["inputs_embeds"]: np.zeros((1, new, t["hidden_size"]), np.float32),
            names["attention_mask"]: np.ones((1, past + new), np.int64),
            names["position_ids"]: np.arange(past, past + new, dtype=np.int64)[None],
        }
        kv = np.zeros((1, t["num_kv_heads"], past, t["head_dim"]), np.float32)
        for i in range(t["num_layers"]):
            f[t["past_key"].format(i=i)] = kv
            f[t["past_value"].format(i=i)] = kv
        return f

    if a.pattern:
        # Resident memory: one setting per process, so that one cannot move the other's figure.
        s = session(a.pattern == "on")
        rng = random.Random(1)
        marks = []
        for i in range(a.runs):
            past = rng.randint(0, a.max_past)
            new = 1 if rng.random() < 0.8 else rng.randint(2, a.max_new)
            s.run(None, feeds(past, new))
            if (i + 1) % (a.runs // 10) == 0:
                marks.append(rss_kib())
        print(f"memory patterns {a.pattern}: RSS (KiB) after each tenth of {a.runs} runs: {marks}")
        print(f"  growth from the first tenth to the end: {marks[-1] - marks[0]} KiB")
        return

    sessions = {True: session(True), False: session(False)}
    # Decode steps at lengths neither session has seen: 30 generations of 40 steps.
    took = {True: 0.0, False: 0.0}
    for g in range(30):
        steps = [feeds(400 + 41 * g + k, 1) for k in range(40)]
        for pattern in (True, False) if g % 2 else (False, True):
            for f in steps:
                t0 = time.perf_counter()
                sessions[pattern].run(None, f)
                took[pattern] += time.perf_counter() - t0
    on, off = took[True] / 1200 * 1e3, took[False] / 1200 * 1e3
    print(f"decode step at new lengths: on {on:.3f} ms, off {off:.3f} ms, off/on {off / on:.3f}")
    # The same shape again and again (the case memory patterns are for).
    for name, (past, new) in {"decode at 1000": (1000, 1), "prefill 128 at 800": (800, 128)}.items():
        f = feeds(past, new)
        times = {True: [], False: []}
        for _ in range(60):
            for pattern in (True, False):
                t0 = time.perf_counter()
                sessions[pattern].run(None, f)
                times[pattern].append(time.perf_counter() - t0)
        on, off = np.median(times[True]) * 1e3, np.median(times[False]) * 1e3
        print(f"{name}, repeated: on {on:.3f} ms, off {off:.3f} ms, off/on {off / on:.3f}")


if __name__ == "__main__":
    main()
