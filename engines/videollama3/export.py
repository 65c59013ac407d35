#!/usr/bin/env python3
"""Export a transformers-native VideoLLaMA3 checkpoint to edgevlm's engine contract.

    scripts/setup-export.sh                                  # .venv-export: torch, transformers, onnx
    .venv-export/bin/python engines/videollama3/export.py CHECKPOINT_DIR --out engines/videollama3/model
    target/release/edgevlm engines check engines/videollama3/model

CHECKPOINT_DIR is a local copy of a transformers-native checkpoint (`lkhl/VideoLLaMA3-2B-Image-HF`,
`lkhl/VideoLLaMA3-7B-Image-HF`, or the reduced one that engines/videollama3/reduced.py builds):
config.json, model.safetensors (or model.safetensors.index.json and its shards), tokenizer.json,
video_preprocessor_config.json (or preprocessor_config.json / processor_config.json) and
chat_template.jinja. Nothing is downloaded. The older remote-code checkpoints
(`DAMO-NLP-SG/VideoLLaMA3-*`, transformers 4.46, `trust_remote_code`) are not supported: their code
cannot be run or tested here, and the -HF checkpoints carry the same weights (docs/ENGINES.md).

Writes to --out (docs/ENGINES.md, "Model directories"):
  vision_encoder.onnx        pixel_values f32 [T, 3, H, W] -> visual_tokens f32 [T, (H/28)*(W/28), hidden]
  embed_tokens.onnx          input_ids i64 [1, S] -> inputs_embeds f32 [1, S, hidden]
  decoder_model_merged.onnx  inputs_embeds, attention_mask, position_ids, past_key_values.{i}.key|value
                             -> logits, present.{i}.key|value
  *.onnx.data                the weights of each graph as ONNX external data (always: a 7B
                             checkpoint's embedding alone is over protobuf's 2 GB limit)
  tokenizer.json, manifest.toml (the processor's geometry, normalisation and DiffFP settings read
  from the checkpoint's processor config; sha256 of every file)

Before writing the manifest the script proves each graph against the checkpoint's own modules:
the vision graph against `get_video_features` on the processor's patches at two geometries (frames
in one call, so per-frame attention is checked), the decoder against the checkpoint's forward pass
with and without a past, each within --tolerance, in torch and again in ONNX Runtime.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import struct
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

OPSET = 17
SCRIPT_VERSION = "3"
EXPECTED_ARCH = "VideoLlama3ForConditionalGeneration"
# Keys transformers' own config classes write; anything else is a checkpoint we have not seen.
EXTRA_TOP_KEYS = {"architectures", "transformers_version", "dtype", "torch_dtype", "_name_or_path",
                  "model_type", "auto_map", "use_cache", "pad_token_id", "bos_token_id", "eos_token_id",
                  "output_attentions", "output_hidden_states", "return_dict", "chunk_size_feed_forward",
                  "is_encoder_decoder", "id2label", "label2id", "problem_type", "tie_word_embeddings"}


class ExportError(SystemExit):
    """A problem with the checkpoint: printed as one line that says what was found and expected."""

    def __init__(self, message: str):
        super().__init__(f"export.py: {message}")


# --------------------------------------------------------------------------------------------------
# Checkpoint checks (before anything is loaded)


def check_safetensors(path: Path) -> int:
    """Validates a safetensors file's header and size; returns its parameter count."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ExportError(f"{path}: {size} bytes, too short for a safetensors header (truncated?)")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8 or n > 100 << 20:
            raise ExportError(f"{path}: header length {n} exceeds the file's {size} bytes (truncated?)")
        try:
            header = json.loads(f.read(n))
        except ValueError as e:
            raise ExportError(f"{path}: the safetensors header is not JSON ({e}); the file is corrupt")
    end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    if 8 + n + end != size:
        raise ExportError(f"{path}: {size} bytes, but its header describes {8 + n + end} bytes of "
                          f"tensors; the file is truncated or corrupt")
    return sum(int(np.prod(t["shape"])) for k, t in header.items() if k != "__metadata__")


