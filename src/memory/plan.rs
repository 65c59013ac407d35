//! The memory plan: the most each camera's live KV cache and the rest of the model side can take,
//! against the memory of the device that holds them (`edgevlm plan`, `validate`, the status;
//! docs/ARCHITECTURE.md, "Memory plan").
//!
//! Every figure is a bound the runtime keeps, not an estimate of a typical run:
//! - a camera's live cache never holds more than `min(cache_budget, context - reserve_tokens)`
//!   positions, nor more than its frames take: the system turn plus, per frame, its visual tokens
//!   before pruning and the item's template text, for the window's frames (one more at its
//!   edge) and the stale ones `memory.rebuild_slack` lets stay until the next eviction or rebuild;
//! - a narration forks the live cache (shared, no copy) and extends it by its prompt and at most
//!   `narrate_max_tokens`; a decoder call returns new tensors while its input is alive, so a
//!   generation in flight holds two copies of its sequence at the peak of a step;
//! - a question does the same from the largest camera cache, within `memory.reserve_tokens`;
//!   `query.concurrency` run at once; each remembered conversation keeps one such sequence;
//! - the weights are the model files as stored (ONNX Runtime keeps one copy of each initializer).
//!
//! Not counted: ONNX Runtime's activation arenas (a prefill chunk's attention scores, at most
//! `prefill_chunk_tokens x positions x heads x 4` bytes per layer at a time) and TensorRT's
//! workspace (`engine.tensorrt.workspace_mib`); the plan names the first as a figure to leave free.

use crate::config::{CachePolicy, CameraConfig, Config, ProviderKind, VisionConfig};
use crate::engine::{EngineError, Family, Manifest, Tokenizer};
use crate::generate::render::{self, Role};
use crate::ingest::{Geometry, camera_geometry};
use std::path::{Path, PathBuf};

/// Where the KV caches live: the decoder's provider decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Holder {
    /// Host memory (the CPU provider).
    Host,
    /// GPU memory (CUDA or TensorRT; on a Jetson the same memory as the host's).
    Gpu,
}

/// The memory the plan is checked against, and where the figure came from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeviceMemory {
    /// Bytes.
    pub bytes: u64,
    /// `engine.device_memory_mib`, `--device-memory`, `/proc/meminfo`, `nvidia-smi`, …
    pub source: String,
}

/// One camera's share.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CameraPlan {
    /// Camera id.
    pub camera: String,
    /// Its cache policy.
    pub policy: &'static str,
    /// Its model geometry, when fixed by `width`/`height` or given the assumed source size;
    /// otherwise (`None`) the bound below is the most tokens the resize rule gives any source.
    pub size: Option<String>,
    /// Visual tokens per frame before pruning (DiffFP only lowers it); for a model that encodes
    /// clips, a clip's tokens over its frames (Apollo-t32: 32 / 4 = 8).
    pub frame_tokens: usize,
    /// Visual tokens per second of footage before pruning: `frame_tokens` at `sample_fps` (the
    /// token budget per second a model family's findings are stated in).
    pub tokens_per_second: f64,
    /// Positions one frame item takes (visual tokens plus its template text).
    pub frame_positions: usize,
    /// Frames the window holds.
    pub window_frames: usize,
    /// Frames the cache can hold without a budget: the window's, one at its edge and up to
    /// `rebuild_slack` of the window stale.
    pub window_cache_frames: usize,
    /// Positions those frames and the system turn take.
    pub window_positions: usize,
    /// The cache's position budget: `min(cache_budget, context - reserve_tokens)`.
    pub budget: usize,
    /// The most positions its live cache holds.
    pub cache_positions: usize,
    /// Frames that fit in that many positions (all the window's when it fits).
    pub cache_frames: usize,
    /// Most positions a narration adds (its prompt and `narrate_max_tokens`).
    pub narration_positions: usize,
    /// Bytes of the live cache at its bound.
    pub cache_bytes: u64,
    /// Bytes a narration in flight adds at its peak.
    pub narration_bytes: u64,
    /// Host bytes of the window's visual features (always host memory).
    pub features_bytes: u64,
}

/// A shared use of memory beyond the cameras'.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SharedPlan {
    /// How many at once.
    pub count: usize,
    /// Positions of each.
    pub positions: usize,
    /// Bytes of all of them.
    pub bytes: u64,
}

