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
probe (each visual token's colour, shape, column and row) on single frames, 32 a step, half of them
crowded with two to five objects: shape is learned late (near chance for ~1,000 steps, then 90 % of
tokens by step 2,000), far too late if it has to wait for the decoder's gradient. Stage 2 trains the
whole model on clips, with the probe kept on as an auxiliary loss. A clip's question/answer turns
share its frames but not each other: each turn sees the system turn and the frames only, at the
positions it would have alone, as the runtime asks a question (a fork of the live cache), so no
answer is copied from an earlier one.

Tokenizer: our own byte-level BPE of 512 ids trained on the scenes' sentences (any text still
encodes, as bytes). Qwen's real vocabulary has 151,936 rows: at this model's width its embedding
alone would be 24 M parameters (97 MB in float32), far over the 20 MB the weights may take.

Seeded throughout: the same command gives the same weights on the same machine (torch CPU kernels,
2 threads). Prints held-out accuracy per question kind as it goes (teacher-forced, exact match).
"""

from __future__ import annotations

import argparse
import json
import math
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


def sample_text(tok, scene, keep, rng, turns: int):
    """Segments of one training sequence: ("ids", [...], labels?) and ("visual", frame, token index list)."""
    special = {s: tok.token_to_id(s) for s in SPECIALS}
    ids: list[int] = []
    labels: list[int] = []
    visual: list[tuple[int, int, int]] = []  # (position, frame, token)

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
        text("\n"); sp("<|stream_end|>"); text("\n")
    prefix = len(ids)
    spans = []
    qs = scenes.questions(scene, rng)
    # Narrations and the rarer kinds are drawn more often than their share of all questions.
    weights = np.array([{"narration": 3.0, "count": 1.5, "colour": 1.0, "shape": 1.0, "position": 1.0,
                         "motion": 2.0, "temporal": 1.2}[q["kind"]] for q in qs])
    pick = rng.choice(len(qs), size=min(turns, len(qs)), replace=False, p=weights / weights.sum())
    for k in pick:
        q = qs[k]
        start = len(ids)
        sp("<|im_start|>"); text("user\n" + q["question"]); sp("<|im_end|>"); text("\n")
        sp("<|im_start|>"); text("assistant\n"); text(q["answer"], learn=True); sp("<|im_end|>", learn=True); text("\n")
        spans.append((start, len(ids)))
    return ids, labels, visual, (prefix, spans)


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


def token_targets(scene, labels: np.ndarray) -> np.ndarray:
    """[T, N, 4] per-token targets of the auxiliary head: the covering object's colour and shape
    (0: background), the token's column and row."""
    t, n = labels.shape
    hb, wb = scenes.HEIGHT // scenes.TOKEN_PX, scenes.WIDTH // scenes.TOKEN_PX
    colour = np.array([0] + [COLOUR_IDS[o.colour] for o in scene.objects])[labels]
    shape = np.array([0] + [SHAPE_IDS[o.shape] for o in scene.objects])[labels]
    # On a flat background a token's features carry its place only through the frame's edges (the
    # encoder's rotary positions are relative): three layers learn that (docs/EVAL.md).
    col = np.broadcast_to(np.tile(np.arange(wb), hb), (t, n))
    row = np.broadcast_to(np.repeat(np.arange(hb), wb), (t, n))
    return np.stack([colour, shape, col, row], -1)