def check_checkpoint(ckpt: Path) -> dict:
    if not ckpt.is_dir():
        raise ExportError(f"{ckpt} is not a directory; pass a local checkpoint directory (nothing is downloaded)")
    need = ["config.json", "tokenizer.json"]
    for name in need:
        if not (ckpt / name).is_file():
            raise ExportError(f"{ckpt / name} is missing; a transformers-native VideoLLaMA3 checkpoint has "
                              f"config.json, model.safetensors, tokenizer.json and the processor configs")
    if not any((ckpt / n).is_file() for n in ("video_preprocessor_config.json", "preprocessor_config.json",
                                              "processor_config.json")):
        raise ExportError(f"{ckpt}: no video_preprocessor_config.json, preprocessor_config.json or "
                          f"processor_config.json; the processor's geometry cannot be read")
    index = ckpt / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    elif (ckpt / "model.safetensors").is_file():
        shards = ["model.safetensors"]
    else:
        raise ExportError(f"{ckpt / 'model.safetensors'} is missing (nor is there a model.safetensors.index.json)")
    for shard in shards:
        if not (ckpt / shard).is_file():
            raise ExportError(f"{ckpt / shard} is missing (named by model.safetensors.index.json)")
        check_safetensors(ckpt / shard)

    cfg = json.loads((ckpt / "config.json").read_text())
    found = cfg.get("architectures")
    if found != [EXPECTED_ARCH] or cfg.get("model_type") != "video_llama_3":
        raise ExportError(f"{ckpt / 'config.json'}: architectures {found}, model_type {cfg.get('model_type')!r}; "
                          f"expected [{EXPECTED_ARCH!r}], 'video_llama_3' (a transformers-native VideoLLaMA3 "
                          f"checkpoint; remote-code DAMO-NLP-SG checkpoints are not supported)")
    from transformers import Qwen2Config, VideoLlama3Config, VideoLlama3VisionConfig

    def unknown(keys, known, where):
        extra = sorted(set(keys) - set(known) - EXTRA_TOP_KEYS)
        if extra:
            raise ExportError(f"{ckpt / 'config.json'}: unexpected {where} keys {extra}; expected only "
                              f"{sorted(set(known))} (a VideoLLaMA3 variant this recipe has not been checked on)")

    unknown(cfg, VideoLlama3Config().to_dict(), "top-level")
    text, vision = cfg.get("text_config") or {}, cfg.get("vision_config") or {}
    if text.get("model_type") != "qwen2":
        raise ExportError(f"{ckpt / 'config.json'}: text_config.model_type {text.get('model_type')!r}, expected 'qwen2'")
    unknown(text, Qwen2Config().to_dict(), "text_config")
    unknown(vision, VideoLlama3VisionConfig().to_dict(), "vision_config")
    for key, want in (("hidden_act", "silu"), ("use_sliding_window", False)):
        if text.get(key, want) != want:
            raise ExportError(f"{ckpt / 'config.json'}: text_config.{key} = {text.get(key)!r}, expected {want!r}")
    rope = (vision.get("rope_parameters") or {}).get("rope_type", "axial")
    if rope != "axial":
        raise ExportError(f"{ckpt / 'config.json'}: vision_config.rope_parameters.rope_type {rope!r}, expected 'axial'")
    return cfg


# --------------------------------------------------------------------------------------------------
# The three graphs, built from the checkpoint's own modules


