#!/usr/bin/env python3
"""Train the model that sees: a small VideoLLaMA3 (transformers' own classes) on synthetic scenes.

    scripts/setup-export.sh
    .venv-export/bin/python engines/scenes/train.py --out target/scenes/checkpoint
    (the exact commands, export included: engines/scenes/README.md)

What the model is trained on is what edgevlm's runtime feeds it (docs/ENGINES.md, "The scenes
model"): frames at 224x112 (the processor rule of every 16:9 source, manifest max_frames = 1),
DiffFP applied as the reference applies it (every frame encoded whole, the pruned tokens' features
dropped, positions contiguous), each frame a VideoLLaMA3 streaming item with its stream time
(`<|stream_start|>stream\\nTime 12.0s:` + kept tokens + `\\n<|stream_end|>\\n`), after the system
turn, then questions and answers as user/assistant turns; the loss is on the answers only.

Two stages, one command. Stage 1 trains the vision encoder and projector alone with a per-token
probe (each visual token's colour, shape, column and row, and where its object's centre is: the
third of the frame and a 14-px bin) on single frames, 32 a step, half of them crowded with two to
five objects: shape is learned late (near chance for 1,000 to 2,000 steps, then 85-95 % of tokens
within a few hundred), far too late if it has to wait for the decoder's gradient. Stage 2 trains the whole model on
clips, with the probe kept on as an auxiliary loss. A clip's question/answer turns share its frames
but not each other: each turn sees the system turn and the frames only, at the positions it would
have alone, as the runtime asks a question (a fork of the live cache), so no answer is copied from
an earlier one.

Two more training-only signals teach the decoder the steps an answer is made of, where they
happen (docs/EVAL.md, "The recipe after it"):
- the decoder probe (DecoderProbe): linear heads on the hidden states after decoder layer 2 read, at
  each kept visual token, its frame's time (the header's number tokens), how its object moved since
  the frame before, which object vanished from it; at each frame's end, how many objects are there,
  which have been seen and which are there now, whether the scene changed;
- the attention guide (AttentionGuide): one head of decoder layer 2 is taught to look, while a
  piece of an answer is written, at the tokens that hold it (the object asked about, in the frames
  that answer; a narration sentence by sentence). The answer's loss alone teaches this binding
  slowly: with two or more objects in view the model named another object's colour or place about
  half the time.
Neither adds weights to the checkpoint: the model is transformers' VideoLLaMA3, nothing else.

Two data-parallel worker processes of one thread each (--workers, gloo on loopback) share each
batch: 1.26 times the steps a minute of one process with two threads here.

Tokenizer: our own byte-level BPE of 512 ids trained on the scenes' sentences (any text still
encodes, as bytes). Qwen's real vocabulary has 151,936 rows: at this model's width its embedding
alone would be 24 M parameters (97 MB in float32), far over the 20 MB the weights may take.

Seeded throughout: the same command gives the same weights on the same machine (torch CPU kernels,
two workers of one thread). Prints held-out accuracy per question kind as it goes (teacher-forced, exact match).

The budget is wall time, and a host's speed varies by a fifth from day to day, so a fixed --steps
either leaves minutes unused or runs over. --budget-minutes (with --schedule wsd) fits stage 2 to
the time instead: the rate stays at its peak until --decay-share of stage 2's time is left, then
decays over as many steps as that time allows at the pace of the last 200 steps. The log and
training.json record the two steps chosen; --steps N --decay-start M repeats the run exactly.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "videollama3"))
import scenes  # noqa: E402

SYSTEM = "You are a helpful assistant."
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
            "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<image>", "<|stream_start|>", "<|stream_end|>"]
VOCAB = 512
# Pixels per frame: 40 tokens of 28x28 (224x112 for 16:9 sources: 8x4 = 32 tokens).
MAX_PIXELS = 40 * 28 * 28
MIN_PIXELS = 8 * 28 * 28

TEXT = dict(hidden_size=160, intermediate_size=448, num_hidden_layers=4, num_attention_heads=5,
            num_key_value_heads=5, max_position_embeddings=8192, rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            tie_word_embeddings=True, initializer_range=0.02, use_sliding_window=False)
VISION = dict(hidden_size=128, intermediate_size=384, num_hidden_layers=3, num_attention_heads=4,
              num_channels=3, patch_size=14, hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6,
              rope_parameters={"rope_type": "axial", "rope_theta": 10000.0}, initializer_range=0.02)


def corpus(n: int) -> list[str]:
    # The template words as often as a prompt has them, so each is one token.
    lines = [f"system\n{SYSTEM}", "user\n", "assistant\n"] * 2000
    lines += [f"stream\nTime {t:.1f}s:" for t in range(0, 1000)] * 4
    for k in range(n):
        s = scenes.make_scene("train", k)
        for q in scenes.questions(s, np.random.default_rng(k)):
            lines += [q["question"], q["answer"]]
    return lines


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(3000), trainer=trainer)
    return tok


# How often each kind of question is drawn for a clip's turns, against its share of the clip's
# questions: narrations and the rarer kinds more often (--kind-weights changes them).
KIND_WEIGHTS = {"narration": 3.0, "count": 1.5, "colour": 1.0, "shape": 1.0, "position": 1.0,
                "motion": 2.0, "temporal": 1.2}


def kind_weights(spec: str) -> dict:
    """`--kind-weights`: "motion=3,position=1.5" over KIND_WEIGHTS."""
    out = dict(KIND_WEIGHTS)
    for part in filter(None, (p.strip() for p in spec.split(","))):
        kind, sep, value = part.partition("=")
        if not sep or kind not in out:
            raise SystemExit(f"--kind-weights: expected KIND=WEIGHT with KIND one of {sorted(out)}, got {part!r}")
        try:
            out[kind] = float(value)
        except ValueError:
            raise SystemExit(f"--kind-weights: {kind}: expected a number, got {value!r}") from None
        if out[kind] <= 0:
            raise SystemExit(f"--kind-weights: {kind}: expected a weight above 0, got {value!r}")
    return out


# The questions whose answers are lists of sentences, one about each object or event.
LIST_QUESTIONS = (scenes.NARRATE_PROMPT, "What is moving?")


def sample_text(tok, scene, keep, rng, turns: int, tokens=None, weights: dict = KIND_WEIGHTS,
                mover_set: bool = False, lists: bool = False, recall: bool = False, list_end: bool = False,
                cuts: int = 0):
    """One training sequence: ids, labels (-100: not learned), visual tokens (position, frame,
    token), the turns (each turn's span and where the frames it sees end), each frame's
    <|stream_end|> position and, with the render's per-token object labels `tokens`, the attention
    guide's rows (query positions, key positions) per turn about one object. `mover_set` (--mover-set): a "What is
    moving?" answer looks at the last frame's <|stream_end|> (where the decoder probe keeps what
    moves) for "Nothing is moving." and where it ends. `lists` (--list-head): the pieces of a
    narration or "What is moving?" are labelled "list" whatever they say (piece_kind otherwise).
    `recall` (--recall-head): each such piece's own tokens after its first, from the object's name
    to the full stop, also look at that object's keys, labelled "recall" (the guided layer's head
    that finds the next object needs to know which one was named last). `list_end` (--list-end):
    the position that ends a narration (predicts <|im_end|>) looks at the last frame's
    <|stream_end|>, as a "What is moving?" answer's end does with `mover_set`. `cuts` (--cut-turns):
    at that many frames before the last, drawn at random, the narration and "What is moving?" as
    they are at that frame, each turn seeing the frames up to it only, at the positions it would
    have if the clip ended there (the turns' spans carry where the frames they see end)."""
    special = {s: tok.token_to_id(s) for s in SPECIALS}
    ids: list[int] = []
    labels: list[int] = []
    visual: list[tuple[int, int, int]] = []  # (position, frame, token)
    ends: list[int] = []                     # position of each frame's <|stream_end|>
    blocks: list[int] = []                   # where each frame's item ends (the next one starts)

    def text(s: str, learn: bool = False):
        e = tok.encode(s, add_special_tokens=False).ids
        ids.extend(e)
        labels.extend(e if learn else [-100] * len(e))

    def sp(name: str, learn: bool = False):
        ids.append(special[name])
        labels.append(special[name] if learn else -100)

    sp("<|im_start|>"); text("system\n" + SYSTEM); sp("<|im_end|>"); text("\n")
    for i in range(scene.frames):
        sp("<|stream_start|>"); text(f"stream\nTime {scene.time(i):.1f}s:")
        for n in np.flatnonzero(keep[i]):
            visual.append((len(ids), i, int(n)))
            ids.append(special["<|video_pad|>"])
            labels.append(-100)
        text("\n"); ends.append(len(ids)); sp("<|stream_end|>"); text("\n")
        blocks.append(len(ids))
    spans = []
    qs = scenes.questions(scene, rng)
    w = np.array([weights[q["kind"]] for q in qs])
    pick = rng.choice(len(qs), size=min(turns, len(qs)), replace=False, p=w / w.sum())
    guides = []
    asked = [(qs[k], scene.frames - 1) for k in pick]
    if cuts and scene.frames > 2:
        for c in sorted(rng.choice(np.arange(1, scene.frames - 1), size=min(cuts, scene.frames - 2), replace=False)):
            asked += [(q, int(c)) for q in scenes.questions(scene, None, last=int(c))
                      if q["question"] in LIST_QUESTIONS]
    for q, last in asked:
        seen = [v for v in visual if v[1] <= last]
        start = len(ids)
        sp("<|im_start|>"); text("user\n" + q["question"]); sp("<|im_end|>"); text("\n")
        sp("<|im_start|>"); text("assistant\n")
        if tokens is None:
            text(q["answer"], learn=True)
        else:
            # Piece by piece (each piece starts at a word, so the ids are those of the whole
            # answer); the positions that predict a piece's tokens are guided to its keys.
            movers = mover_set and q["question"] == "What is moving?"
            listed = lists and q["question"] in LIST_QUESTIONS
            for piece, keys in guide_segments(scene, q, tokens, seen, ends[last], last):
                first = len(ids)
                text(piece, learn=True)
                keys = keys or ([ends[last]] if movers else [])
                if keys:
                    guides.append((list(range(first - 1, len(ids) - 1)), keys,
                                   "list" if listed else piece_kind(q["kind"], piece)))
                    if recall and listed and first + 1 < len(ids):
                        guides.append((list(range(first + 1, len(ids))), keys, "recall"))
            if movers or (list_end and q["question"] == scenes.NARRATE_PROMPT):
                # The position that ends the list (predicts <|im_end|>): nothing is left to name.
                guides.append(([len(ids) - 1], [ends[last]], "list" if listed else "motion"))
        sp("<|im_end|>", learn=True); text("\n")
        spans.append((start, len(ids), blocks[last]))
    return ids, labels, visual, spans, ends, guides


def make_model(tok):
    from transformers import Qwen2Config, VideoLlama3Config, VideoLlama3ForConditionalGeneration, VideoLlama3VisionConfig

    vid = tok.token_to_id("<|video_pad|>")
    text = dict(TEXT, vocab_size=tok.get_vocab_size(), bos_token_id=tok.token_to_id("<|endoftext|>"),
                eos_token_id=tok.token_to_id("<|im_end|>"))
    config = VideoLlama3Config(text_config=Qwen2Config(**text).to_dict(),
                               vision_config=VideoLlama3VisionConfig(**VISION).to_dict(),
                               image_token_id=tok.token_to_id("<|image_pad|>"), video_token_id=vid,
                               tie_word_embeddings=True)
    return VideoLlama3ForConditionalGeneration(config)


COLOUR_IDS = {c: i + 1 for i, c in enumerate(scenes.COLOURS)}
SHAPE_IDS = {c: i + 1 for i, c in enumerate(scenes.SHAPES)}


# Where a token's object is, in the words of the answers (the frame's thirds) and finer (bins of
# 14 px, half a token): what position and motion questions need, readable from the one token.
X_BINS, Y_BINS = scenes.WIDTH // 14, scenes.HEIGHT // 14


def token_targets(scene, labels: np.ndarray) -> np.ndarray:
    """[T, N, 8] per-token targets of the vision probe: the covering object's colour and shape, the
    third of the frame its centre is in (column, row) and its centre's 14-px bin (x, y), all 0 on
    the background; the token's own column and row."""
    t, n = labels.shape
    hb, wb = scenes.HEIGHT // scenes.TOKEN_PX, scenes.WIDTH // scenes.TOKEN_PX
    colour = np.array([0] + [COLOUR_IDS[o.colour] for o in scene.objects])[labels]
    shape = np.array([0] + [SHAPE_IDS[o.shape] for o in scene.objects])[labels]
    # Object centres per frame, [T, K + 1] (column 0: the background).
    cx = np.zeros((t, len(scene.objects) + 1))
    cy = np.zeros((t, len(scene.objects) + 1))
    for k, o in enumerate(scene.objects):
        cx[:, k + 1] = [o.path[i][0] for i in range(t)]
        cy[:, k + 1] = [o.path[i][1] for i in range(t)]
    x = np.take_along_axis(cx, labels, 1)
    y = np.take_along_axis(cy, labels, 1)
    obj = labels > 0
    third_col = np.where(obj, 1 + (x >= scenes.WIDTH / 3) + (x > 2 * scenes.WIDTH / 3), 0)
    third_row = np.where(obj, 1 + (y >= scenes.HEIGHT / 3) + (y > 2 * scenes.HEIGHT / 3), 0)
    x_bin = np.where(obj, 1 + np.clip((x // 14).astype(np.int64), 0, X_BINS - 1), 0)
    y_bin = np.where(obj, 1 + np.clip((y // 14).astype(np.int64), 0, Y_BINS - 1), 0)
    # On a flat background a token's features carry its place only through the frame's edges (the
    # encoder's rotary positions are relative): three layers learn that (docs/EVAL.md).
    col = np.broadcast_to(np.tile(np.arange(wb), hb), (t, n))
    row = np.broadcast_to(np.repeat(np.arange(hb), wb), (t, n))
    return np.stack([colour, shape, col, row, third_col, third_row, x_bin, y_bin], -1).astype(np.int64)


class TokenProbe(torch.nn.Module):
    """Training only (not part of the checkpoint): reads each visual token's colour, shape, column
    and row, and its object's place, from its features, so the vision encoder learns from the first
    step what the answers need. Without it the decoder first learns to ignore the (random) visual
    tokens, and the encoder's gradient through the decoder stays ~1e-5 of the decoder's: nothing is
    learned."""

    SIZES = (len(scenes.COLOURS) + 1, len(scenes.SHAPES) + 1,
             scenes.WIDTH // scenes.TOKEN_PX, scenes.HEIGHT // scenes.TOKEN_PX, 4, 4, X_BINS + 1, Y_BINS + 1)
    OWN_PLACE = (2, 3)   # the token's own column and row: every token has them

    def __init__(self, hidden: int):
        super().__init__()
        self.head = torch.nn.Linear(hidden, sum(self.SIZES))

    def loss(self, feats: torch.Tensor, targets: torch.Tensor, taught: int | None = None):
        """The probe's loss over its first `taught` targets (all of them by default) and its
        accuracy on every target."""
        out = self.head(feats.reshape(-1, feats.shape[-1]))
        t = targets.reshape(-1, len(self.SIZES))
        losses, accs, start = [], [], 0
        for k, size in enumerate(self.SIZES):
            logits = out[:, start:start + size]
            start += size
            # Object tokens are rare: weigh background tokens down for the object's targets.
            w = None
            if k not in self.OWN_PLACE:
                w = torch.ones(size)
                w[0] = 0.2
            if taught is None or k < taught:
                losses.append(F.cross_entropy(logits, t[:, k], weight=w))
            right = logits.argmax(-1) == t[:, k]
            accs.append((right if k in self.OWN_PLACE else right[t[:, k] > 0]).float().mean())
        return sum(losses), accs


MOVES = ("still", "left", "right", "up", "down", "new")
DIRECTIONS = ("left", "right", "up", "down")
OBJECT_NAMES = [f"{c} {s}" for c in scenes.COLOURS for s in scenes.SHAPES]


def decoder_targets(tok, scene, labels: np.ndarray, visual, ends, moving: bool = False) -> dict:
    """Targets of the decoder probe (DecoderProbe) for one training sequence: head -> [(position,
    target)]. At each kept visual token: the number tokens of its frame's time (as the header spells
    them), and, on an object's token, how that object moved since the frame before ("new" where it
    was not there), or, on a background token, the colour and shape of the object that vanished from
    it in this frame (0: none). At each frame's <|stream_end|>: its time too, how many objects are
    there, whether the scene changed at this frame, and which of the fifteen objects have been seen
    so far and which are there now. These are the steps an answer about time, motion, leaving,
    counting and absence is made of, taught where they happen instead of only through the answers.
    `moving` (--mover-set): at each <|stream_end|> too, which of the fifteen objects moves which way
    there (scenes.direction, as the answers say it), one yes/no per object and direction."""
    out: dict = {k: [] for k in DecoderProbe.HEADS}
    if moving:
        out["moving"] = []
    stamps = []
    for i in range(scene.frames):
        e = tok.encode(f"Time {scene.time(i):.1f}s:", add_special_tokens=False).ids
        number = e[1:e.index(tok.token_to_id("."), 1)]
        stamps.append((number[0], number[1] if len(number) > 1 else 0))
    for pos, i, n in visual:
        out["time0"].append((pos, stamps[i][0]))
        out["time1"].append((pos, stamps[i][1]))
        k = int(labels[i, n]) - 1
        if k >= 0:
            o = scene.objects[k]
            if i == 0 or not o.visible(i - 1):
                move = "new"
            else:
                (x0, y0), (x1, y1) = o.path[i - 1], o.path[i]
                dx, dy = x1 - x0, y1 - y0
                move = "still" if max(abs(dx), abs(dy)) < scenes.MOVE_MIN_PX else (
                    ("right" if dx > 0 else "left") if abs(dx) >= abs(dy) else ("down" if dy > 0 else "up"))
            out["move"].append((pos, MOVES.index(move)))
        else:
            was = int(labels[i - 1, n]) - 1 if i > 0 else -1
            gone = was >= 0 and not scene.objects[was].visible(i)
            out["gone_colour"].append((pos, COLOUR_IDS[scene.objects[was].colour] if gone else 0))
            out["gone_shape"].append((pos, SHAPE_IDS[scene.objects[was].shape] if gone else 0))
    for i, pos in enumerate(ends):
        out["time0"].append((pos, stamps[i][0]))
        out["time1"].append((pos, stamps[i][1]))
        out["count"].append((pos, min(4, sum(o.visible(i) for o in scene.objects))))
        out["change"].append((pos, int(scene.change == i)))
        seen, there = np.zeros(len(OBJECT_NAMES), np.float32), np.zeros(len(OBJECT_NAMES), np.float32)
        for o in scene.objects:
            seen[OBJECT_NAMES.index(o.name)] += o.appear <= i
            there[OBJECT_NAMES.index(o.name)] += o.visible(i)
        out["seen"].append((pos, seen))
        out["there"].append((pos, there))
        if moving:
            moves = np.zeros((len(OBJECT_NAMES), len(DIRECTIONS)), np.float32)
            for o in scene.objects:
                d = scenes.direction(o, i) if o.visible(i) else "still"
                if d != "still":
                    moves[OBJECT_NAMES.index(o.name), DIRECTIONS.index(d)] = 1.0
            out["moving"].append((pos, moves.reshape(-1)))
    return out


class DecoderProbe(torch.nn.Module):
    """Training only (not part of the checkpoint): linear heads on the decoder's hidden states after
    layer `LAYER`, reading the targets of `decoder_targets`."""

    HEADS = {"time0": VOCAB, "time1": VOCAB, "move": len(MOVES), "gone_colour": len(scenes.COLOURS) + 1,
             "gone_shape": len(scenes.SHAPES) + 1, "count": len(scenes.NUMBERS), "change": 2,
             "seen": len(OBJECT_NAMES), "there": len(OBJECT_NAMES)}
    MULTI = ("seen", "there", "moving")   # several objects at once: one yes/no per object
    LAYER = 2

    def __init__(self, hidden: int, moving: bool = False):
        super().__init__()
        self.heads = torch.nn.ModuleDict({k: torch.nn.Linear(hidden, n) for k, n in self.HEADS.items()})
        if moving:
            # --mover-set: one yes/no per object and direction. Drawn from a generator of its own,
            # so the other weights, and stage 1, are those of a run without it.
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                self.heads["moving"] = torch.nn.Linear(hidden, len(OBJECT_NAMES) * len(DIRECTIONS))

    def loss(self, hidden: torch.Tensor, targets: dict):
        """`targets`: head -> (rows, positions, classes) tensors."""
        losses, accs = [], {}
        for k, (rows, cols, y) in targets.items():
            if len(y) == 0:
                continue
            logits = self.heads[k](hidden[rows, cols])
            if k in self.MULTI:
                losses.append(F.binary_cross_entropy_with_logits(logits, y))
                accs[k] = ((logits > 0) == (y > 0.5)).all(-1).float().mean().item()
                continue
            # Vanished objects are rare: "none" weighs a tenth, and the accuracy is over the
            # tokens that have one.
            w = None
            if k.startswith("gone"):
                w = torch.ones(self.HEADS[k])
                w[0] = 0.1
            losses.append(F.cross_entropy(logits, y, weight=w))
            right = logits.argmax(-1) == y
            if k.startswith("gone"):
                right = right[y > 0]
            if len(right):
                accs[k] = right.float().mean().item()
        return sum(losses), accs


def _object_named(scene, name: str):
    return next((o for o in scene.objects if o.name == name), None)


def queried_object(scene, q: dict, i: int):
    """The object a question is about (None: no one object, or one never seen), found by its
    words as scenes.py writes them."""
    text = q["question"]
    for o in scene.objects:
        if f"the {o.name}?" in text or f"the {o.name} " in text:
            return o if o.appear <= i else None
    for o in (o for o in scene.objects if o.visible(i)):
        if text in (f"What colour is the {o.shape}?", f"What shape is the {o.colour} object?"):
            return o
    return None


def guide_segments(scene, q: dict, labels: np.ndarray, visual, end: int, last: int | None = None) -> list:
    """The answer of `q` cut into pieces (their texts add up to the answer), each with the positions
    the guided head should look at while that piece is written (AttentionGuide); `end`: the last
    frame's <|stream_end|> position. An object's piece looks at that object's kept tokens in the
    frames that hold it: all of them for its colour or shape, its latest kept frame for where it is
    and how it moves, its first for when it appeared, the tokens it vanished from for when it left;
    a scene change at the tokens of its frame; a count, an absent object or one still there at the
    last frame's end, where the decoder probe keeps what is there (DecoderProbe). A narration or
    "What is moving?" is cut into its sentences, each about one thing. Empty keys: no guide. `last`:
    the frame the question is asked at (default: the last; `visual` and `end` then stop there too)."""
    i = scene.frames - 1 if last is None else last
    kept = {}
    for pos, f, n in visual:
        kept.setdefault(int(labels[f, n]), []).append((pos, f))

    def tokens_of(o, which: str) -> list:
        k = scene.objects.index(o) + 1
        if which == "left":
            d = o.disappear
            return [pos for pos, f, n in visual if f == d and labels[d - 1, n] == k and labels[d, n] != k]
        mine = kept.get(k, [])
        if not mine:
            return []
        if which == "all":
            return [pos for pos, _ in mine]
        pick = min(f for _, f in mine) if which == "first" else max(f for _, f in mine)
        return [pos for pos, f in mine if f == pick]

    def sentence(text: str) -> list:
        m = re.match(r"(?:A|The) (\w+ \w+) (is still|is moving|appeared at|left at)", text)
        if m:
            o = _object_named(scene, m.group(1))
            return tokens_of(o, {"appeared at": "first", "left at": "left"}.get(m.group(2), "latest"))
        if text.startswith("The scene changed") and scene.change is not None:
            return [pos for pos, f, _ in visual if f == scene.change]
        return []

    answer, kind = q["answer"], q["kind"]
    if kind in ("narration", "motion") and q["question"] in LIST_QUESTIONS:
        parts = re.split(r"(?<=\.) (?=[A-Z])", answer)
        parts = parts[:1] + [" " + p for p in parts[1:]]
        return [(p, sentence(p.strip())) for p in parts]
    if kind == "count" or answer.startswith("There is no") or answer == "It is still there.":
        return [(answer, [end])]
    if q["question"] == "Did the scene change?":
        return [(answer, [pos for pos, f, _ in visual if f == scene.change] if scene.change is not None else [])]
    o = queried_object(scene, q, i)
    if o is None:
        return [(answer, [])]
    if o.disappear is not None and o.disappear <= i and "appear" not in q["question"]:
        return [(answer, tokens_of(o, "left"))]
    which = "all" if kind in ("colour", "shape") else "first" if "appear" in q["question"] else "latest"
    return [(answer, tokens_of(o, which))]


def piece_kind(kind: str, piece: str) -> str:
    """What a guided piece is about, for the choice of its head (--colour-head, --motion-head): a
    narration's sentence saying how an object moves, or that it is still, is about motion; any other
    piece is of its question's kind."""
    if kind == "narration" and re.search(r" is (moving|still)\b", piece):
        return "motion"
    return kind


# --recall-head's layer: the one below the guided layer (AttentionGuide.LAYER), so that what its head
# found (the object a list named last) is there for the guided layer's list head to go on from.
RECALL_LAYER = 1


class AttentionGuide(torch.nn.Module):
    """Training only: teaches one attention head (`HEAD` of decoder layer `LAYER`, or of `layer`) to
    look at the tokens of the object a question is about while its answer is written (guide_segments), a loss on
    that head's own attention (the log of the attention mass on those tokens). The answer's loss alone
    teaches this binding slowly: with two or more objects in view the model reported another
    object's colour or place about half the time (docs/EVAL.md). The head is the model's own; no
    weights are added to the checkpoint."""

    LAYER, HEAD = 2, 0

    def __init__(self, model, layer: int = LAYER):
        super().__init__()
        self.attn = model.model.language_model.layers[layer].self_attn
        self.attn.register_forward_pre_hook(self._keep, with_kwargs=True)
        self.seen = None

    def _keep(self, module, args, kwargs):
        self.seen = (kwargs["hidden_states"], kwargs["position_embeddings"])

    def loss(self, allowed: torch.Tensor, rows: list, weighted: bool = False) -> torch.Tensor:
        """`rows`: (batch row, query positions, key positions, head of layer `LAYER`, weight) per
        guided answer; `weighted`: weigh the rows' losses (False: their plain mean, as the recorded
        runs, whatever the weights)."""
        from transformers.models.qwen2.modeling_qwen2 import apply_rotary_pos_emb

        h, (cos, sin) = self.seen
        a, d = self.attn, self.attn.head_dim
        qk = {}
        for head in sorted({row[3] for row in rows}):
            # Projected once per guided head, not once for all heads: the same values, but the
            # projections' gradients then sum in the order of the recorded runs (one projection for
            # both heads of --colour-head changes run 11's weights from clip step 80 on).
            kv = head // a.num_key_value_groups
            qk[head] = apply_rotary_pos_emb(a.q_proj(h)[..., head * d:(head + 1) * d].unsqueeze(1),
                                            a.k_proj(h)[..., kv * d:(kv + 1) * d].unsqueeze(1), cos, sin)
        losses = []
        for r, qpos, kpos, head, _ in rows:
            q, k = qk[head]
            logits = (q[r, 0, qpos] @ k[r, 0].T) * a.scaling            # [Q, L]
            logits = logits.masked_fill(~allowed[r, qpos], float("-inf"))
            on = logits[:, kpos].logsumexp(-1) - logits.logsumexp(-1)
            losses.append(-on.mean())
        if not losses:
            return torch.zeros(())
        if not weighted:
            return torch.stack(losses).mean()
        w = torch.tensor([row[4] for row in rows])
        return (torch.stack(losses) * w).sum() / w.sum()


class LinearPatches(torch.nn.Module):
    """The checkpoint's patch embedding (a 14x14 convolution of stride 14 over rows of one patch
    each) as the matrix product it is: the same weights and the same sums up to rounding (2.7e-6
    here), about 5 times faster forward and backward on this CPU than torch's conv2d for these
    shapes (docs/EVAL.md, "Step time"). With --fast-step stage 2 encodes through it; stage 1 keeps
    the convolution, so its weights repeat those of the recorded runs bit for bit."""

    def __init__(self, embeddings):
        super().__init__()
        self.conv = embeddings.patch_embedding

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        return F.linear(rows, self.conv.weight.reshape(self.conv.out_channels, -1), self.conv.bias)


def normalise(frames: np.ndarray) -> torch.Tensor:
    x = torch.from_numpy(frames).permute(0, 3, 1, 2).float()
    return x * (2.0 / 255.0) - 1.0


def augment(frames: np.ndarray, rng) -> np.ndarray:
    """What a camera path adds: a little blur from scaling, a little codec noise."""
    x = frames.astype(np.float32)
    if rng.random() < 0.3:
        x = (x + np.roll(x, 1, axis=2) + np.roll(x, 1, axis=1) + np.roll(np.roll(x, 1, axis=1), 1, axis=2)) / 4
    if rng.random() < 0.3:
        x = x + rng.standard_normal(x.shape, dtype=np.float32) * 0.6
    return np.clip(np.rint(x), 0, 255).astype(np.uint8)


def forward(model, vision, embed, batch, grad_frames: int = 0, shared=None, once: bool = False):
    """Loss over a list of (ids, labels, visual, frames) samples, padded into one batch.

    With `grad_frames`, the vision encoder's gradient flows through at most that many frames of
    each sample (its first, its last two, and others drawn at random); the other frames are
    encoded without a graph, which makes long clips affordable (a forward pass is a third of a
    training step's cost). `shared`: features of one clip that every sample of the batch is about
    (evaluation), instead of encoding each sample's frames. `once` (--fast-step): the frames that
    learn are not encoded a second time without a graph."""
    if shared is not None:
        feats = shared
        offsets = np.zeros(len(batch) + 1, dtype=np.int64)
        return _text_forward(model, embed, batch, feats, offsets)
    frames = torch.cat([normalise(b[3]) for b in batch])
    offsets0 = np.cumsum([0] + [b[3].shape[0] for b in batch])
    if grad_frames and frames.shape[0] > grad_frames * len(batch):
        rng = np.random.default_rng(int(offsets0[-1]) * 31 + len(batch[0][0]))
        chosen = []
        for r, b in enumerate(batch):
            t = b[3].shape[0]
            pick = {0, t - 1, t - 2} if t > 2 else set(range(t))
            rest = [i for i in range(t) if i not in pick]
            rng.shuffle(rest)
            pick |= set(rest[:max(0, grad_frames - len(pick))])
            chosen += [int(offsets0[r]) + i for i in sorted(pick)]
        chosen_t = torch.tensor(chosen)
        if once:
            others = torch.ones(frames.shape[0], dtype=torch.bool)
            others[chosen_t] = False
            learned = vision(frames[chosen_t])
            feats = torch.zeros(frames.shape[0], *learned.shape[1:])
            if bool(others.any()):
                with torch.no_grad():
                    feats[others] = vision(frames[others])
        else:
            # The recorded runs: every frame without a graph, then the chosen ones with it.
            with torch.no_grad():
                feats = vision(frames)
            learned = vision(frames[chosen_t])
        feats = feats.index_put((chosen_t,), learned)
    else:
        feats = vision(frames)                               # [sumT, N, D]
        chosen_t, learned = torch.arange(frames.shape[0]), feats
    forward.learned = (chosen_t, learned)
    return _text_forward(model, embed, batch, feats, offsets0)


def decoder_probe_batch(batch) -> dict:
    """The decoder targets of a batch as head -> (rows, positions, classes) tensors."""
    out = {}
    for k in batch[0][6]:
        rows = [r for r, b in enumerate(batch) for _ in b[6][k]]
        cols = [p for b in batch for p, _ in b[6][k]]
        ys = [y for b in batch for _, y in b[6][k]]
        ys = torch.from_numpy(np.stack(ys)) if k in DecoderProbe.MULTI else torch.tensor(ys, dtype=torch.long)
        out[k] = (torch.tensor(rows, dtype=torch.long), torch.tensor(cols, dtype=torch.long), ys)
    return out


def _text_forward(model, embed, batch, feats, offsets):
    longest = max(len(b[0]) for b in batch)
    ids = torch.zeros(len(batch), longest, dtype=torch.long)
    labels = torch.full((len(batch), longest), -100, dtype=torch.long)
    mask = torch.zeros(len(batch), longest, dtype=torch.long)
    for r, b in enumerate(batch):
        ids[r, :len(b[0])] = torch.tensor(b[0])
        labels[r, :len(b[1])] = torch.tensor(b[1])
        mask[r, :len(b[0])] = 1
    emb = embed(ids)
    rows, cols, fi, ti = [], [], [], []
    for r, b in enumerate(batch):
        for pos, f, t in b[2]:
            rows.append(r); cols.append(pos); fi.append(offsets[r] + f); ti.append(t)
    emb = emb.index_put((torch.tensor(rows), torch.tensor(cols)), feats[torch.tensor(fi), torch.tensor(ti)])
    # Each question/answer turn sees the system turn and the frames, not the turns before it, at
    # the positions it would have alone: as the runtime asks (a fork of the live cache), and no
    # answer can be copied from an earlier one.
    pos = torch.arange(longest)[None].repeat(len(batch), 1)
    allowed = torch.ones(longest, longest, dtype=torch.bool).tril()[None].repeat(len(batch), 1, 1)
    allowed &= mask.bool()[:, None, :]
    for r, b in enumerate(batch):
        if len(b) > 5:
            for a, e, seen in b[5]:
                # `seen`: where the frames the turn sees end (the last frame's, or an earlier one's).
                allowed[r, a:e, seen:a] = False
                pos[r, a:e] = seen + torch.arange(e - a)
    # Padding rows attend to themselves (a row with no allowed key gives NaN in sdpa).
    allowed |= torch.eye(longest, dtype=torch.bool)[None]
    forward.allowed = allowed
    # Training batches (8 fields) carry the decoder probe's targets; held-out ones (4 fields) do not.
    probed = len(batch[0]) > 6
    out = model.model.language_model(inputs_embeds=emb, attention_mask=allowed[:, None], position_ids=pos,
                                     output_hidden_states=probed)
    # The decoder probe's hidden states (training): see DecoderProbe.
    forward.hidden = out.hidden_states[DecoderProbe.LAYER] if probed else None
    h = out.last_hidden_state[:, :-1]
    tgt = labels[:, 1:]
    sel = tgt != -100
    logits = model.lm_head(h[sel])
    return F.cross_entropy(logits, tgt[sel]), logits, tgt[sel]


def heldout_accuracy(model, vision, embed, tok, count: int) -> dict:
    """Teacher-forced exact match of every answer token, per kind, on held-out scenes."""
    model.eval()
    right: dict = {}
    total: dict = {}
    with torch.no_grad():
        for k in range(count):
            scene = scenes.make_scene("heldout", k)
            frames = scenes.render(scene)
            keep = scenes.diff_fp(frames)
            rng = np.random.default_rng(k)
            feats = vision(normalise(frames))
            for q in scenes.questions(scene, rng):
                ids, labels, visual = sample_text_single(tok, scene, keep, q)
                _, logits, tgt = forward(model, vision, embed, [(ids, labels, visual, frames)], shared=feats)
                ok = bool((logits.argmax(-1) == tgt).all())
                right[q["kind"]] = right.get(q["kind"], 0) + ok
                total[q["kind"]] = total.get(q["kind"], 0) + 1
    model.train()
    return {k: right[k] / total[k] for k in sorted(total)}


def sample_text_single(tok, scene, keep, q):
    """One question after the frames, exactly as the runtime asks it."""
    special = {s: tok.token_to_id(s) for s in SPECIALS}
    ids, labels, visual = [], [], []

    def text(s, learn=False):
        e = tok.encode(s, add_special_tokens=False).ids
        ids.extend(e); labels.extend(e if learn else [-100] * len(e))

    def sp(name, learn=False):
        ids.append(special[name]); labels.append(special[name] if learn else -100)

    sp("<|im_start|>"); text("system\n" + SYSTEM); sp("<|im_end|>"); text("\n")
    for i in range(scene.frames):
        sp("<|stream_start|>"); text(f"stream\nTime {scene.time(i):.1f}s:")
        for n in np.flatnonzero(keep[i]):
            visual.append((len(ids), i, int(n))); ids.append(special["<|video_pad|>"]); labels.append(-100)
        text("\n"); sp("<|stream_end|>"); text("\n")
    sp("<|im_start|>"); text("user\n" + q["question"]); sp("<|im_end|>"); text("\n")
    sp("<|im_start|>"); text("assistant\n"); text(q["answer"], learn=True); sp("<|im_end|>", learn=True)
    return ids, labels, visual


# Stage 1 draws its frames from scenes of the train split that stage 2 never reaches.
VISION_FIRST_SCENE = 500_000_000


def pretrain_vision(vision, probe, steps: int, batch: int, lr: float, seed: int, rank: int = 0, world: int = 1,
                    taught: int | None = None) -> list:
    """Stage 1: the vision encoder and projector alone, with the per-token probe, on single frames
    (VideoLLaMA3's own recipe starts with a vision stage). A frame costs no decoder, so this stage
    sees some 20 times more frames a minute than stage 2, and shape, the slowest thing to learn,
    needs them (docs/EVAL.md). With `world` workers, each encodes its share of the step's frames.
    `taught`: how many of the probe's targets the loss teaches (None: all). Returns the log."""
    params = [*vision.parameters(), *probe.parameters()]
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.98), weight_decay=0.01)
    started, log = time.time(), []
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr * min(1.0, (step + 1) / 50) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
        frames, targets = [], []
        share = batch // world
        for k in range(rank * share, (rank + 1) * share):
            index = VISION_FIRST_SCENE + step * batch + k
            scene = scenes.crowd_frame(index) if k % 2 else scenes.make_scene("train", index, frames=1)
            f, labels = scenes.render(scene, labels=True)
            frames.append(augment(f, np.random.default_rng(seed * 7919 + index)))
            targets.append(token_targets(scene, labels))
        loss, accs = probe.loss(vision(normalise(np.concatenate(frames))), torch.from_numpy(np.concatenate(targets)),
                                taught)
        opt.zero_grad()
        loss.backward()
        average_gradients(params, world)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if rank == 0 and (step % 50 == 0 or step + 1 == steps):
            acc = " ".join(f"{a.item():.2f}" for a in accs)
            print(f"vision step {step} probe {loss.item():.3f} ({acc}) {time.time() - started:.0f}s",
                  flush=True)
            log.append({"step": step, "probe": round(loss.item(), 4), "accuracy": [round(a.item(), 3) for a in accs]})
    return log


BUDGET_RESERVE_S = 30   # the last held-out check and the saves after the last step


def budget_plan(plan, step: int, marks: list, stage2_at: float, now: float, args) -> None:
    """--budget-minutes: once `now` (seconds since the run began) passes the point where the time
    left for stage 2 is `--decay-share` of the time it has in all, fixes `plan` (decay start, last
    step): the decay runs for as many steps as the time left allows at the pace of the last 200
    steps. Until then `plan` stays unknown and the rate stays at its peak."""
    total = args.budget_minutes * 60 - BUDGET_RESERVE_S - stage2_at   # stage 2's seconds in all
    into = now - stage2_at
    if into < (1 - args.decay_share) * total:
        return
    if len(marks) < 2:   # no pace measured yet: wait for one unless the time is up
        if into < total:
            return
        plan[0], plan[1] = step, step + 1
        return
    (s0, t0), (s1, t1) = marks[-11] if len(marks) > 10 else marks[0], marks[-1]
    per_step = (t1 - t0) / max(1, s1 - s0)
    plan[0], plan[1] = step, step + max(1, int((total - into) / per_step))


def average_gradients(params: list, world: int) -> None:
    """Data parallelism over `world` worker processes (gloo): every worker ends the step with the
    mean of all workers' gradients, so their weights stay identical. Two one-thread workers run
    1.26 times the steps a minute of one process with two threads on this machine (small matrices
    scale badly over threads; the scenes are rendered in parallel too)."""
    if world == 1:
        return
    import torch.distributed as dist

    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= world
    at = 0
    for p, g in zip(params, grads):
        p.grad = flat[at:at + g.numel()].view_as(p)
        at += g.numel()


def save(model, tok, out: Path) -> None:
    from reduced import write_processor
    from transformers import PreTrainedTokenizerFast, VideoLlama3VideoProcessor

    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        additional_special_tokens=[s for s in SPECIALS if s not in ("<|endoftext|>",)],
        clean_up_tokenization_spaces=False, model_max_length=TEXT["max_position_embeddings"])
    # One frame's budget whatever the window (max_frames = 1): the model was trained at one size.
    video = VideoLlama3VideoProcessor(size={"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS}, max_frames=1)
    write_processor(out, tokenizer, video)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--turns", type=int, default=14, help="question/answer turns per training clip")
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--grad-frames", type=int, default=6,
                    help="frames per clip the vision encoder learns from, the others forward only (0: all)")
    ap.add_argument("--long-clips", action="store_true", help="clips of up to 64 frames (4-12 otherwise)")
    ap.add_argument("--kind-weights", default="",
                    help="how often each kind of question is drawn for a clip's turns, as KIND=WEIGHT,... over "
                         "the defaults (KIND_WEIGHTS), e.g. motion=3,position=1.5")
    ap.add_argument("--probe-weight", type=float, default=1.0, help="weight of the per-token auxiliary loss")
    ap.add_argument("--decoder-probe-weight", type=float, default=0.3,
                    help="weight of the decoder probe's loss (DecoderProbe; 0: none)")
    ap.add_argument("--guide-weight", type=float, default=1.0,
                    help="weight of the attention guide's loss (AttentionGuide; 0: none)")
    ap.add_argument("--guide-colour", type=float, default=1.0,
                    help="weight of colour answers (\"What colour is the ball?\": found by shape) among the "
                         "guided pieces (1: every piece alike, as the recorded runs)")
    ap.add_argument("--colour-head", type=int, default=None,
                    help="guide colour answers on this head of the guided layer instead of the head every "
                         "other piece is guided on (AttentionGuide; unset: one head for all, as the recorded runs)")
    ap.add_argument("--motion-head", type=int, default=None,
                    help="guide the pieces about motion (\"Which way is ...?\", and the sentences of narrations "
                         "and \"What is moving?\" that say an object moves or is still) on this head of the guided "
                         "layer (unset: the head every other piece is guided on, as the recorded runs)")
    ap.add_argument("--list-head", type=int, default=None,
                    help="guide every piece of a narration and of \"What is moving?\" (which object comes next, and "
                         "what it does) on this head of the guided layer, whatever the piece says (unset: by what it "
                         "says, --motion-head or the head every other piece is guided on, as the recorded runs)")
    ap.add_argument("--recall-head", type=int, default=None,
                    help="with --list-head: each sentence of a narration and of \"What is moving?\" also teaches this "
                         f"head of decoder layer {RECALL_LAYER} to look, from the sentence's own words, at the object "
                         "it names (the first hop of finding the next object; unset: no such guide)")
    ap.add_argument("--list-end", action="store_true",
                    help="with --list-head: the position that ends a narration looks at the last frame's end, "
                         "where the decoder probe keeps what is there (unset: no guide there)")
    ap.add_argument("--cut-turns", type=int, default=0,
                    help="also ask the narration and \"What is moving?\" at this many earlier frames of each clip, "
                         "drawn at random, each turn seeing the frames up to its own only, as if the clip ended "
                         "there: more lists to learn from at the cost of a few turns, not of frames (0: none, as "
                         "the recorded runs)")
    ap.add_argument("--decay-rich", type=float, default=0.0,
                    help="from the step the decay starts (--schedule wsd), redraw this share of the clips whose "
                         "narration has fewer than three sentences, so the decay is spent more on the narrations "
                         "that fail (0: none, as the recorded runs)")
    ap.add_argument("--mover-set", action="store_true",
                    help="the decoder probe learns at each frame's end which objects move which way, and a \"What "
                         "is moving?\" answer looks there for \"Nothing is moving.\" and for where its list ends "
                         "(DecoderProbe, AttentionGuide; unset: as the recorded runs)")
    ap.add_argument("--vision-from", type=Path, default=None,
                    help="take the vision encoder and projector of this checkpoint and skip stage 1")
    ap.add_argument("--init", type=Path, default=None, help="continue from this checkpoint (a second phase)")
    ap.add_argument("--first-clip", type=int, default=0, help="index of the first training scene")
    ap.add_argument("--warmup", type=int, default=100, help="steps of linear learning-rate warm-up")
    ap.add_argument("--vision-steps", type=int, default=2000, help="stage 1: vision-only steps (0: none)")
    ap.add_argument("--vision-batch", type=int, default=32, help="stage 1: frames per step")
    ap.add_argument("--vision-lr", type=float, default=3e-3)
    ap.add_argument("--vision-targets", type=int, default=0,
                    help="stage 1 teaches only the probe's first N targets (4: colour, shape, the token's column "
                         "and row, as commit 8c459d6 did; 0: all 8, the object's place too)")
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads in all (the recorded runs: 2)")
    ap.add_argument("--workers", type=int, default=2,
                    help="data-parallel worker processes, the threads shared among them (average_gradients)")
    ap.add_argument("--vision-workers", type=int, default=0, choices=(0, 1),
                    help="1: stage 1 runs in worker 0 alone with all the threads (the others wait), stage 2 in "
                         "every worker; 0: every stage in every worker")
    ap.add_argument("--fast-step", action="store_true",
                    help="stage 2 encodes through the patch embedding as a matrix product and each frame "
                         "once: 1.17x faster a step, equal up to rounding, not bit for bit, to the "
                         "recorded runs (made without it; docs/EVAL.md, \"Step time\")")
    ap.add_argument("--compile", action="store_true",
                    help="stage 2 runs each decoder layer through torch.compile (inductor, dynamic shapes; needs "
                         "a C++ compiler): 1.13x faster a step here after some 45 s of compiling, equal up to "
                         "rounding, not bit for bit, to a run without it (docs/EVAL.md, \"Step time\")")
    ap.add_argument("--schedule", choices=("cosine", "wsd"), default="cosine",
                    help="stage 2's learning rate after the warm-up: a cosine down to 5 %% of --lr (the recorded "
                         "runs), or wsd: --lr held until the last --decay-share of the steps, then a straight "
                         "line down to 5 %%")
    ap.add_argument("--decay-share", type=float, default=0.25, help="wsd: the share of the steps that decay")
    ap.add_argument("--budget-minutes", type=float, default=None,
                    help="wsd: instead of --steps, train stage 2 as long as the run, stage 1 included, stays "
                         "within this many minutes: the decay starts when --decay-share of stage 2's time is "
                         "left and lasts as many steps as that time allows at the recent pace (the log and "
                         "training.json give --steps and --decay-start that repeat the run)")
    ap.add_argument("--decay-start", type=int, default=None,
                    help="wsd: the step the decay starts at (with --steps: repeats a --budget-minutes run)")
    ap.add_argument("--eval-every", type=int, default=1000)
    ap.add_argument("--eval-clips", type=int, default=30)
    args = ap.parse_args()
    kind_weights(args.kind_weights)  # a bad value fails here, not after stage 1
    if args.cut_turns < 0:
        ap.error(f"--cut-turns: expected 0 or more frames, got {args.cut_turns}")
    if (args.budget_minutes is not None or args.decay_start is not None) and args.schedule != "wsd":
        ap.error("--budget-minutes and --decay-start need --schedule wsd")
    if args.budget_minutes is not None and (args.decay_start is not None or args.budget_minutes <= 0):
        ap.error("--budget-minutes: expected minutes above 0, without --decay-start")
    if args.decay_start is not None and not args.warmup <= args.decay_start < args.steps:
        ap.error(f"--decay-start: expected a step of {args.warmup}..{args.steps - 1}, got {args.decay_start}")
    if not 0.0 <= args.decay_rich < 1.0 or (args.decay_rich and args.schedule != "wsd"):
        ap.error(f"--decay-rich: expected a share of 0..1 (below 1) with --schedule wsd, got {args.decay_rich} "
                 f"with --schedule {args.schedule}")
    if args.batch % args.workers or args.vision_batch % args.workers:
        ap.error(f"--batch ({args.batch}) and --vision-batch ({args.vision_batch}) must divide among "
                 f"--workers ({args.workers})")
    if args.colour_head is not None and not 0 <= args.colour_head < TEXT["num_attention_heads"]:
        ap.error(f"--colour-head: expected a head of 0..{TEXT['num_attention_heads'] - 1}, got {args.colour_head}")
    if args.motion_head is not None and not 0 <= args.motion_head < TEXT["num_attention_heads"]:
        ap.error(f"--motion-head: expected a head of 0..{TEXT['num_attention_heads'] - 1}, got {args.motion_head}")
    if args.list_head is not None and not 0 <= args.list_head < TEXT["num_attention_heads"]:
        ap.error(f"--list-head: expected a head of 0..{TEXT['num_attention_heads'] - 1}, got {args.list_head}")
    if args.recall_head is not None and not 0 <= args.recall_head < TEXT["num_attention_heads"]:
        ap.error(f"--recall-head: expected a head of 0..{TEXT['num_attention_heads'] - 1}, got {args.recall_head}")
    if (args.recall_head is not None or args.list_end) and args.list_head is None:
        ap.error("--recall-head and --list-end need --list-head")
    if args.workers == 1:
        run(0, args, None)
        return
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.multiprocessing.spawn(run, args=(args, port), nprocs=args.workers)


def run(rank: int, args, port) -> None:
    """One worker of `main`: builds the same model as every other worker (same seed), trains on its
    share of each batch, and (worker 0) logs, evaluates and saves."""
    world = args.workers
    if world > 1:
        import torch.distributed as dist

        import datetime

        # Long enough for the other workers to wait out a stage 1 in worker 0 alone (--vision-workers 1).
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(hours=3))
    torch.manual_seed(args.seed)
    torch.set_num_threads(max(1, args.threads // world))
    from export import VisionExport

    say = print if rank == 0 else (lambda *a, **k: None)

    if args.init:
        # A second phase: the weights and tokenizer of an earlier run, new clips.
        from tokenizers import Tokenizer
        from transformers import VideoLlama3ForConditionalGeneration

        tok = Tokenizer.from_file(str(args.init / "tokenizer.json"))
        model = VideoLlama3ForConditionalGeneration.from_pretrained(args.init, dtype=torch.float32).train()
    else:
        tok = build_tokenizer()
        model = make_model(tok).train()
    if args.vision_from:
        from transformers import VideoLlama3ForConditionalGeneration

        donor = VideoLlama3ForConditionalGeneration.from_pretrained(args.vision_from, dtype=torch.float32)
        model.model.vision_model.load_state_dict(donor.model.vision_model.state_dict())
        model.model.projector.load_state_dict(donor.model.projector.state_dict())
        args.vision_steps = 0
    if world > 1:
        # Every worker starts from worker 0's weights, and must have built the same tokenizer.
        for p in model.parameters():
            dist.broadcast(p.data, 0)
        digest = torch.tensor([int.from_bytes(hashlib.sha256(tok.to_str().encode()).digest()[:7], "big")])
        same = digest.clone()
        dist.broadcast(same, 0)
        assert bool((same == digest).all()), "workers built different tokenizers"
    vision = VisionExport(model, 2)
    embed = model.model.language_model.embed_tokens
    params = sum(p.numel() for p in model.parameters())
    say(f"scenes model: {params / 1e6:.2f}M parameters, vocabulary {tok.get_vocab_size()}", flush=True)
    probe = TokenProbe(TEXT["hidden_size"])
    dprobe = DecoderProbe(TEXT["hidden_size"], moving=args.mover_set)
    guide = AttentionGuide(model)
    recall = AttentionGuide(model, RECALL_LAYER) if args.recall_head is not None else None
    begun = time.time()
    vision_log = []
    if args.vision_steps and not args.init:
        if args.vision_workers == 1 and world > 1:
            # Stage 1 in worker 0 alone, with every thread; then every worker takes its weights.
            if rank == 0:
                torch.set_num_threads(args.threads)
                vision_log = pretrain_vision(vision, probe, args.vision_steps, args.vision_batch, args.vision_lr,
                                             args.seed, 0, 1, args.vision_targets or None)
                torch.set_num_threads(max(1, args.threads // world))
            for p in [*model.parameters(), *probe.parameters()]:
                dist.broadcast(p.data, 0)
        else:
            vision_log = pretrain_vision(vision, probe, args.vision_steps, args.vision_batch, args.vision_lr,
                                         args.seed, rank, world, args.vision_targets or None)
    if args.fast_step:
        # Stage 2 and the held-out checks encode frames with the patch embedding as a matrix product
        # (the same weights: only the encoder's first step is swapped).
        vision.embeddings = LinearPatches(model.model.vision_model.embeddings)
    if args.compile:
        # Per layer: the whole decoder compiled as one module ran slower here (160 steps: 86 s against 78 s).
        for layer in model.model.language_model.layers:
            layer.compile(dynamic=True)
    trained = [*model.parameters(), *probe.parameters(), *dprobe.parameters()]
    opt = torch.optim.AdamW(trained, lr=args.lr, betas=(0.9, 0.98), weight_decay=0.01)
    warm = args.warmup

    # With --budget-minutes the steps are not known in advance: `plan` holds the step the decay
    # starts at and the last step, both unknown (-1) until worker 0 fixes them from the time left
    # (`budget_plan`) and sends them to the other workers.
    plan = torch.tensor([args.decay_start if args.decay_start is not None else -1,
                         -1 if args.budget_minutes else args.steps], dtype=torch.long)

    def decay_at(step):
        """How far --schedule wsd's decay is at `step`: below 0 before it starts (or while `plan`
        is not fixed yet), 0 at its first step, 1 at its last; None for the cosine."""
        if args.budget_minutes or args.decay_start is not None:
            # From a decay step chosen by the time left (or given to repeat such a run: --steps N
            # --decay-start M, both from its log).
            start, last = int(plan[0]), int(plan[1])
            return -1.0 if start < 0 or step < start else (step - start) / max(1, last - start)
        if args.schedule != "wsd":
            return None
        # Warm-up, stable, decay: the peak rate until the last `decay_share` of the steps
        # (docs/EVAL.md, "Run 9").
        p = (step - warm) / max(1, args.steps - warm)
        return (p - (1 - args.decay_share)) / args.decay_share

    def lr_at(step):
        if step < warm:
            return args.lr * (step + 1) / warm
        d = decay_at(step)
        if d is not None:
            # wsd: a straight line down to the same floor as the cosine's.
            return args.lr * (1 - 0.95 * max(0.0, d))
        p = (step - warm) / max(1, args.steps - warm)
        return args.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * p)))

    started = time.time()
    log = []
    # Each worker draws every `world`-th clip, `share` of them a step.
    index = args.first_clip + rank
    share = args.batch // world
    pending: list = []
    weights = kind_weights(args.kind_weights)
    marks: list = []   # (step, time) every 20 steps: the recent time a step takes
    step = 0
    while int(plan[1]) < 0 or step < int(plan[1]):
        if args.budget_minutes and step % 20 == 0:
            if rank == 0 and int(plan[1]) < 0:
                marks.append((step, time.time()))
                budget_plan(plan, step, marks, started - begun, time.time() - begun, args)
            if world > 1:
                dist.broadcast(plan, 0)
            if int(plan[1]) >= 0 and int(plan[0]) == step:
                say(f"decay from step {int(plan[0])} to step {int(plan[1])} (repeat with --steps {int(plan[1])} "
                    f"--decay-start {int(plan[0])}) at {time.time() - begun:.0f}s", flush=True)
        if not pending:
            # Four batches' worth of clips, sorted by length so a batch pads little.
            while len(pending) < 4 * share:
                rng = np.random.default_rng(args.seed * 7919 + index)
                scene = scenes.make_scene("train", index, long=args.long_clips)
                index += world
                if args.decay_rich and decay_at(step) >= 0 and len(scenes.narration_parts(scene)) < 3 \
                        and np.random.default_rng([args.seed, index]).random() < args.decay_rich:
                    # --decay-rich: in the decay, some of the clips of one or two sentences give way.
                    continue
                frames, tokens = scenes.render(scene, labels=True)
                frames = augment(frames, rng)
                keep = scenes.diff_fp(frames)
                ids, labels, visual, turns, ends, guides = sample_text(tok, scene, keep, rng, args.turns,
                                                                       tokens, weights, args.mover_set,
                                                                       args.list_head is not None,
                                                                       args.recall_head is not None, args.list_end,
                                                                       args.cut_turns)
                pending.append((ids, labels, visual, frames, token_targets(scene, tokens), turns,
                                decoder_targets(tok, scene, tokens, visual, ends, args.mover_set), guides))
            pending.sort(key=lambda b: len(b[0]))
            pending = [pending[i:i + share] for i in range(0, len(pending), share)]
            order = np.random.default_rng(args.seed + step).permutation(len(pending))
            pending = [pending[i] for i in order]
        batch = pending.pop()
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        lm_loss, _, _ = forward(model, vision, embed, batch, args.grad_frames, once=args.fast_step)
        chosen, learned = forward.learned
        targets = torch.from_numpy(np.concatenate([b[4] for b in batch]))[chosen]
        probe_loss, probe_acc = probe.loss(learned, targets)
        loss = lm_loss + args.probe_weight * probe_loss
        dprobe_loss, dprobe_acc = torch.zeros(()), {}
        if args.decoder_probe_weight:
            dprobe_loss, dprobe_acc = dprobe.loss(forward.hidden, decoder_probe_batch(batch))
            loss = loss + args.decoder_probe_weight * dprobe_loss
        guide_loss = torch.zeros(())
        if args.guide_weight:
            # (head, weight) of a guided piece by what it is about; every other piece: (HEAD, 1).
            heads = {"colour": (guide.HEAD if args.colour_head is None else args.colour_head, args.guide_colour),
                     "motion": (guide.HEAD if args.motion_head is None else args.motion_head, 1.0),
                     "list": (args.list_head, 1.0)}
            rows = [(r, qp, kp, *heads.get(kind, (guide.HEAD, 1.0)))
                    for r, b in enumerate(batch) for qp, kp, kind in b[7] if kind != "recall"]
            guide_loss = guide.loss(forward.allowed, rows, weighted=args.guide_colour != 1.0)
            if recall is not None:
                back = [(r, qp, kp, args.recall_head, 1.0)
                        for r, b in enumerate(batch) for qp, kp, kind in b[7] if kind == "recall"]
                guide_loss = guide_loss + recall.loss(forward.allowed, back)
            loss = loss + args.guide_weight * guide_loss
        opt.zero_grad()
        loss.backward()
        average_gradients(trained, world)
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        opt.step()
        if rank == 0 and step % 20 == 0:
            el = time.time() - started
            acc = " ".join(f"{a.item():.2f}" for a in probe_acc)
            dacc = " ".join(f"{k} {a:.2f}" for k, a in dprobe_acc.items())
            print(f"step {step} loss {lm_loss.item():.4f} probe {probe_loss.item():.3f} ({acc}) "
                  f"decoder probe {dprobe_loss.item():.3f} ({dacc}) guide {guide_loss.item():.3f} lr {lr_at(step):.2e} {el:.0f}s", flush=True)
        if rank == 0 and ((step + 1) % args.eval_every == 0 or step + 1 == int(plan[1])):
            torch.set_num_threads(args.threads)   # the other workers wait for this one
            acc = heldout_accuracy(model, vision, embed, tok, args.eval_clips)
            torch.set_num_threads(max(1, args.threads // world))
            log.append({"step": step + 1, "seconds": round(time.time() - started), "loss": loss.item(), "heldout": acc})
            print(f"held-out (teacher-forced exact answers) at step {step + 1}: {json.dumps(acc)}", flush=True)
            save(model, tok, args.out)
        step += 1
    if world > 1:
        dist.destroy_process_group()
    if rank:
        return
    save(model, tok, args.out)
    phases = []
    if args.init and (args.init / "training.json").exists():
        earlier = json.loads((args.init / "training.json").read_text())
        phases = earlier.get("phases", [earlier])
    phases.append({"command": " ".join(sys.argv), "seconds": round(time.time() - begun), "log": log,
                   "vision_log": vision_log})
    if args.budget_minutes:
        phases[-1]["steps"], phases[-1]["decay_start"] = int(plan[1]), int(plan[0])
    (args.out / "training.json").write_text(json.dumps({
        "parameters": params, "seconds": sum(p["seconds"] for p in phases), "phases": phases}, indent=1) + "\n")
    print(f"trained in {time.time() - begun:.0f}s -> {args.out}")


if __name__ == "__main__":
    main()