/// The whole plan of a configuration on a model.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Plan {
    /// The model directory.
    pub model: PathBuf,
    /// Its family.
    pub family: String,
    /// The decoder's provider.
    pub provider: &'static str,
    /// Where the caches live.
    pub holder: Holder,
    /// KV bytes per cached position (keys and values of every layer, f32).
    pub bytes_per_position: u64,
    /// The model's context.
    pub max_context: usize,
    /// Whether the manifest gives the rotary settings `sink_recent` and `compress` need.
    pub rope: bool,
    /// `memory.reserve_tokens`.
    pub reserve: usize,
    /// Positions of the system turn every cache starts with.
    pub prefix_positions: usize,
    /// Enabled cameras.
    pub cameras: Vec<CameraPlan>,
    /// Bytes of the model files.
    pub weights_bytes: u64,
    /// Questions in flight (`query.concurrency`).
    pub questions: SharedPlan,
    /// Remembered conversations (`query.conversations`).
    pub conversations: SharedPlan,
    /// Scratch to leave free for a prefill chunk's attention scores (not in the total).
    pub scratch_bytes: u64,
    /// Bytes on the device that holds the caches: weights, caches, narrations, questions and
    /// conversations (and the features, when that device is the host).
    pub total_bytes: u64,
    /// The memory checked against, if known.
    pub device: Option<DeviceMemory>,
    /// The model's square frames, if its encoder takes fixed images (`VisionSpec::frame_rules`).
    #[serde(skip)]
    pub square: Option<crate::config::SquareFrames>,
    /// Whether the family has a "when to speak" signal (`narrate = ["model"]` needs one).
    #[serde(skip)]
    pub speaks: bool,
    /// The model's clip, if its encoder takes clips (`VisionSpec::frame_rules`).
    #[serde(skip)]
    pub clip: Option<crate::config::ClipFrames>,
}

/// What stops a plan from being made.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The model directory cannot be read.
    #[error("{0}")]
    Model(#[from] EngineError),
    /// The family cannot watch cameras.
    #[error("family `{0}` cannot watch live cameras yet ({streaming} can)", streaming = streaming_families())]
    Family(Family),
}

