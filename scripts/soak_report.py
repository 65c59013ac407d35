#!/usr/bin/env python3
"""Reports a soak's RSS samples (scripts/soak.sh): the least-squares slope after warm-up, its 95 %
confidence interval, and whether the growth is within noise (docs/RELIABILITY.md, "Memory over a
long run"). Standard library only.

    python3 scripts/soak_report.py target/soak/rss.csv --warmup 10

With --fine (rss-5s.csv: "secs,rss_kb" every 5 s, which scripts/soak.sh writes beside rss.csv
and which is used when it is there) the fit runs on the median of each minute's samples instead
of one instantaneous sample a minute: the runtime's memory moves by megabytes within a minute
(buffers of runs in flight, the allocator's trim), and a minute's median is what it holds.

Verdicts: "within noise" when the interval contains 0 and is narrow enough to have seen a growth
of --resolution KiB/min (its half-width is at most that); "inconclusive" when it contains 0 but is
wider (a noisy run proves nothing); "GROWING" when it lies above 0 ("SHRINKING" below).
"""

import argparse
import csv
import math
import os
import statistics
import sys


def fit(xs, ys):
    """Least squares y = a + b x: (b, standard error of b, residual standard deviation)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    a = my - b * mx
    res = [y - (a + b * x) for x, y in zip(xs, ys)]
    s = math.sqrt(sum(r * r for r in res) / (n - 2))
    return b, s / math.sqrt(sxx), s


def main():
    p = argparse.ArgumentParser()
    p.add_argument("csv")
    p.add_argument("--warmup", type=float, default=10.0, help="minutes left out of the fit")
    p.add_argument("--resolution", type=float, default=24.0,
                   help="KiB/min: the widest half-interval a 'within noise' verdict accepts "
                        "(24: a tenth of the 236 KB/min growth the reliability issue saw)")
    p.add_argument("--fine", help="RSS every few seconds (secs,rss_kb); default: rss-5s.csv beside CSV")
    args = p.parse_args()
    rows = list(csv.DictReader(open(args.csv)))
    if not rows:
        sys.exit(f"{args.csv}: no samples")
    mins = [int(r["secs"]) / 60 for r in rows]
    rss = [int(r["rss_kb"]) / 1024 for r in rows]  # MiB
    kept = [(m, r) for m, r in zip(mins, rss) if m >= args.warmup]
    fine_path = args.fine or os.path.join(os.path.dirname(args.csv), "rss-5s.csv")
    fine_note = ""
    if os.path.exists(fine_path):
        by_minute, loads = {}, []
        for r in csv.DictReader(open(fine_path)):
            by_minute.setdefault(int(r["secs"]) // 60, []).append(int(r["rss_kb"]) / 1024)
            if r.get("load1") and int(r["secs"]) >= args.warmup * 60:
                loads.append(float(r["load1"]))
        medians = [(m + 0.5, statistics.median(v)) for m, v in sorted(by_minute.items()) if len(v) >= 6]
        fine_kept = [(m, r) for m, r in medians if m >= args.warmup]
        if len(fine_kept) >= 5:
            kept = fine_kept
            fine_note = (f"fit on per-minute medians of {fine_path} ({sum(len(v) for v in by_minute.values())} "
                         f"samples, {len(fine_kept)} minutes after the warm-up)")
            if loads:
                fine_note += (f"; load average after the warm-up {statistics.mean(loads):.1f} "
                              f"(max {max(loads):.1f})")
    last = rows[-1]
    print(f"# Soak: {mins[-1]:.0f} min, {len(rows)} samples")
    print()
    if fine_note:
        print(fine_note)
        print()
    print(f"narrations {last['narrations']}, questions asked {last['questions']}, "
          f"answers {last['answers']}")
    print()
    print("| minute | RSS MiB |")
    print("|---|---|")
    step = max(1, len(rows) // 24)
    for m, r in list(zip(mins, rss))[::step]:
        print(f"| {m:.0f} | {r:.1f} |")
    print()
    if len(kept) < 5:
        print(f"fewer than 5 samples after the {args.warmup:g}-minute warm-up: no slope")
        return
    xs, ys = zip(*kept)
    b, se, s = fit(xs, ys)
    lo, hi = b - 1.96 * se, b + 1.96 * se
    q = max(1, len(ys) // 4)
    first, final = sum(ys[:q]) / q, sum(ys[-q:]) / q
    flat = lo <= 0.0 <= hi
    half = 1.96 * se * 1024
    print(f"after minute {args.warmup:g}: slope {b * 1024:+.1f} KiB/min "
          f"(95 % CI {lo * 1024:+.1f} .. {hi * 1024:+.1f}), residual sd {s:.2f} MiB, "
          f"RSS {min(ys):.1f}..{max(ys):.1f} MiB, last quarter minus first quarter "
          f"{final - first:+.2f} MiB")
    print(f"growth excluded above {hi * 1024:+.1f} KiB/min ({hi * 60 * 24:+.1f} MiB a day); "
          f"half-width {half:.1f} KiB/min against a resolution of {args.resolution:g}")
    if flat and half <= args.resolution:
        print("verdict: within noise (the slope's 95 % confidence interval contains 0 and is "
              f"narrower than +-{args.resolution:g} KiB/min)")
    elif flat:
        print(f"verdict: INCONCLUSIVE, the interval contains 0 but is +-{half:.1f} KiB/min wide: "
              "too noisy to tell")
    elif hi < 0:
        print(f"verdict: SHRINKING, {b * 60 * 24:+.1f} MiB a day at this slope (a level still settling)")
    else:
        print(f"verdict: GROWING, {b * 60 * 24:+.1f} MiB a day at this slope")


if __name__ == "__main__":
    main()
