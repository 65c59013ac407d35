#!/usr/bin/env python3
"""Generate the tiny Apollo-shaped test model: Apollo's clip path at a small size, seeded weights.

The decoder, token embedding and tokenizer are the tiny model's (engines/tiny/generate.py, same
seed streams); the vision graph is Apollo's clip encoder as docs/REFERENCE.md §2 reads its code
(`HybridVisionTower`, `Connector`, `PerceiverResampler`), shrunk:

  pixel_values f32 [clips, 4, 3, S, S], each frame `(rgb/255 - 0.5) / 0.5` (SigLIP's normalisation)
    tower A (SigLIP-like, per frame): 14x14 patch Conv, LayerNorm, GELU MLP -> [clips, 4, g, g, 24]
    tower B (InternVideo2-like, per clip): back to [0, 1], ImageNet normalisation, bilinear resize
      to S*3/4, a (1, 14, 14) Conv3d over [C, T, H, W] -> [clips, 16, 4, g', g'] plus learned
      space-time positions (so frame order changes the tokens), then trilinear
      (align_corners=False) to (4, g, g), as the hybrid tower brings every grid to the largest
    concatenated on channels (A first) and flattened -> [clips, 4*g*g, 40]
    connector: Linear, GELU, Linear to the LLM width, then a Perceiver resampler of one layer
      (WeightedNorm = LayerNorm times a learned vector; queries from the latents, keys and values
      from [context; latents]; grouped-query attention; SwiGLU) and a final WeightedNorm
  -> visual_tokens f32 [clips, 32, hidden]: 32 tokens a clip of 4 frames, whatever happened in it

S = 56, g = 4, g' = 3 here; the real Apollo-3B is S = 384, SigLIP 27x27 and InternVideo2 16x16.
`reference_clip` below is the same computation in plain numpy, written from the description and not
from the graph: `check.py` compares the two, and the runtime's tests compare their encoder output
with it.

    python3 engines/apollo/generate.py [--out engines/apollo/model] [--seed 0]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _load_tiny():
    """engines/tiny/generate.py, under its own module name (both scripts are `generate.py`)."""
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "tiny" / "generate.py"
    spec = importlib.util.spec_from_file_location("edgevlm_tiny_generate", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


tiny = _load_tiny()  # the tiny model's graph helpers, decoder and tokenizer

SCRIPT_VERSION = "1"


@dataclass(frozen=True)
class ClipConfig:
    image_size: int = 56
    clip_frames: int = 4
    clip_secs: float = 2.0
    clip_tokens: int = 32
    patch: int = 14
    a_width: int = 24
    b_size: int = 42
    b_width: int = 16
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 16
    ff_multi: int = 2
    ln_eps: float = 1e-5

    @property
    def grid(self) -> int:
        return self.image_size // self.patch

    @property
    def b_grid(self) -> int:
        return self.b_size // self.patch


# SigLIP's normalisation is the graph input's; InternVideo2's is ImageNet's (docs/REFERENCE.md §2).
SIGLIP_MEAN, SIGLIP_STD = 0.5, 0.5
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)

SPECIAL_TOKENS = [
    ("endoftext", "<|endoftext|>"),
    ("im_start", "<|im_start|>"),
    ("im_end", "<|im_end|>"),
    ("image", "<|video_token|>"),
]

CHAT_TEMPLATE = [
    ("system_prefix", "<|im_start|>system\n"),
    ("user_prefix", "<|im_start|>user\n"),
    ("assistant_prefix", "<|im_start|>assistant\n"),
    ("turn_end", "<|im_end|>\n"),
    ("default_system", "You are a helpful vision-language assistant."),
]


def weights(cc: ClipConfig, hidden: int, w: tiny.Weights) -> dict[str, np.ndarray]:
    """Every vision tensor by name, drawn from its own seeded stream."""
    p, ca, cb, d = cc.patch, cc.a_width, cc.b_width, hidden
    inner = cc.heads * cc.head_dim
    kv = cc.kv_heads * cc.head_dim
    t: dict[str, np.ndarray] = {}

    def lin(name, n_in, n_out, bias=True, std=None):
        t[f"{name}.weight"] = w.normal(f"{name}.weight", (n_in, n_out), std or 1.0 / np.sqrt(n_in))
        if bias:
            t[f"{name}.bias"] = w.normal(f"{name}.bias", (n_out,), 0.02)

    def ln(name, size):
        t[f"{name}.weight"] = w.norm_weight(f"{name}.weight", size)
        t[f"{name}.bias"] = w.normal(f"{name}.bias", (size,), 0.02)

    def wn(name, size):
        ln(f"{name}.norm", size)
        t[f"{name}.scale"] = w.norm_weight(f"{name}.scale", size)

    t["a.patch.weight"] = w.normal("a.patch.weight", (ca, 3, p, p), 1.0 / np.sqrt(3 * p * p))
    t["a.patch.bias"] = w.normal("a.patch.bias", (ca,), 0.02)
    ln("a.norm", ca)
    lin("a.mlp.fc1", ca, 2 * ca)
    lin("a.mlp.fc2", 2 * ca, ca)
    t["b.patch.weight"] = w.normal("b.patch.weight", (cb, 3, 1, p, p), 1.0 / np.sqrt(3 * p * p))
    t["b.patch.bias"] = w.normal("b.patch.bias", (cb,), 0.02)
    t["b.pos"] = w.normal("b.pos", (cb, cc.clip_frames, cc.b_grid, cc.b_grid), 0.5)
    lin("connector.proj.0", ca + cb, d)
    lin("connector.proj.2", d, d)
    t["connector.latents"] = w.normal("connector.latents", (cc.clip_tokens, d), 1.0)
    wn("connector.layer.wn1", d)
    wn("connector.layer.wn2", d)
    lin("connector.layer.q_proj", d, inner, bias=False)
    lin("connector.layer.k_proj", d, kv, bias=False)
    lin("connector.layer.v_proj", d, kv, bias=False)
    lin("connector.layer.o_proj", inner, d, bias=False)
    wn("connector.layer.wn3", d)
    lin("connector.layer.gate", d, d * cc.ff_multi, bias=False)
    lin("connector.layer.up", d, d * cc.ff_multi, bias=False)
    lin("connector.layer.down", d * cc.ff_multi, d, bias=False)
    wn("connector.norm", d)
    return t


# --------------------------------------------------------------------------------------------------
# The ONNX graph


def build_vision(cc: ClipConfig, hidden: int, t: dict[str, np.ndarray]) -> onnx.ModelProto:
    g = tiny.Graph()
    s, f, p, gs, gb = cc.image_size, cc.clip_frames, cc.patch, cc.grid, cc.b_grid
    ca, cb, d = cc.a_width, cc.b_width, hidden
    names = set()

    def W(name):
        if name not in names:
            names.add(name)
            g.weight(name, t[name])
        return name

    def lin(x, name, bias=True):
        y = g.op("MatMul", x, W(f"{name}.weight"))
        return g.op("Add", y, W(f"{name}.bias")) if bias else y

    def ln(x, name, eps):
        return g.op("LayerNormalization", x, W(f"{name}.weight"), W(f"{name}.bias"), axis=-1, epsilon=eps)

    def wn(x, name):
        return g.op("Mul", ln(x, f"{name}.norm", cc.ln_eps), W(f"{name}.scale"))

    shape = g.op("Shape", "pixel_values")
    clips = tiny.dim(g, shape, 0)
    clips1 = g.op("Unsqueeze", clips, g.i64([0]))

    with g.scope("tower_a"):
        frames = g.op("Reshape", "pixel_values", g.i64([-1, 3, s, s]))  # [clips*F, 3, S, S]
        x = g.op("Conv", frames, W("a.patch.weight"), W("a.patch.bias"), kernel_shape=[p, p], strides=[p, p])
        x = g.op("Transpose", g.op("Reshape", x, g.i64([0, ca, -1])), perm=[0, 2, 1])  # [cF, g*g, ca]
        x = ln(x, "a.norm", cc.ln_eps)
        x = g.op("Add", x, lin(tiny.gelu(g, lin(x, "a.mlp.fc1")), "a.mlp.fc2"))
        a = g.op("Reshape", x, g.op("Concat", clips1, g.i64([f, gs, gs, ca]), axis=0))  # [clips, F, g, g, ca]

    with g.scope("tower_b"):
        x01 = g.op("Add", g.op("Mul", frames, g.f32(SIGLIP_STD)), g.f32(SIGLIP_MEAN))
        xn = g.op("Div", g.op("Sub", x01, g.f32(IMAGENET_MEAN.reshape(3, 1, 1))), g.f32(IMAGENET_STD.reshape(3, 1, 1)))
        sizes = g.op("Concat", g.op("Slice", g.op("Shape", xn), g.i64([0]), g.i64([2])), g.i64([cc.b_size, cc.b_size]), axis=0)
        xr = g.op("Resize", xn, "", "", sizes, mode="linear", coordinate_transformation_mode="half_pixel")
        # [clips*F, 3, b, b] -> [clips, 3, F, b, b]: the clip as a video, (C, T, H, W).
        v = g.op("Transpose", g.op("Reshape", xr, g.op("Concat", clips1, g.i64([f, 3, cc.b_size, cc.b_size]), axis=0)),
                 perm=[0, 2, 1, 3, 4])
        y = g.op("Conv", v, W("b.patch.weight"), W("b.patch.bias"), kernel_shape=[1, p, p], strides=[1, p, p])
        # Space-time positions (InternVideo2's): the only place frame order enters the tokens.
        y = g.op("Add", y, W("b.pos"))
        # [clips, cb, F, g', g'] -> trilinear to (F, g, g), channels first as the hybrid tower does.
        sizes3 = g.op("Concat", clips1, g.i64([cb, f, gs, gs]), axis=0)
        y = g.op("Resize", y, "", "", sizes3, mode="linear", coordinate_transformation_mode="half_pixel")
        b = g.op("Transpose", y, perm=[0, 2, 3, 4, 1])  # [clips, F, g, g, cb]

    with g.scope("connector"):
        x = g.op("Concat", a, b, axis=-1)
        x = g.op("Reshape", x, g.op("Concat", clips1, g.i64([f * gs * gs, ca + cb]), axis=0))
        ctx = lin(tiny.gelu(g, lin(x, "connector.proj.0")), "connector.proj.2")  # [clips, N, d]
        lat = g.op("Expand", W("connector.latents"),
                   g.op("Concat", clips1, g.i64([cc.clip_tokens, d]), axis=0))  # [clips, L, d]
        l = wn(lat, "connector.layer.wn1")
        c = wn(ctx, "connector.layer.wn2")
        kv_in = g.op("Concat", c, l, axis=1)
        q = tiny.split_heads(g, lin(l, "connector.layer.q_proj", False), cc.heads, cc.head_dim)
        k = tiny.split_heads(g, lin(kv_in, "connector.layer.k_proj", False), cc.kv_heads, cc.head_dim)
        v_ = tiny.split_heads(g, lin(kv_in, "connector.layer.v_proj", False), cc.kv_heads, cc.head_dim)
        rep = cc.heads // cc.kv_heads
        k, v_ = (g.op("Reshape", g.op("Tile", g.op("Unsqueeze", z, g.i64([2])), g.i64([1, 1, rep, 1, 1])),
                      g.i64([0, cc.heads, -1, cc.head_dim])) for z in (k, v_))
        attn = tiny.merge_heads(g, g.op("MatMul", tiny.attention_probs(g, q, k, cc.head_dim, None), v_),
                                cc.heads * cc.head_dim)
        lat = g.op("Add", lat, lin(attn, "connector.layer.o_proj", False))
        h = wn(lat, "connector.layer.wn3")
        gate = lin(h, "connector.layer.gate", False)
        act = g.op("Mul", g.op("Mul", gate, g.op("Sigmoid", gate)), lin(h, "connector.layer.up", False))
        lat = g.op("Add", lat, lin(act, "connector.layer.down", False))
        out = wn(lat, "connector.norm")
    g.op("Identity", out, outputs=["visual_tokens"])
    inputs = [helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["num_clips", f, 3, s, s])]
    outputs = [helper.make_tensor_value_info("visual_tokens", TensorProto.FLOAT, ["num_clips", cc.clip_tokens, d])]
    return g.model("vision_encoder", inputs, outputs,
                   "edgevlm tiny Apollo clip encoder: two towers, concatenated, Perceiver resampler")


# --------------------------------------------------------------------------------------------------
# The same computation in numpy (the oracle)


def _gelu(x):
    from math import erf
    return 0.5 * x * (1.0 + np.vectorize(erf)(x / np.sqrt(2.0)))


def _ln(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def _linear_weights(n_in: int, n_out: int) -> np.ndarray:
    """[n_out, n_in] interpolation matrix of 1-D linear resampling, half-pixel centres, no antialias."""
    m = np.zeros((n_out, n_in))
    for o in range(n_out):
        x = (o + 0.5) * n_in / n_out - 0.5
        x = min(max(x, 0.0), n_in - 1)
        i0 = int(np.floor(x))
        i1 = min(i0 + 1, n_in - 1)
        m[o, i0] += 1.0 - (x - i0)
        m[o, i1] += x - i0
    return m


def reference_clip(cc: ClipConfig, hidden: int, t: dict[str, np.ndarray], pixels: np.ndarray) -> np.ndarray:
    """pixel_values [clips, F, 3, S, S] -> visual tokens [clips, clip_tokens, hidden], in float64."""
    t = {k: v.astype(np.float64) for k, v in t.items()}
    x = pixels.astype(np.float64)
    nc, f, _, s, _ = x.shape
    p, gs = cc.patch, cc.grid
    out = []
    for clip in x:
        # Tower A: each frame on its own.
        a = np.zeros((f, gs, gs, cc.a_width))
        for fi, frame in enumerate(clip):
            for i in range(gs):
                for j in range(gs):
                    patch = frame[:, i * p:(i + 1) * p, j * p:(j + 1) * p]
                    a[fi, i, j] = np.einsum("chw,ochw->o", patch, t["a.patch.weight"]) + t["a.patch.bias"]
        a = _ln(a, t["a.norm.weight"], t["a.norm.bias"], cc.ln_eps)
        a = a + _gelu(a @ t["a.mlp.fc1.weight"] + t["a.mlp.fc1.bias"]) @ t["a.mlp.fc2.weight"] + t["a.mlp.fc2.bias"]
        # Tower B: the clip as a video at its own size and normalisation.
        x01 = clip * SIGLIP_STD + SIGLIP_MEAN
        xn = (x01 - IMAGENET_MEAN.reshape(3, 1, 1)) / IMAGENET_STD.reshape(3, 1, 1)
        r = _linear_weights(s, cc.b_size)
        xr = np.einsum("oh,fchw,pw->fcop", r, xn, r)
        gb = cc.b_grid
        y = np.zeros((f, gb, gb, cc.b_width))
        for fi in range(f):
            for i in range(gb):
                for j in range(gb):
                    patch = xr[fi, :, i * p:(i + 1) * p, j * p:(j + 1) * p]
                    y[fi, i, j] = (np.einsum("chw,ochw->o", patch, t["b.patch.weight"][:, :, 0])
                                   + t["b.patch.bias"] + t["b.pos"][:, fi, i, j])
        rt, rs = _linear_weights(f, f), _linear_weights(gb, gs)
        b = np.einsum("tf,fijc,ai,bj->tabc", rt, y, rs, rs)
        ctx = np.concatenate([a, b], axis=-1).reshape(f * gs * gs, -1)
        ctx = _gelu(ctx @ t["connector.proj.0.weight"] + t["connector.proj.0.bias"])
        ctx = ctx @ t["connector.proj.2.weight"] + t["connector.proj.2.bias"]

        def wn(z, name):
            return _ln(z, t[f"{name}.norm.weight"], t[f"{name}.norm.bias"], cc.ln_eps) * t[f"{name}.scale"]

        lat = t["connector.latents"].copy()
        l_ = wn(lat, "connector.layer.wn1")
        c_ = wn(ctx, "connector.layer.wn2")
        kv_in = np.concatenate([c_, l_], axis=0)
        q = (l_ @ t["connector.layer.q_proj.weight"]).reshape(-1, cc.heads, cc.head_dim)
        k = (kv_in @ t["connector.layer.k_proj.weight"]).reshape(-1, cc.kv_heads, cc.head_dim)
        v = (kv_in @ t["connector.layer.v_proj.weight"]).reshape(-1, cc.kv_heads, cc.head_dim)
        rep = cc.heads // cc.kv_heads
        heads = []
        for h in range(cc.heads):
            sc = q[:, h] @ k[:, h // rep].T / np.sqrt(cc.head_dim)
            sc = np.exp(sc - sc.max(-1, keepdims=True))
            sc /= sc.sum(-1, keepdims=True)
            heads.append(sc @ v[:, h // rep])
        lat = lat + np.concatenate(heads, axis=-1) @ t["connector.layer.o_proj.weight"]
        h_ = wn(lat, "connector.layer.wn3")
        gate = h_ @ t["connector.layer.gate.weight"]
        act = gate / (1.0 + np.exp(-gate)) * (h_ @ t["connector.layer.up.weight"])
        lat = lat + act @ t["connector.layer.down.weight"]
        out.append(wn(lat, "connector.norm"))
    return np.stack(out)


def load_weights(model_dir: Path) -> dict[str, np.ndarray]:
    m = onnx.load(str(model_dir / "vision_encoder.onnx"))
    return {i.name: numpy_helper.to_array(i) for i in m.graph.initializer if not i.name.startswith("const_")}


# --------------------------------------------------------------------------------------------------
# Manifest and files


def build_manifest(cfg: tiny.Config, cc: ClipConfig, seed: int, special_ids: dict[str, int],
                   hashes: dict[str, str]) -> str:
    lines = [
        "# Generated by engines/apollo/generate.py; regenerate rather than edit (see engines/apollo/README.md).",
        'family = "apollo"',
        "",
        "[files]",
        'vision_encoder = "vision_encoder.onnx"',
        'embed_tokens = "embed_tokens.onnx"',
        'decoder = "decoder_model_merged.onnx"',
        'tokenizer = "tokenizer.json"',
        "",
        "[vision]",
        'layout = "clips"',
        f"image_size = {cc.image_size}",
        f"clip_frames = {cc.clip_frames}",
        f"clip_secs = {cc.clip_secs}",
        f"clip_tokens = {cc.clip_tokens}",
        f"patch_size = {cc.patch}",
        "merge_size = 2",
        f"mean = [{SIGLIP_MEAN}, {SIGLIP_MEAN}, {SIGLIP_MEAN}]",
        f"std = [{SIGLIP_STD}, {SIGLIP_STD}, {SIGLIP_STD}]",
        'input = "pixel_values"',
        'output = "visual_tokens"',
        f"encoder_hidden_size = {cc.a_width + cc.b_width}",
        "encoder_layers = 1",
        f"encoder_heads = {cc.heads}",
        "",
        *tiny.text_lines(cfg),
        "",
        "[special_tokens]",
        *(f"{key} = {special_ids[key]}" for key, _ in SPECIAL_TOKENS),
        'image_literal = "<|video_token|>"',
        "",
        "[chat_template]",
        *(f"{key} = {tiny.toml_str(value)}" for key, value in CHAT_TEMPLATE),
        "stream_timestamps = true",
        "",
        "[generator]",
        'script = "engines/apollo/generate.py"',
        f'script_version = "{SCRIPT_VERSION}"',
        f"seed = {seed}",
        f"opset = {tiny.OPSET}",
        "",
        "[generator.sha256]",
        *(f'"{name}" = "{digest}"' for name, digest in sorted(hashes.items())),
        "",
    ]
    return "\n".join(lines)


def generate(out: Path, seed: int, cfg: tiny.Config = tiny.Config(), cc: ClipConfig = ClipConfig()) -> dict[str, str]:
    out.mkdir(parents=True, exist_ok=True)
    w = tiny.Weights(seed)
    tiny.save(build_vision(cc, cfg.hidden, weights(cc, cfg.hidden, w)), out / "vision_encoder.onnx")
    tiny.save(tiny.build_embed_tokens(cfg, w), out / "embed_tokens.onnx")
    tiny.save(tiny.build_decoder(cfg, w), out / "decoder_model_merged.onnx")
    tokenizer, special_ids = tiny.build_tokenizer(cfg, SPECIAL_TOKENS)
    (out / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    names = ["vision_encoder.onnx", "embed_tokens.onnx", "decoder_model_merged.onnx", "tokenizer.json"]
    hashes = {name: hashlib.sha256((out / name).read_bytes()).hexdigest() for name in names}
    (out / "manifest.toml").write_text(build_manifest(cfg, cc, seed, special_ids, hashes), encoding="utf-8")
    return hashes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "model",
                        help="output directory (default: engines/apollo/model)")
    parser.add_argument("--seed", type=int, default=0, help="weight seed (default: 0)")
    args = parser.parse_args()
    if not 0 <= args.seed < 2**32:
        parser.error("--seed must be in 0..2^32-1 (it seeds numpy's RandomState)")
    for name, digest in generate(args.out, args.seed).items():
        print(f"{args.out / name}  {(args.out / name).stat().st_size:>8} bytes  sha256 {digest}")
    print(f"{args.out / 'manifest.toml'}")


if __name__ == "__main__":
    main()
