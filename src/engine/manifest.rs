//! `engines/<model>/manifest.toml`: what a model directory holds and the shapes and names of its
//! tensors (docs/ENGINES.md, "Model directories"; the keys are tabled in engines/tiny/README.md).

use super::error::EngineError;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The model family, which decides the prompt format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// The generated test model (engines/tiny); VideoLLaMA3's formats, meaningless weights.
    Tiny,
    /// VideoLLaMA3 (docs/REFERENCE.md §1).
    Videollama3,
    /// Apollo (docs/REFERENCE.md §2).
    Apollo,
    /// SmolVLM2 (docs/ENGINES.md, "SmolVLM2").
    Smolvlm2,
}

impl Family {
    /// Every family, by name.
    pub const ALL: [Family; 4] = [
        Family::Tiny,
        Family::Videollama3,
        Family::Apollo,
        Family::Smolvlm2,
    ];
}

impl Family {
    /// The vision layout the family's files have (`None`: not fixed here).
    pub fn vision_layout(self) -> Option<VisionLayout> {
        match self {
            Family::Tiny | Family::Videollama3 => Some(VisionLayout::Frames),
            Family::Smolvlm2 => Some(VisionLayout::Images),
            Family::Apollo => Some(VisionLayout::Clips),
        }
    }

    /// The special tokens the family's formats use, by manifest key and literal: the manifest must
    /// name them (VideoLLaMA3's streaming pair; SmolVLM2's turn end and image marks).
    pub fn required_tokens(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Family::Tiny | Family::Videollama3 => &[
                ("stream_start", "<|stream_start|>"),
                ("stream_end", "<|stream_end|>"),
            ],
            Family::Smolvlm2 => &[
                ("end_of_utterance", "<end_of_utterance>"),
                ("fake_token_around_image", "<fake_token_around_image>"),
                ("global_image", "<global-img>"),
            ],
            Family::Apollo => &[],
        }
    }

    /// The tokens that end the model's turn, where generation stops by default.
    pub fn stop_tokens(self, special: &SpecialTokens) -> Vec<u32> {
        match self {
            // `Manifest::validate` made sure `<end_of_utterance>` is named.
            Family::Smolvlm2 => special
                .end_of_utterance
                .into_iter()
                .chain([special.endoftext])
                .collect(),
            Family::Tiny | Family::Videollama3 | Family::Apollo => {
                vec![special.im_end, special.endoftext]
            }
        }
    }
}

impl std::str::FromStr for Family {
    type Err = String;

    /// A family by its manifest name; the error names the known ones.
    fn from_str(s: &str) -> Result<Family, String> {
        Family::ALL
            .into_iter()
            .find(|f| f.to_string() == s)
            .ok_or_else(|| {
                let known: Vec<String> = Family::ALL.iter().map(|f| f.to_string()).collect();
                format!("unknown family {s:?}: expected {}", known.join(", "))
            })
    }
}

impl std::fmt::Display for Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Family::Tiny => "tiny",
            Family::Videollama3 => "videollama3",
            Family::Apollo => "apollo",
            Family::Smolvlm2 => "smolvlm2",
        })
    }
}

/// The parsed and checked manifest of one model directory.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Model family.
    pub family: Family,
    /// File names, relative to the directory.
    pub files: Files,
    /// Vision encoder geometry, normalisation and tensor names.
    pub vision: VisionSpec,
    /// Decoder shape and tensor names.
    pub text: TextSpec,
    /// Ids of the special tokens.
    pub special_tokens: SpecialTokens,
    /// Chat template pieces.
    pub chat_template: ChatTemplate,
    /// How the files were made (script, seed, checksums).
    #[serde(default)]
    pub generator: Option<Generator>,
    /// The directory the manifest was read from (set by [`Manifest::load`]).
    #[serde(skip)]
    pub dir: PathBuf,
}