class TokenProbe(torch.nn.Module):
    """Training only (not part of the checkpoint): reads each visual token's colour, shape, column
    and row from its features, so the vision encoder learns from the first step what the answers
    need. Without it the decoder first learns to ignore the (random) visual tokens, and the
    encoder's gradient through the decoder stays ~1e-5 of the decoder's: nothing is learned."""

    SIZES = (len(scenes.COLOURS) + 1, len(scenes.SHAPES) + 1,
             scenes.WIDTH // scenes.TOKEN_PX, scenes.HEIGHT // scenes.TOKEN_PX)

    def __init__(self, hidden: int):
        super().__init__()
        self.head = torch.nn.Linear(hidden, sum(self.SIZES))

    def loss(self, feats: torch.Tensor, targets: torch.Tensor):
        out = self.head(feats.reshape(-1, feats.shape[-1]))
        t = targets.reshape(-1, 4)
        losses, accs, start = [], [], 0
        for k, size in enumerate(self.SIZES):
            logits = out[:, start:start + size]
            start += size
            # Object tokens are rare: weigh background tokens down for colour and shape.
            w = None
            if k < 2:
                w = torch.ones(size)
                w[0] = 0.2
            # Every token has all four targets (colour and shape 0 on the background).
            losses.append(F.cross_entropy(logits, t[:, k], weight=w))
            right = logits.argmax(-1) == t[:, k]
            accs.append((right[t[:, k] > 0] if k < 2 else right).float().mean())
        return sum(losses), accs


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


def forward(model, vision, embed, batch, grad_frames: int = 0, shared=None):
    """Loss over a list of (ids, labels, visual, frames) samples, padded into one batch.

    With `grad_frames`, the vision encoder's gradient flows through at most that many frames of
    each sample (its first, its last two, and others drawn at random); the other frames are
    encoded without a graph, which makes long clips affordable (a forward pass is a third of a
    training step's cost). `shared`: features of one clip that every sample of the batch is about
    (evaluation), instead of encoding each sample's frames."""
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
        with torch.no_grad():
            feats = vision(frames)
        learned = vision(frames[chosen_t])
        feats = feats.index_put((chosen_t,), learned)
    else:
        feats = vision(frames)                               # [sumT, N, D]
        chosen_t, learned = torch.arange(frames.shape[0]), feats
    forward.learned = (chosen_t, learned)
    return _text_forward(model, embed, batch, feats, offsets0)


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
            prefix, spans = b[5]
            for a, e in spans:
                allowed[r, a:e, prefix:a] = False
                pos[r, a:e] = prefix + torch.arange(e - a)
    # Padding rows attend to themselves (a row with no allowed key gives NaN in sdpa).
    allowed |= torch.eye(longest, dtype=torch.bool)[None]
    out = model.model.language_model(inputs_embeds=emb, attention_mask=allowed[:, None], position_ids=pos)
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


def pretrain_vision(vision, probe, steps: int, batch: int, lr: float, seed: int) -> list:
    """Stage 1: the vision encoder and projector alone, with the per-token probe, on single frames
    (VideoLLaMA3's own recipe starts with a vision stage). A frame costs no decoder, so this stage
    sees some 20 times more frames a minute than stage 2, and shape, the slowest thing to learn,
    needs them (docs/EVAL.md). Returns the log."""
    params = [*vision.parameters(), *probe.parameters()]
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.98), weight_decay=0.01)
    started, log = time.time(), []
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr * min(1.0, (step + 1) / 50) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
        frames, targets = [], []
        for k in range(batch):
            index = VISION_FIRST_SCENE + step * batch + k
            scene = scenes.crowd_frame(index) if k % 2 else scenes.make_scene("train", index, frames=1)
            f, labels = scenes.render(scene, labels=True)
            frames.append(augment(f, np.random.default_rng(seed * 7919 + index)))
            targets.append(token_targets(scene, labels))
        loss, accs = probe.loss(vision(normalise(np.concatenate(frames))), torch.from_numpy(np.concatenate(targets)))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step % 50 == 0 or step + 1 == steps:
            acc = " ".join(f"{a.item():.2f}" for a in accs)
            print(f"vision step {step} probe {loss.item():.3f} (colour shape col row {acc}) {time.time() - started:.0f}s",
                  flush=True)
            log.append({"step": step, "probe": round(loss.item(), 4), "accuracy": [round(a.item(), 3) for a in accs]})
    return log


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
    ap.add_argument("--steps", type=int, default=4500)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--turns", type=int, default=14, help="question/answer turns per training clip")
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--grad-frames", type=int, default=6,
                    help="frames per clip the vision encoder learns from, the others forward only (0: all)")
    ap.add_argument("--long-clips", action="store_true", help="clips of up to 64 frames (4-12 otherwise)")
    ap.add_argument("--probe-weight", type=float, default=1.0, help="weight of the per-token auxiliary loss")
    ap.add_argument("--init", type=Path, default=None, help="continue from this checkpoint (a second phase)")
    ap.add_argument("--first-clip", type=int, default=0, help="index of the first training scene")
    ap.add_argument("--warmup", type=int, default=100, help="steps of linear learning-rate warm-up")
    ap.add_argument("--vision-steps", type=int, default=2400, help="stage 1: vision-only steps (0: none)")
    ap.add_argument("--vision-batch", type=int, default=32, help="stage 1: frames per step")
    ap.add_argument("--vision-lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--eval-clips", type=int, default=30)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(2)
    from export import VisionExport

    if args.init:
        # A second phase: the weights and tokenizer of an earlier run, new clips.
        from tokenizers import Tokenizer
        from transformers import VideoLlama3ForConditionalGeneration

        tok = Tokenizer.from_file(str(args.init / "tokenizer.json"))
        model = VideoLlama3ForConditionalGeneration.from_pretrained(args.init, dtype=torch.float32).train()
    else:
        tok = build_tokenizer()
        model = make_model(tok).train()
    vision = VisionExport(model, 2)
    embed = model.model.language_model.embed_tokens
    params = sum(p.numel() for p in model.parameters())
    print(f"scenes model: {params / 1e6:.2f}M parameters, vocabulary {tok.get_vocab_size()}", flush=True)
    probe = TokenProbe(TEXT["hidden_size"])
    begun = time.time()
    vision_log = []
    if args.vision_steps and not args.init:
        vision_log = pretrain_vision(vision, probe, args.vision_steps, args.vision_batch, args.vision_lr, args.seed)
    opt = torch.optim.AdamW([*model.parameters(), *probe.parameters()], lr=args.lr, betas=(0.9, 0.98),
                            weight_decay=0.01)
    warm = args.warmup

    def lr_at(step):
        if step < warm:
            return args.lr * (step + 1) / warm
        p = (step - warm) / max(1, args.steps - warm)
        return args.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * p)))

    started = time.time()
    log = []
    index = args.first_clip
    pending: list = []
    for step in range(args.steps):
        if not pending:
            # Four batches' worth of clips, sorted by length so a batch pads little.
            for _ in range(4 * args.batch):
                rng = np.random.default_rng(args.seed * 7919 + index)
                scene = scenes.make_scene("train", index, long=args.long_clips)
                index += 1
                frames, tokens = scenes.render(scene, labels=True)
                frames = augment(frames, rng)
                keep = scenes.diff_fp(frames)
                ids, labels, visual, turns = sample_text(tok, scene, keep, rng, args.turns)
                pending.append((ids, labels, visual, frames, token_targets(scene, tokens), turns))
            pending.sort(key=lambda b: len(b[0]))
            pending = [pending[i:i + args.batch] for i in range(0, len(pending), args.batch)]
            order = np.random.default_rng(args.seed + step).permutation(len(pending))
            pending = [pending[i] for i in order]
        batch = pending.pop()
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        lm_loss, _, _ = forward(model, vision, embed, batch, args.grad_frames)
        chosen, learned = forward.learned
        targets = torch.from_numpy(np.concatenate([b[4] for b in batch]))[chosen]
        probe_loss, probe_acc = probe.loss(learned, targets)
        loss = lm_loss + args.probe_weight * probe_loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_([*model.parameters(), *probe.parameters()], 1.0)
        opt.step()
        if step % 20 == 0:
            el = time.time() - started
            acc = " ".join(f"{a.item():.2f}" for a in probe_acc)
            print(f"step {step} loss {lm_loss.item():.4f} probe {probe_loss.item():.3f} (colour shape col row {acc}) "
                  f"lr {lr_at(step):.2e} {el:.0f}s", flush=True)
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            acc = heldout_accuracy(model, vision, embed, tok, args.eval_clips)
            log.append({"step": step + 1, "seconds": round(time.time() - started), "loss": loss.item(), "heldout": acc})
            print(f"held-out (teacher-forced exact answers) at step {step + 1}: {json.dumps(acc)}", flush=True)
            save(model, tok, args.out)
    save(model, tok, args.out)
    phases = []
    if args.init and (args.init / "training.json").exists():
        earlier = json.loads((args.init / "training.json").read_text())
        phases = earlier.get("phases", [earlier])
    phases.append({"command": " ".join(sys.argv), "seconds": round(time.time() - begun), "log": log,
                   "vision_log": vision_log})
    (args.out / "training.json").write_text(json.dumps({
        "parameters": params, "seconds": sum(p["seconds"] for p in phases), "phases": phases}, indent=1) + "\n")
    print(f"trained in {time.time() - begun:.0f}s -> {args.out}")


if __name__ == "__main__":
    main()
