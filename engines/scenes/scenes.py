#!/usr/bin/env python3
"""Synthetic camera scenes with their truth, for the model that sees (engines/scenes/README.md).

A scene is a short clip sampled at 1 fps: one to three objects (a ball, a square or a triangle in
white, red, green, blue or yellow) on a dark background, each still or moving left, right, up or
down (or on the wavy path of GStreamer's `videotestsrc pattern=ball`, the demo camera), appearing
and disappearing, sometimes a scene change (new background, new objects), sometimes sensor-like
noise. Everything is drawn at twice the model's frame size and box-filtered down, so edges are
anti-aliased as a scaled camera image is. The truth says what is where at every frame; `questions`
turns it into the question/answer pairs the model is trained and evaluated on, always in the same
words, so an answer can be checked by comparing text. Where the frame cannot settle the words (an
object's centre within a pixel of a line between the thirds), the question set accepts both places
(`answers`); training learns the truth's own.

    .venv-export/bin/python engines/scenes/scenes.py --split heldout --count 40 --out target/scenes

writes clips as H.264 (x264 through GStreamer, 1 fps, in Matroska) with `clips.jsonl` (the truth)
and `questions.jsonl` (the question set `edgevlm eval` reads). Training draws scenes from the
`train` split on the fly (train.py); `heldout` scenes come from a different seed space.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# The model's frame size: what the processor rule gives every 16:9 source (1280x720, 640x360) and
# every window length (manifest: max_frames = 1, max_pixels = 40 tokens of 28x28): 8x4 tokens.
WIDTH, HEIGHT = 224, 112
TOKEN_PX = 28

COLOURS = {
    "white": (250, 250, 250),
    "red": (225, 35, 35),
    "green": (40, 200, 60),
    "blue": (50, 100, 245),
    "yellow": (240, 215, 40),
}
SHAPES = ("ball", "square", "triangle")
DIRECTIONS = ("left", "right", "up", "down")
BACKGROUNDS = {"black": (0, 0, 0), "grey": (70, 70, 70), "navy": (15, 20, 70), "brown": (60, 35, 20)}
NUMBERS = ("no", "one", "two", "three", "four")
# videotestsrc's ball at 1280x720: 38 px across, so 3.3 px of radius at 224x112; its x follows
# sin(2 pi n / 200) and its y sin(2 pi sqrt(2) n / 200) over frame numbers n at 30 fps.
DEMO_BALL_RADIUS = 38 / 2 * WIDTH / 1280
DEMO_OMEGA = 2 * math.pi * 30 / 200
MOVE_MIN_PX = 2.0          # displacement between the last two frames below which an object is still

# Seed spaces: a scene's seed is SPLITS[split] + index, so train and held-out scenes never share one.
SPLITS = {"train": 0, "heldout": 1_000_000_000, "demo": 2_000_000_000}


@dataclass
class Obj:
    colour: str
    shape: str
    radius: float
    appear: int                    # first frame index where visible
    disappear: int | None          # first frame index where no longer visible (None: stays)
    path: list                     # (x, y) per frame index, at 308x168
    motion: str                    # "still", a direction, or "wavy"

    @property
    def name(self) -> str:
        return f"{self.colour} {self.shape}"

    def visible(self, i: int) -> bool:
        return self.appear <= i and (self.disappear is None or i < self.disappear)


@dataclass
class Scene:
    seed: int
    frames: int
    t0: float                      # stream time of frame 0, seconds
    fps: float
    backgrounds: list              # background name per frame
    noise: float                   # per-pixel sigma in 8-bit levels
    objects: list = field(default_factory=list)
    change: int | None = None      # frame index of a scene change
    shading: float = 0.0           # strength of the background's light falloff (0: flat)

    def time(self, i: int) -> float:
        return self.t0 + i / self.fps

    def truth(self) -> dict:
        return {
            "seed": self.seed, "frames": self.frames, "fps": self.fps, "t0": self.t0,
            "noise": self.noise, "shading": self.shading, "backgrounds": self.backgrounds,
            "change": None if self.change is None else self.time(self.change),
            "objects": [{"colour": o.colour, "shape": o.shape, "motion": o.motion,
                         "radius": round(o.radius, 2),
                         "appear": self.time(o.appear),
                         "disappear": None if o.disappear is None else self.time(o.disappear),
                         "path": [None if not o.visible(i) else [round(o.path[i][0], 1), round(o.path[i][1], 1)]
                                  for i in range(self.frames)]}
                        for o in self.objects],
        }


def _linear_path(rng, r: float, frames: int, start: int, end: int, motion: str) -> list:
    life = max(1, end - start - 1)
    lo_x, hi_x, lo_y, hi_y = r + 2, WIDTH - r - 2, r + 2, HEIGHT - r - 2
    if motion == "still":
        x, y = rng.uniform(lo_x, hi_x), rng.uniform(lo_y, hi_y)
        return [(x, y)] * frames
    horizontal = motion in ("left", "right")
    span = (hi_x - lo_x) if horizontal else (hi_y - lo_y)
    speed = min(rng.uniform(8.0, 20.0), span / life)
    speed = max(speed, MOVE_MIN_PX * 2)
    sign = 1 if motion in ("right", "down") else -1
    travel = speed * life
    if horizontal:
        x0 = rng.uniform(lo_x, max(lo_x, hi_x - travel)) if sign > 0 else rng.uniform(min(hi_x, lo_x + travel), hi_x)
        y0 = rng.uniform(lo_y, hi_y)
    else:
        y0 = rng.uniform(lo_y, max(lo_y, hi_y - travel)) if sign > 0 else rng.uniform(min(hi_y, lo_y + travel), hi_y)
        x0 = rng.uniform(lo_x, hi_x)
    path = []
    for i in range(frames):
        k = i - start
        if horizontal:
            path.append((float(np.clip(x0 + sign * speed * k, lo_x, hi_x)), y0))
        else:
            path.append((x0, float(np.clip(y0 + sign * speed * k, lo_y, hi_y))))
    return path


def _wavy_path(rng, r: float, frames: int) -> list:
    phase_x, phase_y = rng.uniform(0, 2 * math.pi), rng.uniform(0, 2 * math.pi)
    omega = DEMO_OMEGA * rng.uniform(0.9, 1.1)
    return [(r + (0.5 + 0.5 * math.sin(phase_x + omega * i)) * (WIDTH - 2 * r),
             r + (0.5 + 0.5 * math.sin(phase_y + math.sqrt(2) * omega * i)) * (HEIGHT - 2 * r))
            for i in range(frames)]


def _objects(rng, count: int, frames: int, start: int, end: int, taken: set, events: bool) -> list:
    out = []
    while len(out) < count:
        colour = str(rng.choice(list(COLOURS)))
        shape = str(rng.choice(SHAPES))
        if (colour, shape) in taken:
            continue
        taken.add((colour, shape))
        r = float(rng.uniform(9.0, 15.0)) if shape != "ball" or rng.random() < 0.7 else float(rng.uniform(3.5, 7.0))
        appear, disappear = start, None
        if events and rng.random() < 0.3 and end - start >= 4:
            appear = int(rng.integers(start + 1, end - 1))
        if events and rng.random() < 0.25 and end - appear >= 3:
            disappear = int(rng.integers(appear + 1, end))
        if end < frames:
            disappear = end if disappear is None else min(disappear, end)
        motion = str(rng.choice(("still", "still", *DIRECTIONS)))
        path = _linear_path(rng, r, frames, appear, disappear or frames, motion)
        out.append(Obj(colour, shape, r, appear, disappear, path, motion))
    return out


def make_scene(split: str, index: int, frames: int | None = None, long: bool = False) -> Scene:
    """Scene `index` of `split`. `frames` fixes its length; `long` draws lengths up to 64 frames
    (4-12 otherwise)."""
    seed = SPLITS[split] + index
    rng = np.random.default_rng(seed)
    kind = rng.random()
    noise = 0.0
    if long:
        # Clip lengths: mostly short, a third up to 40 s and some up to a minute.
        length = rng.random()
        clip_n = int(rng.integers(4, 13) if length < 0.5 else rng.integers(13, 41) if length < 0.85
                     else rng.integers(41, 65))
    else:
        clip_n = 0
    if kind < 0.15:
        # The demo camera: videotestsrc's white ball on black, on its wavy path.
        n = frames or clip_n or int(rng.integers(4, 13))
        scene = Scene(seed, n, 0.0, 1.0, ["black"] * n, 0.0)
        path = _wavy_path(rng, DEMO_BALL_RADIUS, n)
        scene.objects = [Obj("white", "ball", DEMO_BALL_RADIUS, 0, None, path, "wavy")]
    else:
        if rng.random() < 0.15:
            noise = float(rng.choice((2.0, 4.0)))
        n = frames or int(rng.integers(3, 6) if noise else clip_n or rng.integers(4, 13))
        bg = str(rng.choice(list(BACKGROUNDS)))
        scene = Scene(seed, n, 0.0, 1.0, [bg] * n, noise)
        taken: set = set()
        change = None
        if rng.random() < 0.15 and n >= 6:
            change = int(rng.integers(2, n - 2))
        first_end = change if change is not None else n
        scene.objects = _objects(rng, int(rng.integers(1, 4)), n, 0, first_end, taken, change is None)
        if change is not None:
            bg2 = str(rng.choice([b for b in BACKGROUNDS if b != bg]))
            scene.backgrounds = [bg] * change + [bg2] * (n - change)
            scene.change = change
            scene.objects += _objects(rng, int(rng.integers(1, 3)), n, change, n, taken, False)
    if rng.random() < 0.5:
        scene.t0 = float(rng.integers(1, 900))
    # Real rooms are lit unevenly: half the scenes (and half the demo-like ones) get a smooth
    # falloff across the frame. It also tells where a token is: a token's features carry no
    # position (the encoder's rotary positions are relative, and DiffFP drops the tokens around a
    # moved object), so on a flat background a moved object could be anywhere.
    if rng.random() < 0.5:
        scene.shading = float(rng.uniform(25.0, 45.0))
    return scene


def crowd_frame(index: int) -> Scene:
    """A single frame of two to five objects (train split, seed `index`): what the vision
    stage of train.py learns colour, shape and place from, with more objects a frame than a clip
    has."""
    rng = np.random.default_rng(SPLITS["train"] + index)
    bg = str(rng.choice(list(BACKGROUNDS)))
    scene = Scene(SPLITS["train"] + index, 1, 0.0, 1.0, [bg], float(rng.choice((0.0, 0.0, 2.0, 4.0))))
    scene.objects = _objects(rng, int(rng.integers(2, 6)), 1, 0, 1, set(), False)
    if rng.random() < 0.5:
        scene.shading = float(rng.uniform(25.0, 45.0))
    return scene


# --------------------------------------------------------------------------------------------------
# Rendering

_S = 2  # supersampling factor
_YY, _XX = np.mgrid[0:HEIGHT * _S, 0:WIDTH * _S].astype(np.float32) / _S + 0.5 / _S
# Light falloff: brighter to the right in red, brighter towards the bottom in blue, a warm spot.
_SHADE = np.stack([_XX / WIDTH, 0.5 * (1 - np.hypot(_XX / WIDTH - 0.3, _YY / HEIGHT - 0.3)), _YY / HEIGHT], -1)


def _paint(img: np.ndarray, shape: str, x: float, y: float, r: float, colour, ids=None, k: int = 0) -> None:
    """Fills `shape` centred at (x, y) with radius r (frame pixels) into the supersampled image
    (and `k` into the id image `ids`, when given)."""
    y0, y1 = max(0, int((y - r - 1) * _S)), min(HEIGHT * _S, int((y + r + 1) * _S) + 1)
    x0, x1 = max(0, int((x - r - 1) * _S)), min(WIDTH * _S, int((x + r + 1) * _S) + 1)
    yy, xx = _YY[y0:y1, x0:x1], _XX[y0:y1, x0:x1]
    if shape == "ball":
        m = (xx - x) ** 2 + (yy - y) ** 2 <= r * r
    elif shape == "square":
        h = r * 0.9
        m = (np.abs(xx - x) <= h) & (np.abs(yy - y) <= h)
    else:
        # An upright triangle around (x, y).
        top, bottom = y - r, y + r * 0.8
        half = (yy - top) / (bottom - top) * r * 1.05
        m = (yy >= top) & (yy <= bottom) & (np.abs(xx - x) <= half)
    img[y0:y1, x0:x1][m] = colour
    if ids is not None:
        ids[y0:y1, x0:x1][m] = k


def render(scene: Scene, labels: bool = False):
    """[T, H, W, 3] uint8 RGB frames; with `labels`, also [T, N] per 28x28 token the index + 1 of
    the object covering most of it (0: background; an object must cover 2% of the block)."""
    rng = np.random.default_rng(scene.seed ^ 0x5EED)
    out = np.empty((scene.frames, HEIGHT, WIDTH, 3), np.uint8)
    hb, wb = HEIGHT // TOKEN_PX, WIDTH // TOKEN_PX
    tokens = np.zeros((scene.frames, hb * wb), np.int64)
    for i in range(scene.frames):
        img = np.empty((HEIGHT * _S, WIDTH * _S, 3), np.float32)
        img[:] = BACKGROUNDS[scene.backgrounds[i]]
        if scene.shading:
            img += _SHADE * scene.shading
        ids = np.zeros((HEIGHT * _S, WIDTH * _S), np.int64) if labels else None
        for k, o in enumerate(scene.objects):
            if o.visible(i):
                x, y = o.path[i]
                _paint(img, o.shape, x, y, o.radius, COLOURS[o.colour], ids, k + 1)
        if labels:
            b = TOKEN_PX * _S
            blocks = ids.reshape(hb, b, wb, b).transpose(0, 2, 1, 3).reshape(hb * wb, b * b)
            counts = np.stack([(blocks == k + 1).sum(1) for k in range(len(scene.objects))], 1) \
                if scene.objects else np.zeros((hb * wb, 1), np.int64)
            best = counts.argmax(1)
            tokens[i] = np.where(counts.max(1) >= b * b // 50, best + 1, 0)
        # The box filter as a sum of strided views: the same values as a mean over the reshaped
        # axes, six times faster (numpy reduces over non-adjacent axes slowly).
        small = sum(img[i::_S, j::_S] for i in range(_S) for j in range(_S)) * np.float32(1 / (_S * _S))
        if scene.noise:
            small = small + rng.normal(0.0, scene.noise, small.shape)
        out[i] = np.clip(np.rint(small), 0, 255).astype(np.uint8)
    return (out, tokens) if labels else out


def diff_fp(frames: np.ndarray, threshold: float = 0.1, min_tokens: int = 1) -> np.ndarray:
    """VideoLLaMA3's DiffFP keep mask [T, N] (docs/REFERENCE.md §1a): a 28x28 block of frame t is
    kept when 255 * mean |x_t - x_{t-1}| over its normalised values exceeds `threshold`, i.e. when
    its 8-bit SAD exceeds 1176 * threshold; frame 0 is kept whole; at least `min_tokens` per frame,
    raster-first."""
    t, h, w, _ = frames.shape
    hb, wb = h // TOKEN_PX, w // TOKEN_PX
    blocks = frames.astype(np.int32).reshape(t, hb, TOKEN_PX, wb, TOKEN_PX, 3)
    keep = np.ones((t, hb * wb), bool)
    if t > 1:
        sad = np.abs(blocks[1:] - blocks[:-1]).sum(axis=(2, 4, 5)).reshape(t - 1, hb * wb)
        keep[1:] = sad > 1176.0 * threshold
        for i in range(1, t):
            if keep[i].sum() < min_tokens:
                keep[i, :min_tokens] = True
    return keep


# --------------------------------------------------------------------------------------------------
# Truth in words


def region(x: float, y: float) -> str:
    col = "left" if x < WIDTH / 3 else ("right" if x > 2 * WIDTH / 3 else "")
    row = "top" if y < HEIGHT / 3 else ("bottom" if y > 2 * HEIGHT / 3 else "")
    if not row and not col:
        return "in the centre"
    if not row:
        return f"on the {col}"
    return "at the " + " ".join(p for p in (row, col) if p)


# How close to a line between the frame's thirds a centre must be for either side to be right. The
# frame shows a centre to about a pixel (shapes drawn 2x supersampled, then H.264 with its colour at
# half resolution; a triangle's centre is not where its area's is), so a question about an object
# within this of a line accepts the places on both sides (docs/EVAL.md, "Places near a line
# between thirds").
PLACE_MARGIN_PX = 1.0


def regions(x: float, y: float, margin: float = PLACE_MARGIN_PX) -> list:
    """The places a viewer may name for a centre at (x, y): region(x, y) first, then those of the
    points within `margin` of it across a line between thirds."""
    out = [region(x, y)]
    for dx in (-margin, 0.0, margin):
        for dy in (-margin, 0.0, margin):
            r = region(x + dx, y + dy)
            if r not in out:
                out.append(r)
    return out


def direction(o: Obj, i: int) -> str:
    """Where `o` moved between the last two frames up to `i` in which it is visible ("still" if
    it did not, or was seen once)."""
    seen = [k for k in range(i + 1) if o.visible(k)]
    if len(seen) < 2 or seen[-1] - seen[-2] != 1:
        return "still"
    (x0, y0), (x1, y1) = o.path[seen[-2]], o.path[seen[-1]]
    dx, dy = x1 - x0, y1 - y0
    if max(abs(dx), abs(dy)) < MOVE_MIN_PX:
        return "still"
    if abs(dx) >= abs(dy):
        return "right" if dx > 0 else "left"
    return "down" if dy > 0 else "up"


def moving_words(d: str) -> str:
    return {"left": "to the left", "right": "to the right", "up": "up", "down": "down"}[d]


def t1(t: float) -> str:
    return f"{t:.1f}s"


def left_to_right(objects: list, i: int) -> list:
    """`objects` in the order a viewer reads them at frame `i`: by the x of their centres (the
    order they were drawn in is not in the footage, so an answer cannot follow it)."""
    return sorted(objects, key=lambda o: o.path[i][0])


def narration_parts(scene: Scene, last: int | None = None) -> list:
    """The narration's sentences, each as its accepted wordings (the first is the truth's own; a
    still object near a line between thirds may be placed on either side: regions())."""
    i = scene.frames - 1 if last is None else last
    parts = []
    for o in left_to_right([o for o in scene.objects if o.visible(i)], i):
        d = direction(o, i)
        if d == "still":
            parts.append([f"A {o.name} is still {r}." for r in regions(*o.path[i])])
        else:
            parts.append([f"A {o.name} is moving {moving_words(d)}."])
    if scene.change is not None and scene.change <= i:
        parts.append([f"The scene changed at {t1(scene.time(scene.change))}."])
    else:
        # Events in the order they happened; at the same time, left to right where the object was.
        events = []
        for o in scene.objects:
            if 0 < o.appear <= i:
                events.append((o.appear, 0, o.path[o.appear][0], f"A {o.name} appeared at {t1(scene.time(o.appear))}."))
            if o.disappear is not None and o.disappear <= i:
                events.append((o.disappear, 1, o.path[o.disappear - 1][0],
                               f"The {o.name} left at {t1(scene.time(o.disappear))}."))
        parts += [[e[3]] for e in sorted(events)]
    return parts if parts else [["Nothing is there."]]


def narration(scene: Scene, last: int | None = None) -> str:
    return " ".join(p[0] for p in narration_parts(scene, last))


def narration_answers(scene: Scene, last: int | None = None) -> list:
    """Every accepted narration (narration() first)."""
    return [" ".join(c) for c in itertools.product(*narration_parts(scene, last))]


NARRATE_PROMPT = "Describe what just happened in the video."


def questions(scene: Scene, rng=None, last: int | None = None) -> list:
    """Every question the truth answers at frame `last` (default: the clip's end), as dicts with
    `kind`, `question`, `answer`."""
    i = scene.frames - 1 if last is None else last
    seen = [o for o in scene.objects if o.appear <= i]
    vis = [o for o in seen if o.visible(i)]
    qs = []

    def q(kind, question, answer, also=()):
        """`also`: other accepted answers (a place near a line between thirds)."""
        qs.append({"kind": kind, "question": question, "answer": answer,
                   **({"also": list(also)} if also else {})})

    n = len(vis)
    q("count", "How many objects are there?",
      "There is one object." if n == 1 else f"There are {NUMBERS[n]} objects.")
    shapes = [o.shape for o in vis]
    colours = [o.colour for o in vis]
    for o in vis:
        if shapes.count(o.shape) == 1:
            q("colour", f"What colour is the {o.shape}?", f"The {o.shape} is {o.colour}.")
        if colours.count(o.colour) == 1:
            q("shape", f"What shape is the {o.colour} object?", f"The {o.colour} object is a {o.shape}.")
        place = [f"The {o.name} is {r}." for r in regions(*o.path[i])]
        q("position", f"Where is the {o.name}?", place[0], place[1:])
        d = direction(o, i)
        q("motion", f"Which way is the {o.name} moving?",
          "It is not moving." if d == "still" else f"It is moving {moving_words(d)}.")
    movers = [(o, direction(o, i)) for o in left_to_right(vis, i)]
    movers = [(o, d) for o, d in movers if d != "still"]
    q("motion", "What is moving?",
      " ".join(f"The {o.name} is moving {moving_words(d)}." for o, d in movers) if movers else "Nothing is moving.")
    for o in seen:
        q("temporal", f"When did the {o.name} appear?",
          "It was there from the start." if o.appear == 0 else f"It appeared at {t1(scene.time(o.appear))}.")
        if o.disappear is not None and o.disappear <= i:
            q("temporal", f"When did the {o.name} leave?", f"It left at {t1(scene.time(o.disappear))}.")
            q("position", f"Where is the {o.name}?", f"The {o.name} left at {t1(scene.time(o.disappear))}.")
        elif vis and rng is not None and rng.random() < 0.3:
            q("temporal", f"When did the {o.name} leave?", "It is still there.")
    q("temporal", "Did the scene change?",
      f"Yes, at {t1(scene.time(scene.change))}." if scene.change is not None and scene.change <= i
      else "No, it did not change.")
    # Objects that are not there: the answer must come from the frames, not from the question.
    names = {(o.colour, o.shape) for o in seen}
    absent = [(c, s) for c in COLOURS for s in SHAPES if (c, s) not in names]
    if rng is not None:
        rng.shuffle(absent)
    for c, s in absent[:2]:
        q("position", f"Where is the {c} {s}?", f"There is no {c} {s}.")
    told = narration_answers(scene, i)
    q("narration", NARRATE_PROMPT, told[0], told[1:])
    return qs


# --------------------------------------------------------------------------------------------------
# Writing clips


def write_clip(frames: np.ndarray, path: Path, fps: int = 1) -> None:
    """H.264 in Matroska through GStreamer's x264enc (zerolatency: no B-frames, frames in order)."""
    t, h, w, _ = frames.shape
    pipeline = (f"fdsrc fd=0 blocksize={w * h * 3} ! rawvideoparse width={w} height={h} format=rgb "
                f"framerate={fps}/1 ! videoconvert ! video/x-raw,format=I420 ! "
                f"x264enc tune=zerolatency speed-preset=medium qp-max=18 key-int-max=10 ! h264parse ! "
                f"matroskamux ! filesink location={path}")
    subprocess.run(["gst-launch-1.0", "-q", *pipeline.split()], input=frames.tobytes(), check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--split", choices=list(SPLITS), default="heldout")
    ap.add_argument("--count", type=int, default=40)
    ap.add_argument("--first", type=int, default=0, help="index of the first scene")
    ap.add_argument("--frames", type=int, default=None, help="frames per clip (default: the scene's own)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "clips.jsonl", "w") as clips, open(args.out / "questions.jsonl", "w") as qf:
        for k in range(args.first, args.first + args.count):
            scene = make_scene(args.split, k, args.frames)
            scene.t0 = 0.0  # a camera's stream time starts at 0
            name = f"{args.split}-{k:05d}"
            write_clip(render(scene), args.out / f"{name}.mkv")
            clips.write(json.dumps({"clip": name, "file": f"{name}.mkv", **scene.truth()}) + "\n")
            rng = np.random.default_rng(scene.seed ^ 0xA5)
            for item in questions(scene, rng):
                also = item.pop("also", [])
                if also:
                    item["answers"] = [item.pop("answer"), *also]
                qf.write(json.dumps({"clip": name, **item}) + "\n")
    print(f"scenes: {args.count} {args.split} clips -> {args.out}")


if __name__ == "__main__":
    main()