/// The families that can watch cameras, for messages.
fn streaming_families() -> String {
    Family::ALL
        .iter()
        .filter(|f| crate::family::stream(**f).is_ok())
        .map(|f| f.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

impl Plan {
    /// Builds the plan of `config`'s enabled cameras on the model in `dir`, checked against
    /// `device` (`None`: the figure is read from the device, see [`device_memory`]). `source`:
    /// the source size assumed for cameras without `width`/`height` (`None`: the most tokens any
    /// source can give).
    pub fn for_config(
        config: &Config,
        dir: &Path,
        device: Option<DeviceMemory>,
        source: Option<(u32, u32)>,
    ) -> Result<Plan, PlanError> {
        let manifest = Manifest::load(dir)?;
        let tokenizer = Tokenizer::from_file(&manifest.dir.join(&manifest.files.tokenizer))?;
        let mut plan = Plan::new(config, &manifest, &tokenizer, source)?;
        plan.device = device.or_else(|| device_memory(config));
        Ok(plan)
    }

    /// The plan from a loaded manifest and tokenizer (no device figure); `source` as in
    /// [`Plan::for_config`].
    pub fn new(
        config: &Config,
        manifest: &Manifest,
        tokenizer: &Tokenizer,
        source: Option<(u32, u32)>,
    ) -> Result<Plan, PlanError> {
        let format = crate::family::stream(manifest.family)
            .map_err(|_| PlanError::Family(manifest.family))?;
        let t = &manifest.text;
        let bpp = manifest.kv_bytes_per_position() as u64;
        let max_context = t.max_context as usize;
        let reserve = config.memory.reserve_tokens as usize;
        let footage = max_context.saturating_sub(reserve);
        let count = |r: &render::Rendered| {
            r.token_ids(tokenizer, manifest.special_tokens.image).len() - r.visual_tokens()
        };
        let system = config
            .memory
            .system_prompt
            .clone()
            .unwrap_or_else(|| manifest.chat_template.default_system.clone());
        let prefix = count(&format.prefix(Some(&system)));
        // Stream time grows with a camera's uptime: the bound is for three years of it
        // (`Time 99999999.0s:`; the tokenizers split digits, one position each).
        let time = manifest
            .chat_template
            .stream_timestamps
            .then_some(99_999_999.0);
        let template = format
            .item(1, time.map(|t| (t, t)))
            .map(|r| count(&r))
            .unwrap_or(0);
        // The frame-size rule `run` uses: the model's own when it declares one.
        let vision = manifest.vision.frame_rules(config.vision);
        let cameras: Vec<CameraPlan> = config
            .cameras
            .iter()
            .filter(|c| c.enabled)
            .map(|c| {
                camera_plan(
                    c,
                    &vision,
                    source,
                    manifest,
                    CameraShape {
                        prefix,
                        template,
                        footage,
                        bpp,
                        slack: config.memory.rebuild_slack,
                        format,
                    },
                    count,
                )
            })
            .collect();
        let largest = cameras.iter().map(|c| c.cache_positions).max().unwrap_or(0);
        let sequence = (largest + reserve).min(max_context);
        let questions = SharedPlan {
            count: config.query.concurrency as usize,
            positions: sequence,
            bytes: 2 * config.query.concurrency as u64 * sequence as u64 * bpp,
        };
        let conversations = SharedPlan {
            count: config.query.conversations as usize,
            positions: sequence,
            bytes: config.query.conversations as u64 * sequence as u64 * bpp,
        };
        let weights_bytes = [
            &manifest.files.vision_encoder,
            &manifest.files.embed_tokens,
            &manifest.files.decoder,
        ]
        .iter()
        .map(|f| {
            let p = manifest.dir.join(f);
            let mut data = p.clone().into_os_string();
            data.push(".data");
            file_len(&p) + file_len(Path::new(&data))
        })
        .sum();
        let provider = config
            .engine
            .decoder_provider
            .unwrap_or(config.engine.provider);
        let holder = match provider {
            ProviderKind::Cpu => Holder::Host,
            ProviderKind::Cuda | ProviderKind::TensorRt => Holder::Gpu,
        };
        let chunk = config.engine.prefill_chunk_tokens as u64;
        let scratch_bytes = chunk * (largest as u64 + chunk) * u64::from(t.num_heads) * 4;
        let mut total_bytes = weights_bytes
            + cameras
                .iter()
                .map(|c| c.cache_bytes + c.narration_bytes)
                .sum::<u64>()
            + questions.bytes
            + conversations.bytes;
        if holder == Holder::Host {
            total_bytes += cameras.iter().map(|c| c.features_bytes).sum::<u64>();
        }
        Ok(Plan {
            model: manifest.dir.clone(),
            family: manifest.family.to_string(),
            provider: provider.name(),
            holder,
            bytes_per_position: bpp,
            max_context,
            rope: t.rope_theta.is_some(),
            reserve,
            prefix_positions: prefix,
            cameras,
            weights_bytes,
            questions,
            conversations,
            scratch_bytes,
            total_bytes,
            device: None,
            square: vision.square,
            speaks: format.speak_signal(&manifest.special_tokens).is_some(),
            clip: vision.clip,
        })
    }

    /// The camera's share, if it is an enabled camera of the plan.
    pub fn camera(&self, id: &str) -> Option<&CameraPlan> {
        self.cameras.iter().find(|c| c.camera == id)
    }

    /// Whether the total fits the device's memory (`None`: no figure to check against).
    pub fn fits(&self) -> Option<bool> {
        self.device.as_ref().map(|d| self.total_bytes <= d.bytes)
    }

    /// Why the configuration cannot work on this model, as (key path, reason) pairs: a camera whose
    /// budget cannot hold one frame, a cache policy the model cannot run, a total over the
    /// device's memory.
    pub fn problems(&self, config: &Config) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for c in &self.cameras {
            let index = config
                .cameras
                .iter()
                .position(|k| k.id == c.camera)
                .unwrap_or(0);
            if config.cameras[index].cache.policy != CachePolicy::Window && !self.rope {
                out.push((
                    format!("cameras[{index}].cache_policy"),
                    format!(
                        "camera {}: `{}` renumbers cached keys by rotary and {} gives no \
                         text.rope_theta in its manifest; use \"window\"",
                        c.camera,
                        c.policy,
                        self.model.display()
                    ),
                ));
            }
            let cam = &config.cameras[index];
            if let (Some(sq), Some((w, h))) = (self.square, cam.size)
                && (w, h) != (sq.side, sq.side)
            {
                out.push((
                    format!("cameras[{index}].width"),
                    format!(
                        "camera {}: family `{}` takes {side}x{side} frames (vision.image_size of \
                         {}), not {w}x{h}; remove width and height: every frame is resized to \
                         the square",
                        c.camera,
                        self.family,
                        self.model.join("manifest.toml").display(),
                        side = sq.side
                    ),
                ));
            }
            if let Some(clip) = self.clip
                && (cam.sample_fps - clip.fps()).abs() > 1e-9
            {
                out.push((
                    format!("cameras[{index}].sample_fps"),
                    format!(
                        "camera {}: family `{}` encodes clips of {} frames over {} s ({}), so \
                         frames must be sampled at {} fps, got {}; set sample_fps = {}",
                        c.camera,
                        self.family,
                        clip.frames,
                        clip.secs,
                        self.model.join("manifest.toml").display(),
                        clip.fps(),
                        cam.sample_fps,
                        clip.fps()
                    ),
                ));
            }
            if cam.narrate.triggers.model && !self.speaks {
                out.push((
                    format!("cameras[{index}].narrate"),
                    format!(
                        "camera {}: the `model` trigger reads the model's own \"when to speak\" \
                         signal and family `{}` has none; use \"interval\" or \"change\"",
                        c.camera, self.family
                    ),
                ));
            }
            let need = self.prefix_positions + c.frame_positions;
            if c.budget < need {
                let key = if config.cameras[index].cache.budget.is_some() {
                    format!("cameras[{index}].cache_budget")
                } else {
                    "memory.reserve_tokens".to_string()
                };
                out.push((
                    key,
                    format!(
                        "camera {}: {} positions for its cache cannot hold the system turn ({}) and \
                         one frame ({} positions{}) on {}",
                        c.camera,
                        c.budget,
                        self.prefix_positions,
                        c.frame_positions,
                        c.size
                            .as_ref()
                            .map(|s| format!(" at {s}"))
                            .unwrap_or_default(),
                        self.model.display()
                    ),
                ));
            }
        }
        if let (Some(d), Some(false)) = (&self.device, self.fits()) {
            out.push((
                String::new(),
                format!(
                    "the plan needs {} of {} memory but the device has {} ({}); lower \
                     cameras' cache_budget or window_secs, query.conversations or \
                     query.concurrency (`edgevlm plan` shows each share)",
                    size(self.total_bytes),
                    match self.holder {
                        Holder::Host => "host",
                        Holder::Gpu => "GPU",
                    },
                    size(d.bytes),
                    d.source
                ),
            ));
        }
        out
    }

    /// One line for `validate` and the log.
    pub fn line(&self) -> String {
        let of = match &self.device {
            Some(d) => format!(
                " of {} ({}, {:.0} %)",
                size(d.bytes),
                d.source,
                100.0 * self.total_bytes as f64 / d.bytes.max(1) as f64
            ),
            None => " (device memory unknown: set engine.device_memory_mib)".to_string(),
        };
        let kv: u64 = self.cameras.iter().map(|c| c.cache_bytes).sum();
        format!(
            "memory plan on {} ({}): {} in all{of}; live caches {} for {} camera{}, weights {}",
            self.provider,
            self.family,
            size(self.total_bytes),
            size(kv),
            self.cameras.len(),
            if self.cameras.len() == 1 { "" } else { "s" },
            size(self.weights_bytes),
        )
    }

    /// The table `edgevlm plan` prints.
    pub fn table(&self) -> String {
        let mut s = format!(
            "model {} ({}), decoder on {}: {} per position, context {} = {} for footage + {} reserved\n\n",
            self.model.display(),
            self.family,
            self.provider,
            size(self.bytes_per_position),
            self.max_context,
            self.max_context.saturating_sub(self.reserve),
            self.reserve
        );
        s.push_str(&format!(
            "{:<16} {:<11} {:>10} {:>7} {:>7} {:>8} {:>9} {:>9} {:>10} {:>11} {:>10}\n",
            "camera",
            "policy",
            "size",
            "tok/frm",
            "tok/s",
            "frames",
            "window",
            "budget",
            "cache",
            "cache KV",
            "narration"
        ));
        for c in &self.cameras {
            s.push_str(&format!(
                "{:<16} {:<11} {:>10} {:>7} {:>7} {:>8} {:>9} {:>9} {:>10} {:>11} {:>10}\n",
                c.camera,
                c.policy,
                c.size.as_deref().unwrap_or("any"),
                c.frame_tokens,
                format!("{:.0}", c.tokens_per_second),
                format!("{}/{}", c.cache_frames, c.window_cache_frames),
                c.window_positions,
                c.budget,
                c.cache_positions,
                size(c.cache_bytes),
                size(c.narration_bytes),
            ));
        }
        let kv: u64 = self.cameras.iter().map(|c| c.cache_bytes).sum();
        let narr: u64 = self.cameras.iter().map(|c| c.narration_bytes).sum();
        let feats: u64 = self.cameras.iter().map(|c| c.features_bytes).sum();
        if self.cameras.iter().any(|c| c.size.is_none()) {
            s.push_str(
                "size `any`: the most tokens the resize rule gives any source; set the camera's \
                 width/height, or --source WxH, for its own\n",
            );
        }
        s.push('\n');
        let mut row = |what: &str, bytes: u64, note: String| {
            s.push_str(&format!("{what:<34} {:>11}  {note}\n", size(bytes)));
        };
        row("weights", self.weights_bytes, "model files".into());
        row("live caches", kv, "sum of the cameras' bounds".into());
        row(
            "narrations in flight",
            narr,
            "one per camera, two copies at a step's peak".into(),
        );
        row(
            "questions in flight",
            self.questions.bytes,
            format!(
                "{} x 2 x {} positions (query.concurrency)",
                self.questions.count, self.questions.positions
            ),
        );
        row(
            "conversations",
            self.conversations.bytes,
            format!(
                "{} x {} positions (query.conversations)",
                self.conversations.count, self.conversations.positions
            ),
        );
        row(
            "visual features (host)",
            feats,
            if self.holder == Holder::Host {
                "in the total".into()
            } else {
                "host memory, not in the GPU total".into()
            },
        );
        row(
            "total",
            self.total_bytes,
            match self.holder {
                Holder::Host => "host memory".into(),
                Holder::Gpu => "GPU memory".into(),
            },
        );
        row(
            "leave free: prefill scratch",
            self.scratch_bytes,
            "a prefill chunk's attention scores (not in the total)".into(),
        );
        match (&self.device, self.fits()) {
            (Some(d), Some(fits)) => s.push_str(&format!(
                "\ndevice memory {} ({}): {}\n",
                size(d.bytes),
                d.source,
                if fits {
                    format!(
                        "fits, {} left",
                        size(d.bytes.saturating_sub(self.total_bytes))
                    )
                } else {
                    format!("DOES NOT FIT, {} over", size(self.total_bytes - d.bytes))
                }
            )),
            _ => s.push_str(
                "\ndevice memory unknown: give --device-memory or engine.device_memory_mib\n",
            ),
        }
        s
    }
}

struct CameraShape {
    prefix: usize,
    template: usize,
    footage: usize,
    bpp: u64,
    slack: f64,
    /// The family's streaming format.
    format: &'static dyn crate::family::StreamFormat,
}

fn camera_plan(
    c: &CameraConfig,
    vision: &VisionConfig,
    source: Option<(u32, u32)>,
    manifest: &Manifest,
    shape: CameraShape,
    count: impl Fn(&render::Rendered) -> usize,
) -> CameraPlan {
    let window_frames = c.window_frames();
    let frames_per_request = (window_frames as u32).min(vision.max_frames);
    let (size, frame_tokens) = match c.size {
        Some((w, h)) => (
            Some(format!("{w}x{h}")),
            Geometry::fixed(w, h, vision).tokens() as usize,
        ),
        None => match source {
            Some((w, h)) => {
                let g = camera_geometry(w, h, frames_per_request, vision);
                (Some(g.to_string()), g.tokens() as usize)
            }
            None => (None, most_frame_tokens(frames_per_request, vision)),
        },
    };
    // A model that encodes clips: a memory item is a clip of `clip.frames` frames and
    // `clip.tokens` tokens, whatever the frames held.
    let (frame_tokens, item_tokens, items, tokens_per_second) = match vision.clip {
        Some(clip) => (
            clip.tokens.div_ceil(clip.frames) as usize,
            clip.tokens as usize,
            window_frames.div_ceil(clip.frames as usize),
            f64::from(clip.tokens) / clip.secs,
        ),
        None => (
            frame_tokens,
            frame_tokens,
            window_frames,
            frame_tokens as f64 * c.sample_fps,
        ),
    };
    let frame_positions = item_tokens + shape.template;
    // As the live cache counts them: stale items beyond floor(slack x window) are dropped.
    let window_cache_frames = items + 1 + (shape.slack * items as f64).floor() as usize;
    let window_positions = shape.prefix + window_cache_frames * frame_positions;
    let budget = c
        .cache
        .budget
        .map_or(shape.footage, |b| (b as usize).min(shape.footage));
    let cache_positions = window_positions.min(budget);
    let cache_frames = (cache_positions.saturating_sub(shape.prefix) / frame_positions.max(1))
        .min(window_cache_frames);
    let narration_prompt =
        count(&shape.format.speak()).max(count(&shape.format.ask(Role::User, &c.narrate.prompt)));
    // A camera that never narrates has no narration in flight.
    let narration_positions = if c.narrate.triggers.any() {
        narration_prompt + c.narrate.max_tokens as usize
    } else {
        0
    };
    let hidden = u64::from(manifest.text.hidden_size);
    CameraPlan {
        camera: c.id.clone(),
        policy: c.cache.policy.name(),
        size,
        frame_tokens,
        tokens_per_second,
        frame_positions,
        window_frames,
        window_cache_frames,
        window_positions,
        budget,
        cache_positions,
        cache_frames,
        narration_positions,
        cache_bytes: cache_positions as u64 * shape.bpp,
        narration_bytes: if narration_positions > 0 {
            2 * (cache_positions + narration_positions) as u64 * shape.bpp
        } else {
            0
        },
        features_bytes: items as u64 * item_tokens as u64 * hidden * 4,
    }
}

/// The most visual tokens the resize rule gives one frame of any source when `frames` share a
/// request: the per-frame share of the budget (the rule floors both sides when it shrinks), or
/// what the minimum raises a small source to.
fn most_frame_tokens(frames: u32, vision: &VisionConfig) -> usize {
    // A model of square images: its square, whatever the source.
    if let Some(s) = vision.square {
        return camera_geometry(s.side, s.side, 1, vision).tokens().max(1) as usize;
    }
    let frames = frames.max(1);
    let share = match &vision.processor {
        Some(p) => (p.max_pixels / u64::from(frames.min(p.max_frames).max(1)) / 784) as usize,
        None => (vision.max_visual_tokens / frames) as usize,
    };
    // A source smaller than the minimum is raised to it, each side rounded up: a thin strip can
    // get a few more tokens than the minimum; a 28x28 source and a square one show the range.
    let small = [(28, 28), (640, 28), (28, 640), (64, 48)]
        .iter()
        .map(|&(w, h)| camera_geometry(w, h, frames, vision).tokens() as usize)
        .max()
        .unwrap_or(0);
    share.max(small).max(1)
}

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

/// The memory that holds the caches, as this machine reports it: `engine.device_memory_mib` when
/// set; for the CPU provider (and a Jetson, whose GPU shares it) the host's `MemTotal`; for
/// CUDA/TensorRT elsewhere the total `nvidia-smi` reports for `engine.device_id`. `None` when none
/// of these can be read.
pub fn device_memory(config: &Config) -> Option<DeviceMemory> {
    if let Some(mib) = config.engine.device_memory_mib {
        return Some(DeviceMemory {
            bytes: u64::from(mib) << 20,
            source: "engine.device_memory_mib".into(),
        });
    }
    let provider = config
        .engine
        .decoder_provider
        .unwrap_or(config.engine.provider);
    let jetson = Path::new("/etc/nv_tegra_release").exists();
    if provider == ProviderKind::Cpu || jetson {
        let text = std::fs::read_to_string("/proc/meminfo").ok()?;
        return mem_total(&text).map(|bytes| DeviceMemory {
            bytes,
            source: if jetson {
                "MemTotal, shared with the GPU".into()
            } else {
                "MemTotal".into()
            },
        });
    }
    let out = std::process::Command::new("nvidia-smi")
        .args([
            "--query-gpu=memory.total",
            "--format=csv,noheader,nounits",
            "-i",
            &config.engine.device_id.to_string(),
        ])
        .output()
        .ok()?;
    let mib: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().ok()?;
    Some(DeviceMemory {
        bytes: mib << 20,
        source: format!("nvidia-smi, GPU {}", config.engine.device_id),
    })
}

/// `MemTotal` of a `/proc/meminfo` text, in bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Bytes in binary units, one decimal (`3.2 MiB`).
pub fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_total_reads_kib() {
        let text = "MemTotal:       24576000 kB\nMemFree:         1000 kB\n";
        assert_eq!(mem_total(text), Some(24_576_000 * 1024));
        assert_eq!(mem_total("MemFree: 1 kB\n"), None);
    }

    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(size(512), "512 B");
        assert_eq!(size(3 << 20), "3.0 MiB");
        assert_eq!(size(57 * 1024 * 7602), "423.2 MiB");
        assert_eq!(size(3 << 30), "3.0 GiB");
    }
}