class VisionExport(torch.nn.Module):
    """[T, 3, H, W] normalised frames -> [T, (H/28)*(W/28), llm hidden], one frame per batch row.

    The same arithmetic as `VideoLlama3Model.get_video_features` on the processor's patches: the
    patch rows in merge-block order (the processor's `patchify`), the checkpoint's patch embedding,
    its axial 2-D rotary over (row, column) patch positions, its encoder layers with attention
    inside each frame (the reference splits attention by frame the same way), post-layernorm, the
    2x2 bilinear `pixel_unshuffle`, and the projector. Frames are the batch, so any T, H and W run
    through one graph.
    """

    def __init__(self, model, merge: int):
        super().__init__()
        vm = model.model.vision_model
        self.embeddings, self.rotary = vm.embeddings, vm.rotary_pos_emb
        self.layers, self.post = vm.encoder.layers, vm.post_layernorm
        self.projector = model.model.projector
        self.p, self.m = vm.config.patch_size, merge
        self.heads = vm.config.num_attention_heads
        self.head_dim = vm.config.hidden_size // self.heads

    def forward(self, pixel_values):
        from transformers.models.video_llama_3.modeling_video_llama_3 import apply_rotary_pos_emb_vision

        t, c, h, w = pixel_values.shape
        p, m = self.p, self.m
        hb, wb = h // (p * m), w // (p * m)
        rows = (pixel_values.reshape(t, c, hb, m, p, wb, m, p)
                .permute(0, 2, 5, 3, 6, 1, 4, 7)                  # (t, hb, wb, mh, mw, C, py, px)
                .reshape(-1, c * p * p))
        x = self.embeddings(rows)
        d = x.shape[-1]
        n = hb * wb * m * m
        x = x.reshape(t, n, d)
        ar_hb = torch.arange(hb).reshape(hb, 1, 1, 1)
        ar_wb = torch.arange(wb).reshape(1, wb, 1, 1)
        ar_m = torch.arange(m)
        hpos = (ar_hb * m + ar_m.reshape(1, 1, m, 1)).expand(hb, wb, m, m).reshape(-1)
        wpos = (ar_wb * m + ar_m.reshape(1, 1, 1, m)).expand(hb, wb, m, m).reshape(-1)
        cos, sin = self.rotary(x, torch.stack([hpos, wpos], dim=-1))
        for layer in self.layers:
            a = layer.self_attn
            y = layer.layer_norm1(x)
            q = a.q_proj(y).reshape(t, n, self.heads, self.head_dim)
            k = a.k_proj(y).reshape(t, n, self.heads, self.head_dim)
            v = a.v_proj(y).reshape(t, n, self.heads, self.head_dim)
            q, k = apply_rotary_pos_emb_vision(q, k, cos, sin)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            att = torch.softmax(torch.matmul(q, k.transpose(2, 3)) * a.scaling, dim=-1, dtype=torch.float32)
            o = torch.matmul(att.to(q.dtype), v).transpose(1, 2).reshape(t, n, d)
            x = x + a.out_proj(o)
            x = x + layer.mlp(layer.layer_norm2(x))
        x = self.post(x)
        x = (x.reshape(t, hb, wb, m, m, d).permute(0, 1, 3, 2, 4, 5)
             .reshape(t, hb * m, wb * m, d).permute(0, 3, 1, 2))
        x = F.interpolate(x, size=(hb, wb), mode="bilinear")
        x = x.permute(0, 2, 3, 1).reshape(t, hb * wb, d)
        return self.projector(x)