/// `[files]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Files {
    /// `vision_encoder.onnx`.
    pub vision_encoder: PathBuf,
    /// `embed_tokens.onnx`.
    pub embed_tokens: PathBuf,
    /// `decoder_model_merged.onnx`.
    pub decoder: PathBuf,
    /// `tokenizer.json`.
    pub tokenizer: PathBuf,
}

/// `[vision]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VisionSpec {
    /// Patch side in pixels (14).
    pub patch_size: u32,
    /// Merge factor per side (2): one visual token per `patch_size * merge_size` square.
    pub merge_size: u32,
    /// Per-channel mean of RGB in [0, 1].
    pub mean: [f32; 3],
    /// Per-channel standard deviation.
    pub std: [f32; 3],
    /// Input tensor name (`pixel_values`).
    pub input: String,
    /// Output tensor name (`visual_tokens`).
    pub output: String,
    /// How frames go in and features come out (`frames`, the default, or `images`).
    #[serde(default)]
    pub layout: VisionLayout,
    /// `images` layout: the pixel attention mask input (`pixel_attention_mask`).
    #[serde(default)]
    pub pixel_mask: Option<String>,
    /// `images` and `clips` layouts: the square side every frame is resized to (512 for
    /// SmolVLM2).
    #[serde(default)]
    pub image_size: Option<u32>,
    /// `clips` layout: frames in one clip (Apollo: 4).
    #[serde(default)]
    pub clip_frames: Option<u32>,
    /// `clips` layout: the seconds one clip spans (Apollo: 2, so frames are sampled at
    /// `clip_frames / clip_secs` = 2 fps).
    #[serde(default)]
    pub clip_secs: Option<f64>,
    /// `clips` layout: visual tokens the resampler gives a clip (Apollo `-t32`: 32).
    #[serde(default)]
    pub clip_tokens: Option<u32>,
    /// Informational: the encoder's width.
    #[serde(default)]
    pub encoder_hidden_size: Option<u32>,
    /// Informational: the encoder's depth.
    #[serde(default)]
    pub encoder_layers: Option<u32>,
    /// Informational: the encoder's heads.
    #[serde(default)]
    pub encoder_heads: Option<u32>,
    /// `[vision.processor]`: the checkpoint's own video processor settings (transformers-native
    /// checkpoints); absent for models whose geometry follows the runtime's `[vision]` budget.
    #[serde(default)]
    pub processor: Option<ProcessorSpec>,
}

/// The vision encoder's tensor layout (docs/ENGINES.md, "Model directories").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VisionLayout {
    /// `input` f32 `[frames, 3, H, W]` -> `output` f32 `[frames, tokens, hidden]`; any size that
    /// is a multiple of `patch_size * merge_size` (VideoLLaMA3, the tiny and scenes models).
    #[default]
    Frames,
    /// `input` f32 `[batch, images, 3, S, S]` and `pixel_mask` bool `[batch, images, S, S]` ->
    /// `output` f32 `[images * tokens, hidden]`, with S = `image_size` (Idefics3 and SmolVLM2's
    /// published ONNX files).
    Images,
    /// `input` f32 `[clips, clip_frames, 3, S, S]` -> `output` f32 `[clips, clip_tokens, hidden]`,
    /// with S = `image_size`: a clip of frames in, a fixed number of tokens out (Apollo's two
    /// towers and Perceiver resampler, docs/ENGINES.md, "Apollo on a live camera").
    Clips,
}

impl VisionLayout {
    /// The manifest's name of the layout.
    pub fn name(self) -> &'static str {
        match self {
            VisionLayout::Frames => "frames",
            VisionLayout::Images => "images",
            VisionLayout::Clips => "clips",
        }
    }
}

/// A `clips` model's clip: how many frames, over how long, and the tokens it becomes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClipSpec {
    /// Frames in a clip.
    pub frames: u32,
    /// Seconds a clip spans.
    pub secs: f64,
    /// Visual tokens of one clip.
    pub tokens: u32,
}

