#!/usr/bin/env python3
"""A reduced SmolVLM2, exported to the signature of the official ONNX files and proven against
transformers' own SmolVLM classes.

    .venv-export/bin/python engines/smolvlm2/reduced.py [--out target/smolvlm2-reduced]
    .venv-export/bin/python engines/smolvlm2/reduced.py --shape 256m --out target/smolvlm2-256m   # benches/smolvlm2.rs

HuggingFaceTB/SmolVLM2-{256M,500M}-Video-Instruct publish ONNX files in an `onnx/` folder of the
model repository (docs/ENGINES.md, "SmolVLM2"), whose tensors are:

  vision_encoder.onnx        pixel_values f32 [batch, images, 3, H, W],
                             pixel_attention_mask bool [batch, images, H, W]
                             -> image_features f32 [images * 64, hidden]
  embed_tokens.onnx          input_ids i64 [batch, sequence] -> inputs_embeds f32 [batch, sequence, hidden]
  decoder_model_merged.onnx  inputs_embeds, attention_mask i64, position_ids i64,
                             past_key_values.{i}.key|value f32 [batch, kv_heads, past, head_dim]
                             -> logits, present.{i}.key|value

No hub is reachable here, so the real files cannot be read: this script builds the architecture
itself — `SmolVLMForConditionalGeneration` (a SigLIP-style vision transformer, pixel shuffle by the
scale factor, the projection, a Llama decoder with grouped-query attention) at dimensions a 2-core
machine runs in seconds, with seeded random weights, and the processor of the published video
models (frames resized so the longest edge is 512, then squared to 512 x 512; mean = std = 0.5;
64 tokens per frame) — and exports it to that signature. It then proves the three files in ONNX
Runtime against the same model in transformers on a processed video: the image features against
`get_image_features`, the prompt's logits against the model's forward pass (frames, ids and
masks from `SmolVLMProcessor`), and greedy tokens against `generate`. The reduced model is what the
runtime's SmolVLM2 loading is checked on (the tokenizer is the tiny model's byte-level BPE with
SmolVLM2's special tokens, as engines/smolvlm2/prompt_reference.py uses).

Writes under --out: the checkpoint (config.json, model.safetensors, processor files,
tokenizer.json), onnx/{vision_encoder,embed_tokens,decoder_model_merged}.onnx (+ .onnx.data),
frames_512.rgb (the processor's resized frames, packed RGB bytes), features.f32 (transformers' image
features, little-endian) and reference.json (the video's frames, the processor's pixel values'
checksum, the prompt ids, the last position's logits and the greedy tokens).
Exits 1 with the first difference over its tolerance. Deterministic.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import importlib.util
import json
import sys
import types
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
SEED = 20261204
IMAGE_SIZE = 512           # the published video models' max_image_size (and video_size) longest edge
PATCH = 16
SCALE = 4                  # (512 / 16)^2 / 4^2 = 64 tokens per frame, as the 256M and 500M models
FRAMES, FRAME_H, FRAME_W, FPS = 3, 96, 128, 1.0
QUESTION = "What is moving?"
GREEDY_TOKENS = 8
TOLERANCE = 1e-4           # relative to max(1, the largest magnitude compared)


def load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The prompt reference's tokenizer (tiny BPE + SmolVLM2's special tokens) and the VideoLLaMA3
# recipe's graph writer, comparison and decoder wrapper (a Llama layer is a Qwen2 layer without
# biases: the same rotary embedding, grouped-query attention and MLP calls).
PROMPT = load_module(ROOT / "engines/smolvlm2/prompt_reference.py", "smolvlm2_prompt_reference")
RECIPE = load_module(ROOT / "engines/videollama3/export.py", "videollama3_export")


class VisionExport(torch.nn.Module):
    """pixel_values [b, n, 3, H, W] + pixel_attention_mask [b, n, H, W] -> image_features [b*n*64, hidden].

    `get_image_features` without its padding-image removal (an all-zero image is dropped there):
    that step depends on the values, which a traced graph cannot, and camera frames are never all
    zero after normalisation (0 means mid-grey in every channel).
    """

    def __init__(self, model):
        super().__init__()
        self.vision = copy.deepcopy(model.model.vision_model)
        self.vision.embeddings.forward = traceable_embeddings(self.vision.embeddings)
        self.connector = model.model.connector
        self.patch = model.config.vision_config.patch_size

    def forward(self, pixel_values, pixel_attention_mask):
        b, n, c, h, w = pixel_values.shape
        pixels = pixel_values.reshape(b * n, c, h, w)
        mask = pixel_attention_mask.reshape(b * n, h, w)
        # The reference's two unfolds (patch_size windows, stride patch_size) as one reshape.
        p = self.patch
        grid = mask.to(torch.float32).reshape(b * n, h // p, p, w // p, p)
        patch_mask = grid.sum(dim=(2, 4)) > 0
        hidden = self.vision(pixel_values=pixels, patch_attention_mask=patch_mask).last_hidden_state
        features = self.connector(hidden)
        return features.reshape(-1, features.shape[-1])


def traceable_embeddings(emb):
    """SmolVLM's vision embeddings with `torch.bucketize` written as a count of the boundaries at
    or below each coordinate (what `right=True` returns): the exporter turns bucketize into a float
    index. Same positions; the parity check below compares the results."""

    def forward(pixel_values, patch_attention_mask):
        batch, _, height, width = pixel_values.shape
        embeddings = emb.patch_embedding(pixel_values).flatten(2).transpose(1, 2)
        side = emb.num_patches_per_side
        boundaries = torch.arange(1 / side, 1.0, 1 / side)
        rows = patch_attention_mask[:, :, 0].to(torch.float32).sum(dim=1)
        cols = patch_attention_mask[:, 0, :].to(torch.float32).sum(dim=1)
        h = torch.arange(patch_attention_mask.size(1), dtype=torch.float32)[None, :] * (1.0 / rows)[:, None]
        w = torch.arange(patch_attention_mask.size(2), dtype=torch.float32)[None, :] * (1.0 / cols)[:, None]
        h = torch.clamp(h, max=1.0 - 1e-6)
        w = torch.clamp(w, max=1.0 - 1e-6)
        bh = (h[..., None] >= boundaries).to(torch.int64).sum(-1)
        bw = (w[..., None] >= boundaries).to(torch.int64).sum(-1)
        pos = (bh[:, :, None] * side + bw[:, None, :]).reshape(batch, -1)
        pos = torch.where(patch_attention_mask.reshape(batch, -1), pos, torch.zeros_like(pos))
        return embeddings + emb.position_embedding(pos)

    return forward


# The dimensions of each shape: "reduced" for the parity test, "256m" for measurements at the size
# of HuggingFaceTB/SmolVLM2-256M-Video-Instruct (its published dimensions: a 12-layer SigLIP 768
# wide, a 30-layer Llama 576 wide with 9 heads / 3 kv heads of 64, MLP 1536, vocabulary 49,280;
# not read from its config.json here, which no hub serves), random weights either way.
SHAPES = {
    "reduced": ({"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2},
                {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                 "num_key_value_heads": 2, "head_dim": 16}, None),
    "256m": ({"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 12},
             {"hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
              "num_key_value_heads": 3, "head_dim": 64}, 49280),
}


def build(out: Path, tok_json: dict, shape: str = "reduced"):
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast, SmolVLMConfig, SmolVLMForConditionalGeneration
    from transformers.models.smolvlm import SmolVLMImageProcessor, SmolVLMProcessor, SmolVLMVideoProcessor

    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(tok_json)),
                                  eos_token="<end_of_utterance>", pad_token="<|endoftext|>")
    vocab = len(tok)
    image_id = tok.convert_tokens_to_ids("<image>")
    vision_dims, text_dims, text_vocab = SHAPES[shape]
    config = SmolVLMConfig(
        vision_config={**vision_dims, "image_size": IMAGE_SIZE, "patch_size": PATCH},
        text_config={"model_type": "llama", **text_dims, "vocab_size": text_vocab or vocab,
                     "max_position_embeddings": 8192, "rope_theta": 100000.0, "rms_norm_eps": 1e-5,
                     "tie_word_embeddings": False, "pad_token_id": tok.pad_token_id},
        scale_factor=SCALE, image_token_id=image_id, tie_word_embeddings=False)
    torch.manual_seed(SEED)
    model = SmolVLMForConditionalGeneration(config).eval()
    # transformers' init (std 0.02) makes every position's logits nearly the same; wider weights
    # make the greedy tokens depend on the frames and the prompt, so the comparison means something.
    with torch.no_grad():
        g = torch.Generator().manual_seed(SEED)
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * (1.0 / p.shape[-1]) ** 0.5)
    size = {"longest_edge": IMAGE_SIZE}
    video = SmolVLMVideoProcessor(size=size, max_image_size=size,
                                  video_sampling={"fps": FPS, "max_frames": 64, "video_size": size})
    image = SmolVLMImageProcessor(size={"longest_edge": 4 * IMAGE_SIZE}, max_image_size=size)
    processor = SmolVLMProcessor(image, tok, video, image_seq_len=64)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return model, processor, tok


def onnx_sessions(model, out: Path):
    import onnxruntime as ort

    onnx_dir = out / "onnx"
    onnx_dir.mkdir(parents=True, exist_ok=True)
    tc = model.config.text_config
    layers = tc.num_hidden_layers
    # The decoder wrapper reads the text model where the VideoLLaMA3 checkpoints keep it.
    holder = types.SimpleNamespace(model=types.SimpleNamespace(language_model=model.model.text_model),
                                   lm_head=model.lm_head)
    decoder = RECIPE.DecoderExport(holder).eval()
    embed = RECIPE.EmbedExport(types.SimpleNamespace(
        model=types.SimpleNamespace(language_model=model.model.text_model))).eval()
    vision = VisionExport(model).eval()

    pv = torch.zeros(1, 2, 3, IMAGE_SIZE, IMAGE_SIZE)
    pm = torch.ones(1, 2, IMAGE_SIZE, IMAGE_SIZE, dtype=torch.bool)
    RECIPE.export_graph(vision, (pv, pm), onnx_dir / "vision_encoder.onnx",
                        ["pixel_values", "pixel_attention_mask"], ["image_features"],
                        # 512 x 512 is fixed: the connector's pixel shuffle reads the grid side
                        # as a number, which tracing keeps (every frame and tile is squared to it).
                        {"pixel_values": {0: "batch_size", 1: "num_images"},
                         "pixel_attention_mask": {0: "batch_size", 1: "num_images"},
                         "image_features": {0: "image_tokens"}})
    ids = torch.zeros(1, 5, dtype=torch.int64)
    RECIPE.export_graph(embed, (ids,), onnx_dir / "embed_tokens.onnx", ["input_ids"], ["inputs_embeds"],
                        {"input_ids": {0: "batch_size", 1: "sequence_length"},
                         "inputs_embeds": {0: "batch_size", 1: "sequence_length"}})
    kv = [torch.zeros(1, tc.num_key_value_heads, 3, tc.head_dim) for _ in range(2 * layers)]
    names_in, names_out, axes = RECIPE.decoder_io(layers)
    args = (torch.zeros(1, 2, tc.hidden_size), torch.ones(1, 5, dtype=torch.int64),
            torch.tensor([[3, 4]]), *kv)
    RECIPE.export_graph(decoder, args, onnx_dir / "decoder_model_merged.onnx", names_in, names_out, axes)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    open_ = lambda f: ort.InferenceSession(str(onnx_dir / f), opts, providers=["CPUExecutionProvider"])  # noqa: E731
    return open_("vision_encoder.onnx"), open_("embed_tokens.onnx"), open_("decoder_model_merged.onnx")


class OnnxModel:
    """Runs the three files as a user of the official ones does: features into the image rows of
    the prompt's embeddings, then the decoder with its cache."""

    def __init__(self, sessions, model):
        self.vision, self.embed, self.decoder = sessions
        tc = model.config.text_config
        self.layers, self.kv_heads, self.head_dim = tc.num_hidden_layers, tc.num_key_value_heads, tc.head_dim
        self.image_id = model.config.image_token_id

    def features(self, pixel_values, pixel_mask):
        return self.vision.run(None, {"pixel_values": pixel_values, "pixel_attention_mask": pixel_mask})[0]

    def generate(self, ids, features, steps):
        embeds = self.embed.run(None, {"input_ids": ids})[0]
        rows = np.nonzero(ids[0] == self.image_id)[0]
        if len(rows) != features.shape[0]:
            raise SystemExit(f"prompt has {len(rows)} image tokens, the encoder gave {features.shape[0]} features")
        embeds[0, rows] = features
        past = {f"past_key_values.{i}.{k}": np.zeros((1, self.kv_heads, 0, self.head_dim), np.float32)
                for i in range(self.layers) for k in ("key", "value")}
        total, tokens, first_logits = 0, [], None
        x = embeds
        for _ in range(steps):
            s = x.shape[1]
            feed = {"inputs_embeds": x, "attention_mask": np.ones((1, total + s), np.int64),
                    "position_ids": np.arange(total, total + s, dtype=np.int64)[None], **past}
            outs = self.decoder.run(None, feed)
            logits = outs[0]
            if first_logits is None:
                first_logits = logits
            for i in range(self.layers):
                past[f"past_key_values.{i}.key"] = outs[1 + 2 * i]
                past[f"past_key_values.{i}.value"] = outs[2 + 2 * i]
            total += s
            nxt = int(np.argmax(logits[0, -1]))
            tokens.append(nxt)
            x = self.embed.run(None, {"input_ids": np.array([[nxt]], np.int64)})[0]
        return first_logits, tokens