class EmbedExport(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.embed = model.model.language_model.embed_tokens

    def forward(self, input_ids):
        return self.embed(input_ids)


class DecoderExport(torch.nn.Module):
    """The contract's decoder over the checkpoint's Qwen2 layers: past in, present out.

    Causality follows the cache index (new token j attends to positions 0..=P+j) and positions
    zeroed in `attention_mask` are masked out; `position_ids` drive only the rotary embedding,
    exactly as Qwen2's eager attention does with transformers' causal mask.
    """

    def __init__(self, model):
        super().__init__()
        lm = model.model.language_model
        self.layers, self.norm, self.rotary = lm.layers, lm.norm, lm.rotary_emb
        self.lm_head = model.lm_head
        cfg = lm.config
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads

    def forward(self, inputs_embeds, attention_mask, position_ids, *past):
        from transformers.models.qwen2.modeling_qwen2 import apply_rotary_pos_emb, repeat_kv

        b, s, _ = inputs_embeds.shape
        p = past[0].shape[2]
        cos, sin = self.rotary(inputs_embeds, position_ids)
        key_pos = torch.arange(p + s)
        query_pos = torch.arange(s) + p
        allowed = (key_pos[None, :] <= query_pos[:, None])[None] & (attention_mask[:, None, :] > 0)
        bias = torch.zeros(allowed.shape, dtype=inputs_embeds.dtype).masked_fill(
            ~allowed, torch.finfo(inputs_embeds.dtype).min)[:, None]
        x = inputs_embeds
        present = []
        for i, layer in enumerate(self.layers):
            a = layer.self_attn
            y = layer.input_layernorm(x)
            q = a.q_proj(y).reshape(b, s, self.heads, self.head_dim).transpose(1, 2)
            k = a.k_proj(y).reshape(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
            v = a.v_proj(y).reshape(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            k = torch.cat([past[2 * i], k], dim=2)
            v = torch.cat([past[2 * i + 1], v], dim=2)
            present += [k, v]
            rep = self.heads // self.kv_heads
            att = torch.matmul(q, repeat_kv(k, rep).transpose(2, 3)) * a.scaling + bias
            att = torch.softmax(att, dim=-1, dtype=torch.float32).to(q.dtype)
            o = torch.matmul(att, repeat_kv(v, rep)).transpose(1, 2).reshape(b, s, -1)
            x = x + a.o_proj(o)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return (self.lm_head(self.norm(x)), *present)


class Float32Interface(torch.nn.Module):
    """Runs a float16 module behind float32 inputs and outputs (the contract's interface dtype)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, *args):
        args = [a.half() if a.is_floating_point() else a for a in args]
        out = self.inner(*args)
        if isinstance(out, tuple):
            return tuple(o.float() for o in out)
        return out.float()


# --------------------------------------------------------------------------------------------------
# Writing


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def export_graph(module, args, path: Path, inputs, outputs, axes) -> list[str]:
    """Exports one graph with its weights as external data next to it; returns the files written."""
    import onnx

    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "graph.onnx"
        torch.onnx.export(module, args, raw, opset_version=OPSET, input_names=inputs,
                          output_names=outputs, dynamic_axes=axes, dynamo=False,
                          do_constant_folding=True)
        graph = onnx.load(str(raw), load_external_data=True)
    data = path.name + ".data"
    for stale in (path, path.with_name(data)):
        stale.unlink(missing_ok=True)
    onnx.save_model(graph, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=data, size_threshold=1024)
    return [path.name, data]


def decoder_io(layers: int) -> tuple[list[str], list[str], dict]:
    """The decoder's input and output names and dynamic axes (docs/ENGINES.md, "Model directories")."""
    names_in, names_out = ["inputs_embeds", "attention_mask", "position_ids"], ["logits"]
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
    return names_in, names_out, axes


def compare(name: str, got, want, tol: float) -> float:
    got = got.detach().float().numpy() if torch.is_tensor(got) else np.asarray(got, dtype=np.float32)
    want = want.detach().float().numpy() if torch.is_tensor(want) else np.asarray(want, dtype=np.float32)
    if got.shape != want.shape:
        raise ExportError(f"{name}: shape {got.shape}, expected {want.shape}")
    scale = float(np.abs(want).max()) or 1.0
    d = float(np.abs(got - want).max())
    print(f"  {name}: max |diff| {d:.2e} (max |value| {scale:.2e})")
    if not d <= tol * max(1.0, scale):
        raise ExportError(f"{name}: max |diff| {d:.3e} over the tolerance {tol:g} x max(1, {scale:.3g}); not exporting")
    return d


def video_processor_settings(processor) -> dict:
    vp = processor.video_processor
    size = dict(vp.size)
    if not size.get("shortest_edge") or not size.get("longest_edge"):
        raise ExportError(f"video processor size {size}: expected shortest_edge and longest_edge (pixels)")
    resample = int(vp.resample)
    if resample != 3:
        raise ExportError(f"video processor resample {resample}: only bicubic (3) is implemented by edgevlm's resize")
    if vp.temporal_patch_size != 1:
        raise ExportError(f"video processor temporal_patch_size {vp.temporal_patch_size}, expected 1")
    if not (vp.do_resize and vp.do_rescale and vp.do_normalize):
        raise ExportError("video processor with do_resize/do_rescale/do_normalize off is not supported")
    return {"min_pixels": int(size["shortest_edge"]), "max_pixels": int(size["longest_edge"]),
            "patch_size": int(vp.patch_size), "merge_size": int(vp.merge_size),
            "mean": [float(x) for x in vp.image_mean], "std": [float(x) for x in vp.image_std],
            "rescale_factor": float(vp.rescale_factor), "max_frames": int(vp.max_frames),
            "use_token_compression": bool(vp.use_token_compression)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint", type=Path, help="a local transformers-native VideoLLaMA3 checkpoint directory")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--dtype", choices=["float32", "float16"], default="float32",
                    help="weights and compute inside the graphs; inputs and outputs stay float32")
    ap.add_argument("--max-context", type=int, default=16384,
                    help="positions the runtime may use (the KV cache grows with it)")
    ap.add_argument("--tolerance", type=float, default=None,
                    help="largest |diff| accepted per unit of max |value| (default 1e-4 fp32, 3e-2 fp16)")
    ap.add_argument("--stream-timestamps", action="store_true",
                    help="the checkpoint was trained with its frame's time text in each stream item "
                         "(`Time 12.0s:`, engines/scenes); the reference's items have none")
    args = ap.parse_args()
    tol = args.tolerance if args.tolerance is not None else (1e-4 if args.dtype == "float32" else 3e-2)
    ckpt: Path = args.checkpoint
    cfg_json = check_checkpoint(ckpt)
    torch.manual_seed(0)

    from transformers import AutoProcessor, VideoLlama3ForConditionalGeneration
    from transformers.video_utils import VideoMetadata

    model = VideoLlama3ForConditionalGeneration.from_pretrained(ckpt, dtype=torch.float32,
                                                               attn_implementation="eager").eval()
    processor = AutoProcessor.from_pretrained(ckpt)
    tok = processor.tokenizer
    settings = video_processor_settings(processor)
    merge, patch = settings["merge_size"], settings["patch_size"]
    if patch != model.config.vision_config.patch_size:
        raise ExportError(f"processor patch_size {patch} but vision_config.patch_size {model.config.vision_config.patch_size}")

    literals = {"endoftext": "<|endoftext|>", "im_start": "<|im_start|>", "im_end": "<|im_end|>",
                "image": processor.video_token, "stream_start": "<|stream_start|>", "stream_end": "<|stream_end|>"}
    ids = {k: tok.convert_tokens_to_ids(v) for k, v in literals.items()}
    missing = [literals[k] for k, i in ids.items() if i is None or i == tok.unk_token_id]
    if missing:
        raise ExportError(f"{ckpt / 'tokenizer.json'} lacks {missing}; expected Qwen's chat tokens, "
                          f"{processor.video_token} and VideoLLaMA3's stream tokens")
    if ids["image"] != model.config.video_token_id:
        raise ExportError(f"{processor.video_token} is id {ids['image']} but config.video_token_id is {model.config.video_token_id}")

    text_cfg = model.config.text_config
    hidden, layers = text_cfg.hidden_size, text_cfg.num_hidden_layers
    heads, kv_heads = text_cfg.num_attention_heads, text_cfg.num_key_value_heads
    head_dim = getattr(text_cfg, "head_dim", None) or hidden // heads
    vocab = model.lm_head.out_features

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    vis, emb, dec = VisionExport(model, merge).eval(), EmbedExport(model).eval(), DecoderExport(model).eval()

    print("checking the graphs against the checkpoint's own modules (torch)")
    with torch.no_grad():
        # Vision: the processor's own patches of a random two-frame video at two geometries.
        for (h, w) in ((196, 336), (224, 168)):
            frames = torch.randint(0, 256, (2, 3, h, w), dtype=torch.uint8)
            meta = VideoMetadata(total_num_frames=2, fps=1.0, frames_indices=[0, 1])
            pv = processor.video_processor(videos=[frames], video_metadata=[meta], do_resize=False,
                                           return_tensors="pt")
            want = model.model.get_video_features(pv["pixel_values_videos"], pv["video_grid_thw"],
                                                  pv["video_merge_sizes"]).pooler_output[0]
            norm = (frames.float() * settings["rescale_factor"] - torch.tensor(settings["mean"])[:, None, None]) \
                / torch.tensor(settings["std"])[:, None, None]
            got = vis(norm).reshape(-1, hidden)
            compare(f"vision {w}x{h} x2 frames", got, want, tol)
        # Decoder: the checkpoint's forward over 7 tokens vs ours, in one pass and as 4 + 3.
        # `<|im_start|>user\nWhat is moving?`: 7 ids with Qwen's vocabulary, as many as the
        # checkpoint's own tokenizer makes otherwise (the scenes model's is small).
        ids7 = torch.tensor([[ids["im_start"], *tok.encode("user\nWhat is moving?", add_special_tokens=False)]])
        if ids7.shape[1] < 5:
            raise ExportError(f"the tokenizer encodes `user\\nWhat is moving?` in {ids7.shape[1] - 1} ids; the check needs at least 4")
        ref = model(input_ids=ids7, use_cache=False).logits
        e = emb(ids7)
        empty = [torch.zeros(1, kv_heads, 0, head_dim) for _ in range(2 * layers)]
        one = dec(e, torch.ones(1, ids7.shape[1], dtype=torch.int64), torch.arange(ids7.shape[1])[None], *empty)
        compare(f"decoder, {ids7.shape[1]} tokens, empty past", one[0], ref, tol)
        n = ids7.shape[1]
        first = dec(e[:, :4], torch.ones(1, 4, dtype=torch.int64), torch.arange(4)[None], *empty)
        second = dec(e[:, 4:], torch.ones(1, n, dtype=torch.int64), torch.arange(4, n)[None], *first[1:])
        compare(f"decoder, {n - 4} tokens after a past of 4", second[0], ref[:, 4:], tol)

    half = args.dtype == "float16"
    if half:
        # Weights and matmuls in float16; the rotary tables stay float32 (fp16 angles lose
        # positions past ~2k), and softmax and RMSNorm already run in float32 inside the modules.
        def to_half(m):
            h = copy.deepcopy(m).half()
            if hasattr(h, "rotary"):
                h.rotary.float()
            return Float32Interface(h).eval()

        vis_x, emb_x, dec_x = (to_half(m) for m in (vis, emb, dec))
    else:
        vis_x, emb_x, dec_x = vis, emb, dec

    print(f"exporting ({args.dtype}, opset {OPSET}) to {out}")
    written = []
    with torch.no_grad():
        sample = torch.rand(2, 3, 196, 336) * 2 - 1
        written += export_graph(vis_x, (sample,), out / "vision_encoder.onnx", ["pixel_values"], ["visual_tokens"],
                                {"pixel_values": {0: "num_frames", 2: "height", 3: "width"},
                                 "visual_tokens": {0: "num_frames", 1: "num_visual_tokens"}})
        written += export_graph(emb_x, (ids7,), out / "embed_tokens.onnx", ["input_ids"], ["inputs_embeds"],
                                {"input_ids": {0: "batch_size", 1: "sequence_length"},
                                 "inputs_embeds": {0: "batch_size", 1: "sequence_length"}})
        p, s = 5, 3
        past = [torch.randn(1, kv_heads, p, head_dim) * 0.1 for _ in range(2 * layers)]
        e3 = torch.randn(1, s, hidden) * 0.05
        mask = torch.ones(1, p + s, dtype=torch.int64)
        pos = torch.arange(p, p + s)[None]
        names_in, names_out, axes = decoder_io(layers)
        written += export_graph(dec_x, (e3, mask, pos, *past), out / "decoder_model_merged.onnx",
                                names_in, names_out, axes)

        print("checking the ONNX graphs against torch (onnxruntime, CPU)")
        import onnxruntime as ort

        def session(name):
            return ort.InferenceSession(str(out / name), providers=["CPUExecutionProvider"])

        for (h, w, t) in ((196, 336, 2), (56, 84, 3)):
            x = torch.rand(t, 3, h, w) * 2 - 1
            got = session("vision_encoder.onnx").run(None, {"pixel_values": x.numpy()})[0]
            compare(f"onnx vision {w}x{h} x{t}", got, vis(x), tol)
        got = session("embed_tokens.onnx").run(None, {"input_ids": ids7.numpy()})[0]
        compare("onnx embedding", got, emb(ids7), tol)
        feed = {n: v.numpy() for n, v in zip(names_in, (e3, mask, pos, *past))}
        got = session("decoder_model_merged.onnx").run(["logits"], feed)[0]
        compare("onnx decoder, past 5 + 3", got, dec(e3, mask, pos, *past)[0], tol)
        feed0 = {n: v.numpy() for n, v in zip(names_in, (e3, torch.ones(1, s, dtype=torch.int64),
                                                         torch.arange(s)[None], *empty))}
        got = session("decoder_model_merged.onnx").run(["logits"], feed0)[0]
        compare("onnx decoder, empty past", got, dec(e3, torch.ones(1, s, dtype=torch.int64),
                                                      torch.arange(s)[None], *empty)[0], tol)

    tok.backend_tokenizer.save(str(out / "tokenizer.json"))
    written.append("tokenizer.json")
    hashes = {f: sha256(out / f) for f in written}
    max_context = min(args.max_context, text_cfg.max_position_embeddings)
    q = json.dumps  # TOML basic strings accept JSON's string escapes.
    rope_theta = (text_cfg.rope_parameters or {}).get("rope_theta", getattr(text_cfg, "rope_theta", None))
    manifest = f"""# Written by engines/videollama3/export.py from {ckpt.name} ({args.dtype} weights).
family = "videollama3"

[files]
vision_encoder = "vision_encoder.onnx"
embed_tokens = "embed_tokens.onnx"
decoder = "decoder_model_merged.onnx"
tokenizer = "tokenizer.json"

[vision]
patch_size = {patch}
merge_size = {merge}
mean = {settings["mean"]}
std = {settings["std"]}
input = "pixel_values"
output = "visual_tokens"
encoder_hidden_size = {model.config.vision_config.hidden_size}
encoder_layers = {model.config.vision_config.num_hidden_layers}
encoder_heads = {model.config.vision_config.num_attention_heads}

# The checkpoint's video processor (video_preprocessor_config.json): frames are resized with
# bicubic antialiasing so that H*W lies in [min_pixels, max_pixels / frames in the request],
# then rescaled and normalised; DiffFP (use_token_compression) is on by default.
[vision.processor]
resize = "smart_resize"
resample = "bicubic"
min_pixels = {settings["min_pixels"]}
max_pixels = {settings["max_pixels"]}
max_frames = {settings["max_frames"]}
use_token_compression = {str(settings["use_token_compression"]).lower()}

[text]
hidden_size = {hidden}
num_layers = {layers}
num_heads = {heads}
num_kv_heads = {kv_heads}
head_dim = {head_dim}
intermediate_size = {text_cfg.intermediate_size}
vocab_size = {vocab}
max_context = {max_context}
rope_theta = {float(rope_theta)}
rms_norm_eps = {float(text_cfg.rms_norm_eps)}
dtype = "float32"
weights_dtype = "{args.dtype}"
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
endoftext = {ids["endoftext"]}
im_start = {ids["im_start"]}
im_end = {ids["im_end"]}
image = {ids["image"]}
image_literal = {q(literals["image"])}
stream_start = {ids["stream_start"]}
stream_end = {ids["stream_end"]}

[chat_template]
system_prefix = {q("<|im_start|>system" + chr(10))}
user_prefix = {q("<|im_start|>user" + chr(10))}
assistant_prefix = {q("<|im_start|>assistant" + chr(10))}
turn_end = {q("<|im_end|>" + chr(10))}
stream_prefix = {q("<|stream_start|>stream" + chr(10))}
stream_end = {q("<|stream_end|>" + chr(10))}
default_system = {q("You are a helpful assistant.")}
stream_timestamps = {str(args.stream_timestamps).lower()}

[generator]
script = "engines/videollama3/export.py"
script_version = "{SCRIPT_VERSION}"
source = {q(str(ckpt))}
opset = {OPSET}

[generator.sha256]
""" + "".join(f'"{f}" = "{h}"\n' for f, h in hashes.items())
    (out / "manifest.toml").write_text(manifest)
    total = sum((out / f).stat().st_size for f in written)
    print(f"wrote {out} ({total / 1e6:.1f} MB); next: edgevlm engines check {out}")


if __name__ == "__main__":
    try:
        main()
    except ExportError as e:
        print(e.code, file=sys.stderr)
        sys.exit(2)