impl ClipSpec {
    /// The sampling rate the clips need (`frames / secs`).
    pub fn fps(&self) -> f64 {
        f64::from(self.frames) / self.secs
    }
}

/// `[vision.processor]`: what transformers' `VideoLlama3VideoProcessor` of the exported checkpoint
/// does to frames (docs/ENGINES.md, "VideoLLaMA3 preprocessing"), read by the export from the
/// checkpoint's processor config.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessorSpec {
    /// The size rule.
    pub resize: ResizeRule,
    /// The resampling filter.
    pub resample: Resample,
    /// Fewest pixels per frame (`size.shortest_edge`).
    pub min_pixels: u64,
    /// Most pixels per request, divided by the frames in it (`size.longest_edge`).
    pub max_pixels: u64,
    /// Most frames the processor takes in one request.
    pub max_frames: u32,
    /// DiffFP on (`use_token_compression`).
    pub use_token_compression: bool,
}

impl ProcessorSpec {
    /// The frame-size rule, as the camera configuration carries it.
    pub fn geometry(&self) -> crate::config::ProcessorGeometry {
        crate::config::ProcessorGeometry {
            min_pixels: self.min_pixels,
            max_pixels: self.max_pixels,
            max_frames: self.max_frames,
        }
    }
}

/// The size rule of a processor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResizeRule {
    /// Qwen2-VL's `smart_resize` with VideoLLaMA3's per-frame share of the pixel budget.
    SmartResize,
}

/// A resampling filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Resample {
    /// Antialiased bicubic (a = -0.5), as torch's `interpolate(mode="bicubic", antialias=True)`.
    Bicubic,
}

impl VisionSpec {
    /// Pixels per visual token side (`patch_size * merge_size`).
    pub fn token_px(&self) -> u32 {
        self.patch_size * self.merge_size
    }

    /// The clip of a `clips` model (`None` for the other layouts).
    pub fn clip(&self) -> Option<ClipSpec> {
        match (
            self.layout,
            self.clip_frames,
            self.clip_secs,
            self.clip_tokens,
        ) {
            (VisionLayout::Clips, Some(frames), Some(secs), Some(tokens)) => Some(ClipSpec {
                frames,
                secs,
                tokens,
            }),
            _ => None,
        }
    }

    /// What this model fixes of every camera's frames, over the configuration's `[vision]`: its
    /// processor's size rule (transformers-native VideoLLaMA3), or square images of its side
    /// (the `images` layout, SmolVLM2).
    pub fn frame_rules(
        &self,
        mut vision: crate::config::VisionConfig,
    ) -> crate::config::VisionConfig {
        vision.processor = self.processor.map(|p| p.geometry());
        vision.square = match (self.layout, self.image_size) {
            (VisionLayout::Images, Some(side)) => Some(crate::config::SquareFrames {
                side,
                token_px: self.token_px(),
                pad: None,
            }),
            // Apollo pads each frame to a centred square filled with its processor's mean, then
            // resizes (docs/ENGINES.md, "Apollo on a live camera").
            (VisionLayout::Clips, Some(side)) => Some(crate::config::SquareFrames {
                side,
                token_px: self.token_px(),
                pad: Some(self.mean.map(|m| (m * 255.0) as u8)),
            }),
            _ => None,
        };
        vision.clip = self.clip().map(|c| crate::config::ClipFrames {
            frames: c.frames,
            secs: c.secs,
            tokens: c.tokens,
        });
        vision
    }
}

