#!/usr/bin/env python3
"""Export a VideoLLaMA3 checkpoint (Hugging Face "remote code" format) to edgevlm's engine contract.

    pip install -r engines/videollama3/requirements.txt
    python engines/videollama3/export.py DAMO-NLP-SG/VideoLLaMA3-2B --out engines/videollama3/model
    edgevlm engines check engines/videollama3/model

NOT RUN in the edgevlm repository (no weights, no torch there): see docs/ENGINES.md, "What was and
was not run". It is written to check itself on the machine that runs it: the vision encoder below is
our re-implementation (frames as the batch, so attention can never cross frames and any height and
width exports), and the script compares it with the checkpoint's own encoder and projector on two
frames before writing anything; the decoder export is compared with the checkpoint's forward pass.
Module names it relies on are listed in NAMES; if the checkpoint differs it stops and prints what it
found.

Writes to --out (DESIGN §4.4, docs/ENGINES.md):
  vision_encoder.onnx        pixel_values f32 [T, 3, H, W] -> visual_tokens f32 [T, (H/28)*(W/28), hidden]
  embed_tokens.onnx          input_ids i64 [1, S] -> inputs_embeds f32 [1, S, hidden]
  decoder_model_merged.onnx  inputs_embeds, attention_mask, position_ids, past_key_values.{i}.key|value
                             -> logits, present.{i}.key|value  (weights in *.onnx.data next to it)
  tokenizer.json, manifest.toml (with sha256 of each file)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoTokenizer

# Attribute paths inside the remote-code model (modeling_videollama3*.py). SigLIP naming.
NAMES = {
    "llm": "model",                          # Qwen2Model (the causal LM's body)
    "lm_head": "lm_head",
    "vision": "model.vision_encoder",        # Videollama3VisionEncoderModel
    "projector": "model.mm_projector",       # mlp2x_gelu
    "patch_embed": "embeddings.patch_embedding",
    "layers": "encoder.layers",
    "post_norm": "post_layernorm",
}
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<|stream_start|>", "<|stream_end|>"]
OPSET = 17


def get(obj, path: str):
    for part in path.split("."):
        if not hasattr(obj, part):
            children = [n for n, _ in obj.named_children()]
            raise SystemExit(f"export.py: `{path}` not found at `{part}`; children here: {children}. "
                             "Update NAMES for this checkpoint.")
        obj = getattr(obj, part)
    return obj


# --------------------------------------------------------------------------------------------------
# Vision: our per-frame encoder over the checkpoint's weights


def rotary(hp: torch.Tensor, wp: torch.Tensor, head_dim: int, theta: float = 10000.0):
    """Qwen2-VL 2-D rotary: a quarter of the frequencies follow the row, a quarter the column."""
    dim = head_dim // 2
    inv = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    n = torch.arange(hp * wp)
    row, col = (n // wp).float()[:, None], (n % wp).float()[:, None]
    rot = torch.cat([row * inv, col * inv], dim=-1)
    emb = torch.cat([rot, rot], dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat([-b, a], dim=-1)


class VisionExport(torch.nn.Module):
    """[T, 3, H, W] normalised frames -> [T, (H/28)*(W/28), llm hidden].

    Attention runs per frame (frames are the batch), which is what the reference's flash-attention
    path computes with one cu_seqlens segment per frame (REFERENCE §3.10). Tokens stay in raster
    order: full attention is order-free given each patch's (row, column) rotary position.
    """

    def __init__(self, vision, projector, merge: int = 2):
        super().__init__()
        self.patch = get(vision, NAMES["patch_embed"])
        self.layers = get(vision, NAMES["layers"])
        self.post_norm = get(vision, NAMES["post_norm"])
        self.projector = projector
        self.merge = merge
        attn = self.layers[0].self_attn
        self.heads = attn.num_heads
        self.head_dim = attn.head_dim

    def forward(self, pixel_values):
        x = self.patch(pixel_values)                           # [T, C, Hp, Wp]; Conv2d stride 14
        t, c, hp, wp = x.shape
        x = x.flatten(2).transpose(1, 2)                       # [T, N, C]
        cos, sin = rotary(hp, wp, self.head_dim)
        for layer in self.layers:
            h = layer.layer_norm1(x)
            a = layer.self_attn
            q, k, v = (p(h).view(t, -1, self.heads, self.head_dim).transpose(1, 2)
                       for p in (a.q_proj, a.k_proj, a.v_proj))
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            o = F.scaled_dot_product_attention(q, k, v)        # full attention within the frame
            x = x + a.out_proj(o.transpose(1, 2).reshape(t, -1, c))
            x = x + layer.mlp(layer.layer_norm2(x))
        x = self.post_norm(x)
        x = x.transpose(1, 2).reshape(t, c, hp, wp)
        x = F.avg_pool2d(x, self.merge)                        # == bilinear /2, align_corners=False
        x = x.flatten(2).transpose(1, 2)                       # raster order of the merged grid
        return self.projector(x)


def reference_tokens(vision, projector, frame: torch.Tensor, merge: int = 2) -> torch.Tensor:
    """The checkpoint's own path for one frame: processor row layout, its encoder, its projector."""
    _, h, w = frame.shape
    p = 14
    rows = (frame.view(3, h // (p * merge), merge, p, w // (p * merge), merge, p)
            .permute(1, 4, 2, 5, 0, 3, 6)                      # (hb, wb, mh, mw, C, py, px)
            .reshape(-1, 3 * p * p))
    grid = torch.tensor([[1, h // p, w // p]])
    feats = vision(rows, grid, torch.tensor([merge]))
    return projector(feats)


# --------------------------------------------------------------------------------------------------
# Text: embedding and the decoder with its KV cache


class EmbedExport(torch.nn.Module):
    def __init__(self, embed):
        super().__init__()
        self.embed = embed

    def forward(self, input_ids):
        return self.embed(input_ids)


class DecoderExport(torch.nn.Module):
    """The contract's decoder: past tensors in, present tensors out, causality by cache index."""

    def __init__(self, llm, lm_head, layers: int):
        super().__init__()
        self.llm, self.lm_head, self.layers = llm, lm_head, layers

    def forward(self, inputs_embeds, attention_mask, position_ids, *past):
        from transformers import DynamicCache

        cache = DynamicCache()
        for i in range(self.layers):
            cache.update(past[2 * i], past[2 * i + 1], i)
        p = past[0].shape[2]
        out = self.llm(inputs_embeds=inputs_embeds, attention_mask=attention_mask,
                       position_ids=position_ids, past_key_values=cache, use_cache=True,
                       cache_position=torch.arange(inputs_embeds.shape[1]) + p)
        present = []
        for i in range(self.layers):
            present += [out.past_key_values.key_cache[i], out.past_key_values.value_cache[i]]
        return (self.lm_head(out.last_hidden_state), *present)


# --------------------------------------------------------------------------------------------------


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint", help="hub id or local directory, e.g. DAMO-NLP-SG/VideoLLaMA3-2B")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--max-context", type=int, default=16384,
                    help="positions the runtime may use (the checkpoint allows more; the KV cache grows with it)")
    args = ap.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)

    # eager attention: exports to plain ONNX ops (flash-attn does not export).
    model = AutoModelForCausalLM.from_pretrained(args.checkpoint, trust_remote_code=True,
                                                 torch_dtype=torch.float32, attn_implementation="eager")
    model.eval()
    cfg = model.config
    tok = AutoTokenizer.from_pretrained(args.checkpoint, trust_remote_code=True)
    ids = {s: tok.convert_tokens_to_ids(s) for s in SPECIALS}
    missing = [s for s, i in ids.items() if i is None or i == tok.unk_token_id]
    if missing:
        raise SystemExit(f"export.py: the tokenizer lacks {missing}; is this a VideoLLaMA3 (not -HF) checkpoint?")
    pre = json.loads(Path(tok.name_or_path, "preprocessor_config.json").read_text()) \
        if Path(tok.name_or_path, "preprocessor_config.json").exists() else {}
    mean, std = pre.get("image_mean", [0.5] * 3), pre.get("image_std", [0.5] * 3)

    vision, projector = get(model, NAMES["vision"]), get(model, NAMES["projector"])
    llm, lm_head = get(model, NAMES["llm"]), get(model, NAMES["lm_head"])
    vis = VisionExport(vision, projector).eval()
    hidden, layers = cfg.hidden_size, cfg.num_hidden_layers
    heads, kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
    head_dim = getattr(cfg, "head_dim", None) or hidden // heads

    with torch.no_grad():
        # 1. Our vision encoder against the checkpoint's, per frame, at a non-square geometry.
        frames = torch.rand(2, 3, 196, 336) * 2 - 1
        ours = vis(frames)
        for i in range(2):
            ref = reference_tokens(vision, projector, frames[i])
            d = (ours[i] - ref).abs().max().item()
            print(f"vision frame {i}: max |ours - checkpoint| = {d:.2e}")
            if d > 1e-3:
                raise SystemExit("export.py: the per-frame encoder disagrees with the checkpoint; not exporting")
        torch.onnx.export(vis, (frames,), out / "vision_encoder.onnx", opset_version=OPSET,
                          input_names=["pixel_values"], output_names=["visual_tokens"],
                          dynamic_axes={"pixel_values": {0: "num_frames", 2: "height", 3: "width"},
                                        "visual_tokens": {0: "num_frames", 1: "num_visual_tokens"}})

        embed = EmbedExport(llm.embed_tokens).eval()
        sample_ids = torch.tensor([[ids["<|im_start|>"], 872, 198]])
        torch.onnx.export(embed, (sample_ids,), out / "embed_tokens.onnx", opset_version=OPSET,
                          input_names=["input_ids"], output_names=["inputs_embeds"],
                          dynamic_axes={"input_ids": {0: "batch_size", 1: "sequence_length"},
                                        "inputs_embeds": {0: "batch_size", 1: "sequence_length"}})

        # 2. The decoder, traced with a non-empty past so both lengths stay symbolic.
        dec = DecoderExport(llm, lm_head, layers).eval()
        p, s = 5, 3
        past = [torch.randn(1, kv_heads, p, head_dim) for _ in range(2 * layers)]
        emb = torch.randn(1, s, hidden)
        mask = torch.ones(1, p + s, dtype=torch.int64)
        pos = torch.arange(p, p + s)[None]
        names_in = ["inputs_embeds", "attention_mask", "position_ids"]
        names_out = ["logits"]
        axes = {"inputs_embeds": {0: "batch_size", 1: "sequence_length"},
                "attention_mask": {0: "batch_size", 1: "total_sequence_length"},
                "position_ids": {0: "batch_size", 1: "sequence_length"},
                "logits": {0: "batch_size", 1: "sequence_length"}}
        for i in range(layers):
            for kind in ("key", "value"):
                names_in.append(f"past_key_values.{i}.{kind}")
                names_out.append(f"present.{i}.{kind}")
                axes[names_in[-1]] = {0: "batch_size", 2: "past_sequence_length"}
                axes[names_out[-1]] = {0: "batch_size", 2: "total_sequence_length"}
        torch.onnx.export(dec, (emb, mask, pos, *past), out / "decoder_model_merged.onnx",
                          opset_version=OPSET, input_names=names_in, output_names=names_out,
                          dynamic_axes=axes)  # > 2 GB: torch writes the weights as external data

        # 3. The exported decoder against the checkpoint's forward pass (same inputs).
        import onnxruntime as ort
        sess = ort.InferenceSession(str(out / "decoder_model_merged.onnx"), providers=["CPUExecutionProvider"])
        feed = {n: t.numpy() for n, t in zip(names_in, (emb, mask, pos, *past))}
        got = sess.run(["logits"], feed)[0]
        want = dec(emb, mask, pos, *past)[0].numpy()
        d = float(abs(got - want).max())
        print(f"decoder: max |onnx - torch| logits = {d:.2e}")
        if d > 1e-2:
            raise SystemExit("export.py: the exported decoder disagrees with torch")

    tok.backend_tokenizer.save(str(out / "tokenizer.json"))
    files = ["vision_encoder.onnx", "embed_tokens.onnx", "decoder_model_merged.onnx", "tokenizer.json"]
    hashes = {f: sha256(out / f) for f in files}
    # TOML basic strings accept JSON's string escapes.
    chat = {k: json.dumps(v) for k, v in {
        "system_prefix": "<|im_start|>system\n", "user_prefix": "<|im_start|>user\n",
        "assistant_prefix": "<|im_start|>assistant\n", "turn_end": "<|im_end|>\n",
        "stream_prefix": "<|stream_start|>stream\n", "stream_end": "<|stream_end|>\n",
        "default_system": "You are a helpful assistant.", "source": args.checkpoint}.items()}
    manifest = f"""# Written by engines/videollama3/export.py from {args.checkpoint}.
family = "videollama3"

[files]
vision_encoder = "vision_encoder.onnx"
embed_tokens = "embed_tokens.onnx"
decoder = "decoder_model_merged.onnx"
tokenizer = "tokenizer.json"

[vision]
patch_size = 14
merge_size = 2
mean = {[float(x) for x in mean]}
std = {[float(x) for x in std]}
input = "pixel_values"
output = "visual_tokens"
encoder_layers = {len(vis.layers)}
encoder_heads = {vis.heads}

[text]
hidden_size = {hidden}
num_layers = {layers}
num_heads = {heads}
num_kv_heads = {kv_heads}
head_dim = {head_dim}
intermediate_size = {cfg.intermediate_size}
vocab_size = {lm_head.out_features}
max_context = {min(args.max_context, cfg.max_position_embeddings)}
rope_theta = {float(cfg.rope_theta)}
rms_norm_eps = {float(cfg.rms_norm_eps)}
dtype = "float32"
input_ids = "input_ids"
inputs_embeds = "inputs_embeds"
attention_mask = "attention_mask"
position_ids = "position_ids"
past_key = "past_key_values.{{i}}.key"
past_value = "past_key_values.{{i}}.value"
present_key = "present.{{i}}.key"
present_value = "present.{{i}}.value"
logits = "logits"

[special_tokens]
endoftext = {ids["<|endoftext|>"]}
im_start = {ids["<|im_start|>"]}
im_end = {ids["<|im_end|>"]}
image = {ids["<image>"]}
stream_start = {ids["<|stream_start|>"]}
stream_end = {ids["<|stream_end|>"]}

[chat_template]
system_prefix = {chat["system_prefix"]}
user_prefix = {chat["user_prefix"]}
assistant_prefix = {chat["assistant_prefix"]}
turn_end = {chat["turn_end"]}
stream_prefix = {chat["stream_prefix"]}
stream_end = {chat["stream_end"]}
default_system = {chat["default_system"]}

[generator]
script = "engines/videollama3/export.py"
script_version = "1"
source = {chat["source"]}
opset = {OPSET}

[generator.sha256]
""" + "".join(f'"{f}" = "{h}"\n' for f, h in hashes.items())
    (out / "manifest.toml").write_text(manifest)
    print(f"wrote {out}; next: edgevlm engines check {out}")


if __name__ == "__main__":
    main()