def frames() -> np.ndarray:
    """A small video: a bright square moving right over a noisy gradient, so frames differ."""
    rng = np.random.RandomState(SEED % 2**31)
    y, x = np.mgrid[0:FRAME_H, 0:FRAME_W]
    video = np.zeros((FRAMES, FRAME_H, FRAME_W, 3), np.uint8)
    for t in range(FRAMES):
        base = np.stack([x * 255 // FRAME_W, y * 255 // FRAME_H, np.full_like(x, 90)], -1)
        noise = rng.randint(-12, 13, base.shape)
        img = np.clip(base + noise, 0, 255)
        x0 = 10 + 30 * t
        img[30:62, x0:x0 + 32] = [250, 250, 240]
        video[t] = img.astype(np.uint8)
    return video


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "target/smolvlm2-reduced")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="reduced",
                    help="reduced (the parity fixture) or 256m (the published 256M model's size, for benches)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    from transformers.video_utils import VideoMetadata

    # A manifest left by `edgevlm engines init` from an earlier run would name stale checksums.
    (args.out / "manifest.toml").unlink(missing_ok=True)
    model, processor, tok = build(args.out, PROMPT.tokenizer_json(), args.shape)
    print(f"reduced SmolVLM2: {sum(p.numel() for p in model.parameters()):,} parameters, "
          f"vocab {len(tok)}, image token {model.config.image_token_id}")
    sessions = onnx_sessions(model, args.out)
    onnx_model = OnnxModel(sessions, model)

    video = frames()
    meta = VideoMetadata(total_num_frames=FRAMES, fps=FPS, frames_indices=list(range(FRAMES)),
                         duration=FRAMES / FPS)
    chat = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": QUESTION}]}]
    text = processor.apply_chat_template(chat, add_generation_prompt=True)
    inputs = processor(text=text, videos=[video], video_metadata=[meta], do_sample_frames=False,
                       return_tensors="pt")
    pv, pm, ids = inputs["pixel_values"], inputs["pixel_attention_mask"], inputs["input_ids"]
    if tuple(pv.shape) != (1, FRAMES, 3, IMAGE_SIZE, IMAGE_SIZE):
        raise SystemExit(f"processor pixel_values {tuple(pv.shape)}: expected (1, {FRAMES}, 3, 512, 512)")
    print(f"processor: pixel_values {tuple(pv.shape)}, pixel_attention_mask {tuple(pm.shape)} "
          f"(all set: {bool(pm.all())}), prompt {ids.shape[1]} ids")

    with torch.no_grad():
        want_features = model.get_image_features(pixel_values=pv, pixel_attention_mask=pm).pooler_output[0]
        want_logits = model(input_ids=ids, pixel_values=pv, pixel_attention_mask=pm.bool()).logits
        generated = model.generate(input_ids=ids, attention_mask=inputs["attention_mask"], pixel_values=pv,
                                   pixel_attention_mask=pm, max_new_tokens=GREEDY_TOKENS, do_sample=False,
                                   min_new_tokens=GREEDY_TOKENS)
    want_tokens = generated[0, ids.shape[1]:].tolist()

    got_features = onnx_model.features(pv.numpy(), pm.numpy().astype(bool))
    got_logits, got_tokens = onnx_model.generate(ids.numpy(), got_features, GREEDY_TOKENS)
    print("ONNX Runtime against transformers:")
    RECIPE.compare("image features", got_features, want_features, TOLERANCE)
    RECIPE.compare("prompt logits", got_logits, want_logits, TOLERANCE)
    if got_tokens != want_tokens:
        raise SystemExit(f"greedy tokens differ: ONNX {got_tokens}, transformers {want_tokens}")
    print(f"  greedy tokens identical: {want_tokens}")
    if len(set(want_tokens)) < 2:
        raise SystemExit(f"greedy tokens {want_tokens} are all the same: the weights say nothing")

    # The frames as the processor resized them, back as the bytes they were: its resize works
    # on uint8 frames, so each value is (byte / 255 - 0.5) / 0.5 exactly and the runtime's own
    # normalisation of these bytes must give the processor's pixel values.
    resized = np.rint((pv[0].numpy() * 0.5 + 0.5) * 255.0)
    if np.abs((resized / 255.0 - 0.5) / 0.5 - pv[0].numpy()).max() > 1e-6:
        raise SystemExit("the processor's pixel values are not bytes normalised: cannot write frames_512.rgb")
    resized.astype(np.uint8).transpose(0, 2, 3, 1).tofile(args.out / "frames_512.rgb")
    np.asarray(want_features, dtype="<f4").tofile(args.out / "features.f32")
    reference = {
        "seed": SEED,
        "image_size": IMAGE_SIZE,
        "fps": FPS,
        "question": QUESTION,
        "frames": {"count": FRAMES, "height": FRAME_H, "width": FRAME_W,
                   "rgb": video.reshape(-1).tolist()},
        "pixel_values_sha256": hashlib.sha256(pv.numpy().astype("<f4").tobytes()).hexdigest(),
        "pixel_values_first": pv.reshape(-1)[:16].tolist(),
        "input_ids": ids[0].tolist(),
        "image_token_id": model.config.image_token_id,
        "features_shape": list(got_features.shape),
        "features_first": want_features.reshape(-1)[:16].tolist(),
        "last_logits": want_logits[0, -1].tolist(),
        "greedy_tokens": want_tokens,
        "tolerance": TOLERANCE,
    }
    (args.out / "reference.json").write_text(json.dumps(reference) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    sys.exit(main())