/// `[text]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TextSpec {
    /// Width of embeddings, visual tokens and the decoder.
    pub hidden_size: u32,
    /// Decoder layers.
    pub num_layers: u32,
    /// Query heads.
    pub num_heads: u32,
    /// Key/value heads (grouped-query attention).
    pub num_kv_heads: u32,
    /// Width of one head.
    pub head_dim: u32,
    /// Informational: MLP width.
    #[serde(default)]
    pub intermediate_size: Option<u32>,
    /// Logits width (may exceed the tokenizer's size: padded embedding rows).
    pub vocab_size: u32,
    /// Most positions the runtime may use.
    pub max_context: u32,
    /// Informational: already inside the graph.
    #[serde(default)]
    pub rope_theta: Option<f64>,
    /// Informational: already inside the graph.
    #[serde(default)]
    pub rms_norm_eps: Option<f64>,
    /// Dtype of every float input and output; only `float32` is supported.
    pub dtype: String,
    /// Informational: the dtype of the weights and compute inside the graphs (`float32` or
    /// `float16`); the interface stays `dtype`.
    #[serde(default)]
    pub weights_dtype: Option<String>,
    /// Embedding model input (`input_ids`).
    pub input_ids: String,
    /// Embedding output and decoder input (`inputs_embeds`).
    pub inputs_embeds: String,
    /// Decoder input (`attention_mask`).
    pub attention_mask: String,
    /// Decoder input (`position_ids`).
    pub position_ids: String,
    /// Pattern with `{i}` for the past keys (`past_key_values.{i}.key`).
    pub past_key: String,
    /// Pattern with `{i}` for the past values.
    pub past_value: String,
    /// Pattern with `{i}` for the present keys (`present.{i}.key`).
    pub present_key: String,
    /// Pattern with `{i}` for the present values.
    pub present_value: String,
    /// Decoder output (`logits`).
    pub logits: String,
}

impl TextSpec {
    /// Name of layer `i`'s tensor from a `{i}` pattern.
    pub fn layer_name(pattern: &str, i: u32) -> String {
        pattern.replace("{i}", &i.to_string())
    }
}

/// The literal of the visual placeholder token, by checkpoint convention (docs/ENGINES.md, "VideoLLaMA3 prompt").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum ImageLiteral {
    /// `<image>`: the remote-code checkpoints' and the tiny model's.
    #[default]
    #[serde(rename = "<image>")]
    Image,
    /// `<|video_pad|>`: the transformers-native (-HF) checkpoints' video placeholder.
    #[serde(rename = "<|video_pad|>")]
    VideoPad,
    /// `<|video_token|>`: Apollo's video placeholder.
    #[serde(rename = "<|video_token|>")]
    VideoToken,
}

impl ImageLiteral {
    /// The literal text.
    pub fn as_str(self) -> &'static str {
        match self {
            ImageLiteral::Image => "<image>",
            ImageLiteral::VideoPad => "<|video_pad|>",
            ImageLiteral::VideoToken => "<|video_token|>",
        }
    }
}

/// `[special_tokens]`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpecialTokens {
    /// `<|endoftext|>`.
    pub endoftext: u32,
    /// `<|im_start|>`.
    pub im_start: u32,
    /// `<|im_end|>`.
    pub im_end: u32,
    /// The visual placeholder (`image_literal`).
    pub image: u32,
    /// The placeholder's literal: `<image>` (default) or `<|video_pad|>`.
    #[serde(default)]
    pub image_literal: ImageLiteral,
    /// `<|stream_start|>` (VideoLLaMA3's streaming formats; families without one have none).
    #[serde(default)]
    pub stream_start: Option<u32>,
    /// `<|stream_end|>`.
    #[serde(default)]
    pub stream_end: Option<u32>,
    /// `<end_of_utterance>`: SmolVLM2's end of a turn, its stop token.
    #[serde(default)]
    pub end_of_utterance: Option<u32>,
    /// `<fake_token_around_image>`: SmolVLM2's mark around each image.
    #[serde(default)]
    pub fake_token_around_image: Option<u32>,
    /// `<global-img>`: SmolVLM2's mark of a whole (not split) image.
    #[serde(default)]
    pub global_image: Option<u32>,
}

impl SpecialTokens {
    /// (literal, id) pairs of the tokens the manifest names, for checking the tokenizer.
    pub fn pairs(&self) -> Vec<(&'static str, u32)> {
        let mut pairs = vec![
            ("<|endoftext|>", self.endoftext),
            ("<|im_start|>", self.im_start),
            ("<|im_end|>", self.im_end),
            (self.image_literal.as_str(), self.image),
        ];
        for (literal, id) in [
            ("<|stream_start|>", self.stream_start),
            ("<|stream_end|>", self.stream_end),
            ("<end_of_utterance>", self.end_of_utterance),
            ("<fake_token_around_image>", self.fake_token_around_image),
            ("<global-img>", self.global_image),
        ] {
            pairs.extend(id.map(|id| (literal, id)));
        }
        pairs
    }
}

/// `[chat_template]`: Qwen's chat pieces and VideoLLaMA3's stream item (docs/REFERENCE.md §1c).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatTemplate {
    /// `<|im_start|>system\n`.
    pub system_prefix: String,
    /// `<|im_start|>user\n`.
    pub user_prefix: String,
    /// `<|im_start|>assistant\n`.
    pub assistant_prefix: String,
    /// `<|im_end|>\n`.
    pub turn_end: String,
    /// `<|stream_start|>stream\n` (empty for a family without a streaming format).
    #[serde(default)]
    pub stream_prefix: String,
    /// `<|stream_end|>\n`.
    #[serde(default)]
    pub stream_end: String,
    /// System message used when none is configured.
    pub default_system: String,
    /// Each stream item opens with its frame's stream time, `Time 12.0s:` (the offline format's
    /// time text), for models trained so (engines/scenes; docs/ENGINES.md, "The scenes model").
    /// The reference's stream items carry no time: false by default.
    #[serde(default)]
    pub stream_timestamps: bool,
}

/// `[generator]`: provenance of the files.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Generator {
    /// The script that wrote the directory.
    pub script: String,
    /// Its version.
    #[serde(default)]
    pub script_version: Option<String>,
    /// Seed of generated weights.
    #[serde(default)]
    pub seed: Option<u64>,
    /// ONNX opset.
    #[serde(default)]
    pub opset: Option<u32>,
    /// The checkpoint exported (real models).
    #[serde(default)]
    pub source: Option<String>,
    /// sha256 of each file, by file name.
    #[serde(default)]
    pub sha256: BTreeMap<String, String>,
}

impl Manifest {
    /// Reads `dir/manifest.toml` and checks its values (not yet the ONNX files).
    pub fn load(dir: &Path) -> Result<Manifest, EngineError> {
        let path = dir.join("manifest.toml");
        let text = std::fs::read_to_string(&path).map_err(|e| EngineError::Manifest {
            path: path.clone(),
            message: if e.kind() == std::io::ErrorKind::NotFound {
                format!(
                    "not found; {} is not a model directory (run scripts/setup.sh for the tiny model, \
                     or engines/videollama3/export.py for a real one)",
                    dir.display()
                )
            } else {
                format!("cannot read: {e}")
            },
        })?;
        Manifest::parse(&text, dir)
    }

    /// Parses manifest text that belongs to `dir`.
    pub fn parse(text: &str, dir: &Path) -> Result<Manifest, EngineError> {
        let path = dir.join("manifest.toml");
        let mut m: Manifest = toml::from_str(text).map_err(|e| EngineError::Manifest {
            path: path.clone(),
            message: e.message().trim().to_string(),
        })?;
        m.dir = dir.to_path_buf();
        if let Err(message) = m.validate() {
            return Err(EngineError::Manifest { path, message });
        }
        Ok(m)
    }

    /// Absolute (dir-joined) path of a file named in `[files]`.
    pub fn file(&self, name: &Path) -> PathBuf {
        self.dir.join(name)
    }

    /// `(manifest key, path)` of the four files.
    pub fn file_paths(&self) -> [(&'static str, PathBuf); 4] {
        [
            ("vision_encoder", self.file(&self.files.vision_encoder)),
            ("embed_tokens", self.file(&self.files.embed_tokens)),
            ("decoder", self.file(&self.files.decoder)),
            ("tokenizer", self.file(&self.files.tokenizer)),
        ]
    }

    /// Bytes of the KV cache per cached position (keys and values of every layer, f32).
    pub fn kv_bytes_per_position(&self) -> usize {
        let t = &self.text;
        2 * t.num_layers as usize * t.num_kv_heads as usize * t.head_dim as usize * 4
    }

    fn validate(&self) -> Result<(), String> {
        let v = &self.vision;
        let t = &self.text;
        let positive = [
            ("vision.patch_size", v.patch_size),
            ("vision.merge_size", v.merge_size),
            ("text.hidden_size", t.hidden_size),
            ("text.num_layers", t.num_layers),
            ("text.num_heads", t.num_heads),
            ("text.num_kv_heads", t.num_kv_heads),
            ("text.head_dim", t.head_dim),
            ("text.vocab_size", t.vocab_size),
            ("text.max_context", t.max_context),
        ];
        for (key, value) in positive {
            if value == 0 {
                return Err(format!("{key}: must be > 0, got 0"));
            }
        }
        for (i, s) in v.std.iter().enumerate() {
            if !(s.is_finite() && *s != 0.0) {
                return Err(format!(
                    "vision.std[{i}]: must be a non-zero number, got {s}"
                ));
            }
        }
        for (i, m) in v.mean.iter().enumerate() {
            if !m.is_finite() {
                return Err(format!("vision.mean[{i}]: must be a number, got {m}"));
            }
        }
        if !t.num_heads.is_multiple_of(t.num_kv_heads) {
            return Err(format!(
                "text.num_kv_heads: must divide text.num_heads ({}), got {}",
                t.num_heads, t.num_kv_heads
            ));
        }
        if t.dtype != "float32" {
            return Err(format!(
                "text.dtype: only \"float32\" inputs and outputs are supported (TensorRT's fp16 is \
                 applied inside the engine), got \"{}\"",
                t.dtype
            ));
        }
        for (key, pattern) in [
            ("text.past_key", &t.past_key),
            ("text.past_value", &t.past_value),
            ("text.present_key", &t.present_key),
            ("text.present_value", &t.present_value),
        ] {
            if !pattern.contains("{i}") {
                return Err(format!(
                    "{key}: must contain `{{i}}` (the layer index), got `{pattern}`"
                ));
            }
        }
        if let Some(w) = &t.weights_dtype
            && w != "float32"
            && w != "float16"
        {
            return Err(format!(
                "text.weights_dtype: expected \"float32\" or \"float16\", got \"{w}\""
            ));
        }
        if let Some(p) = &v.processor
            && (p.min_pixels == 0 || p.max_pixels == 0 || p.max_frames == 0)
        {
            return Err(format!(
                "vision.processor: min_pixels, max_pixels and max_frames must be > 0, got {}, {} and {}",
                p.min_pixels, p.max_pixels, p.max_frames
            ));
        }
        // The `images` and `clips` layouts take one square side.
        let square_side = || match v.image_size {
            Some(side) if side > 0 && side.is_multiple_of(v.token_px()) => Ok(()),
            other => Err(format!(
                "vision.image_size: layout = \"{}\" needs a square side that is a positive \
                 multiple of patch_size x merge_size ({}), got {}",
                v.layout.name(),
                v.token_px(),
                other.map_or("none".into(), |s| s.to_string())
            )),
        };
        match v.layout {
            VisionLayout::Frames => {
                if v.pixel_mask.is_some() || v.image_size.is_some() {
                    return Err(
                        "vision.pixel_mask and vision.image_size belong to layout = \"images\"; \
                         this manifest's layout is \"frames\""
                            .into(),
                    );
                }
            }
            VisionLayout::Clips => {
                square_side()?;
                match (v.clip_frames, v.clip_secs, v.clip_tokens) {
                    (Some(f), Some(s), Some(t)) if f > 0 && t > 0 && s.is_finite() && s > 0.0 => {}
                    (f, s, t) => {
                        return Err(format!(
                            "vision.clip_frames, clip_secs, clip_tokens: layout = \"clips\" needs \
                             frames per clip (> 0), the seconds a clip spans (> 0) and tokens per \
                             clip (> 0), got {}, {} and {}",
                            f.map_or("none".into(), |x| x.to_string()),
                            s.map_or("none".into(), |x| x.to_string()),
                            t.map_or("none".into(), |x| x.to_string()),
                        ));
                    }
                }
            }
            VisionLayout::Images => {
                if v.pixel_mask.as_deref().is_none_or(str::is_empty) {
                    return Err(
                        "vision.pixel_mask: layout = \"images\" needs the name of the pixel \
                         attention mask input (`pixel_attention_mask`)"
                            .into(),
                    );
                }
                square_side()?;
            }
        }
        if v.layout != VisionLayout::Clips
            && (v.clip_frames.is_some() || v.clip_secs.is_some() || v.clip_tokens.is_some())
        {
            return Err(
                "vision.clip_frames, clip_secs and clip_tokens belong to layout = \"clips\"".into(),
            );
        }
        // What the family's files and formats need of the manifest.
        if let Some(want) = self.family.vision_layout()
            && want != v.layout
        {
            return Err(format!(
                "vision.layout: family `{}` takes layout = \"{}\", got \"{}\"",
                self.family,
                want.name(),
                v.layout.name()
            ));
        }
        let named: Vec<&str> = self
            .special_tokens
            .pairs()
            .iter()
            .map(|(l, _)| *l)
            .collect();
        for (key, literal) in self.family.required_tokens() {
            if !named.contains(literal) {
                return Err(format!(
                    "special_tokens.{key}: the family's formats use {literal}, give its id"
                ));
            }
        }
        for (name, id) in self.special_tokens.pairs() {
            if id >= t.vocab_size {
                return Err(format!(
                    "special_tokens: id {id} of {name} is outside text.vocab_size ({})",
                    t.vocab_size
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What engines/videollama3/export.py writes for VideoLLaMA3-2B (its template rendered with
    /// Qwen2.5-1.5B's shape; the VideoLLaMA3 ids here only exercise parsing: a Qwen2.5 tokenizer
    /// gives 151665-151667, docs/REFERENCE.md §1c).
    const VIDEOLLAMA3_2B: &str = r#"# Written by engines/videollama3/export.py from DAMO-NLP-SG/VideoLLaMA3-2B.
family = "videollama3"

[files]
vision_encoder = "vision_encoder.onnx"
embed_tokens = "embed_tokens.onnx"
decoder = "decoder_model_merged.onnx"
tokenizer = "tokenizer.json"

[vision]
patch_size = 14
merge_size = 2
mean = [0.5, 0.5, 0.5]
std = [0.5, 0.5, 0.5]
input = "pixel_values"
output = "visual_tokens"
encoder_layers = 27
encoder_heads = 16

[text]
hidden_size = 1536
num_layers = 28
num_heads = 12
num_kv_heads = 2
head_dim = 128
intermediate_size = 8960
vocab_size = 151936
max_context = 16384
rope_theta = 1000000.0
rms_norm_eps = 1e-06
dtype = "float32"
input_ids = "input_ids"
inputs_embeds = "inputs_embeds"
attention_mask = "attention_mask"
position_ids = "position_ids"
past_key = "past_key_values.{i}.key"
past_value = "past_key_values.{i}.value"
present_key = "present.{i}.key"
present_value = "present.{i}.value"
logits = "logits"

[special_tokens]
endoftext = 151643
im_start = 151644
im_end = 151645
image = 151646
stream_start = 151647
stream_end = 151648

[chat_template]
system_prefix = "<|im_start|>system\n"
user_prefix = "<|im_start|>user\n"
assistant_prefix = "<|im_start|>assistant\n"
turn_end = "<|im_end|>\n"
stream_prefix = "<|stream_start|>stream\n"
stream_end = "<|stream_end|>\n"
default_system = "You are a helpful assistant."

[generator]
script = "engines/videollama3/export.py"
script_version = "1"
source = "DAMO-NLP-SG/VideoLLaMA3-2B"
opset = 17

[generator.sha256]
"decoder_model_merged.onnx" = "00"
"#;

    #[test]
    fn the_manifest_the_videollama3_export_writes_parses() {
        let m = Manifest::parse(VIDEOLLAMA3_2B, Path::new("engines/videollama3/model")).unwrap();
        assert_eq!(m.family, Family::Videollama3);
        assert_eq!(m.text.num_layers, 28);
        assert_eq!(m.kv_bytes_per_position(), 2 * 28 * 2 * 128 * 4);
        assert_eq!(m.chat_template.user_prefix, "<|im_start|>user\n");
        assert_eq!(m.vision.token_px(), 28);
        assert_eq!(m.special_tokens.image, 151646);
    }

    #[test]
    fn a_bad_value_is_reported_with_its_key() {
        let text = VIDEOLLAMA3_2B.replace("num_kv_heads = 2", "num_kv_heads = 5");
        let err = Manifest::parse(&text, Path::new("m"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "m/manifest.toml: text.num_kv_heads: must divide text.num_heads (12), got 5"
        );
        let text = VIDEOLLAMA3_2B.replace(
            "past_key = \"past_key_values.{i}.key\"",
            "past_key = \"past\"",
        );
        let err = Manifest::parse(&text, Path::new("m"))
            .unwrap_err()
            .to_string();
        assert!(
            err.ends_with("text.past_key: must contain `{i}` (the layer index), got `past`"),
            "{err}"
        );
    }

    #[test]
    fn a_family_refuses_a_manifest_without_what_its_formats_use() {
        let text = VIDEOLLAMA3_2B.replace("stream_start = 151647\n", "");
        let err = Manifest::parse(&text, Path::new("m"))
            .unwrap_err()
            .to_string();
        assert!(
            err.ends_with(
                "special_tokens.stream_start: the family's formats use <|stream_start|>, give its id"
            ),
            "{err}"
        );
        let text = VIDEOLLAMA3_2B.replace(
            "output = \"visual_tokens\"\n",
            "output = \"visual_tokens\"\nlayout = \"images\"\npixel_mask = \"m\"\nimage_size = 56\n",
        );
        let err = Manifest::parse(&text, Path::new("m"))
            .unwrap_err()
            .to_string();
        assert!(
            err.ends_with(
                "vision.layout: family `videollama3` takes layout = \"frames\", got \"images\""
            ),
            "{err}"
        );
    }

    #[test]
    fn the_images_layout_needs_its_mask_and_a_square_side() {
        let images = |extra: &str| {
            let text = VIDEOLLAMA3_2B.replace(
                "output = \"visual_tokens\"\n",
                &format!("output = \"visual_tokens\"\nlayout = \"images\"\n{extra}"),
            );
            Manifest::parse(&text, Path::new("m"))
                .unwrap_err()
                .to_string()
        };
        let err = images("image_size = 56\n");
        assert!(
            err.contains("vision.pixel_mask: layout = \"images\" needs"),
            "{err}"
        );
        let err = images("pixel_mask = \"m\"\nimage_size = 50\n");
        assert!(
            err.contains("positive multiple of patch_size x merge_size (28), got 50"),
            "{err}"
        );
        let text = VIDEOLLAMA3_2B.replace(
            "output = \"visual_tokens\"\n",
            "output = \"visual_tokens\"\nimage_size = 56\n",
        );
        let err = Manifest::parse(&text, Path::new("m"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("belong to layout = \"images\""), "{err}");
    }
}
