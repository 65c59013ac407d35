//! The TensorRT execution provider (cargo feature `ort-tensorrt`): fp16 engines built by ONNX Runtime
//! and cached under the state directory, one optimisation profile per model derived from the
//! manifest and the camera geometries, optional Jetson DLA.
//!
//! The profile and cache-key code below is plain arithmetic and is compiled (and tested) on every
//! build; only the registration needs the feature.

use super::error::EngineError;
use super::manifest::{Manifest, TextSpec, VisionLayout};
use super::provider::SessionPlan;
use crate::ingest::Geometry;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// One TensorRT optimisation profile: min/opt/max shape of every dynamic input.
///
/// ONNX Runtime takes it as `name:d0xd1x...,name2:...` strings (`trt_profile_*_shapes`, like
/// trtexec's `--minShapes`); one profile is a box, so several geometries are covered by their
/// bounding range with the largest as the shape TensorRT tunes for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// Every dynamic input.
    pub inputs: Vec<ProfileInput>,
}

/// The shape range of one input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileInput {
    /// Input name.
    pub name: String,
    /// Smallest shape served.
    pub min: Vec<i64>,
    /// Shape TensorRT tunes for.
    pub opt: Vec<i64>,
    /// Largest shape served.
    pub max: Vec<i64>,
}

impl ProfileInput {
    fn new(name: &str, min: Vec<i64>, opt: Vec<i64>, max: Vec<i64>) -> ProfileInput {
        ProfileInput {
            name: name.to_string(),
            min,
            opt,
            max,
        }
    }
}

impl Profile {
    /// `trt_profile_min_shapes`.
    pub fn min_shapes(&self) -> String {
        self.render(|i| &i.min)
    }

    /// `trt_profile_opt_shapes`.
    pub fn opt_shapes(&self) -> String {
        self.render(|i| &i.opt)
    }

    /// `trt_profile_max_shapes`.
    pub fn max_shapes(&self) -> String {
        self.render(|i| &i.max)
    }

    fn render(&self, pick: impl Fn(&ProfileInput) -> &Vec<i64>) -> String {
        self.inputs
            .iter()
            .map(|input| {
                let dims: Vec<String> = pick(input).iter().map(i64::to_string).collect();
                format!("{}:{}", input.name, dims.join("x"))
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// The vision encoder's profile: 1..=`batch_frames` frames, heights and widths spanning the
/// geometries (the largest is the tuned shape). With no geometry known the range is one token up to
/// 1288x728 (a single 720p frame at the reference budget), or, for a model with its own processor
/// rule (`[vision.processor]`), up to the side of a 16:9 frame of its largest area either way round.
pub fn vision_profile(m: &Manifest, geometries: &[Geometry], batch_frames: usize) -> Profile {
    let t = batch_frames.max(1) as i64;
    if let (VisionLayout::Images, Some(side), Some(mask)) = (
        m.vision.layout,
        m.vision.image_size,
        m.vision.pixel_mask.as_deref(),
    ) {
        // One square size: only the number of images varies.
        let s = i64::from(side);
        return Profile {
            inputs: vec![
                ProfileInput::new(
                    &m.vision.input,
                    vec![1, 1, 3, s, s],
                    vec![1, 1, 3, s, s],
                    vec![1, t, 3, s, s],
                ),
                ProfileInput::new(mask, vec![1, 1, s, s], vec![1, 1, s, s], vec![1, t, s, s]),
            ],
        };
    }
    let px = i64::from(m.vision.token_px());
    let (min_h, max_h, min_w, max_w, opt) = if geometries.is_empty() {
        match &m.vision.processor {
            Some(p) => {
                let area = p.max_pixels.max(p.min_pixels) as f64;
                let side = ((area * 16.0 / 9.0).sqrt() / px as f64).ceil() as i64 * px;
                (px, side, px, side, (196, 336))
            }
            None => (px, 728, px, 1288, (196, 336)),
        }
    } else {
        let hs = geometries.iter().map(|g| i64::from(g.height));
        let ws = geometries.iter().map(|g| i64::from(g.width));
        let largest = geometries
            .iter()
            .max_by_key(|g| g.tokens())
            .map(|g| (i64::from(g.height), i64::from(g.width)))
            .unwrap_or((px, px));
        (
            hs.clone().min().unwrap_or(px),
            hs.max().unwrap_or(px),
            ws.clone().min().unwrap_or(px),
            ws.max().unwrap_or(px),
            largest,
        )
    };
    Profile {
        inputs: vec![ProfileInput::new(
            &m.vision.input,
            vec![1, 3, min_h, min_w],
            vec![1, 3, opt.0, opt.1],
            vec![t, 3, max_h, max_w],
        )],
    }
}

/// The embedding's profile: 1..=`chunk` ids, tuned for one (decoding).
pub fn embed_profile(m: &Manifest, chunk: usize) -> Profile {
    let chunk = chunk.max(1) as i64;
    Profile {
        inputs: vec![ProfileInput::new(
            &m.text.input_ids,
            vec![1, 1],
            vec![1, 1],
            vec![1, chunk],
        )],
    }
}

/// The decoder's profile: 1..=`chunk` new tokens (tuned for one: decoding dominates), a past of
/// 0..max_context-1 positions (tuned for half the context).
///
/// The zero-length past of the first call is part of the range; TensorRT supports empty tensors,
/// but whether every TensorRT version builds this graph with them is unverified (no GPU here).
pub fn decoder_profile(m: &Manifest, chunk: usize) -> Profile {
    let t = &m.text;
    let chunk = chunk.max(1) as i64;
    let ctx = i64::from(t.max_context);
    let (hidden, kv, hd) = (
        i64::from(t.hidden_size),
        i64::from(t.num_kv_heads),
        i64::from(t.head_dim),
    );
    let mut inputs = vec![
        ProfileInput::new(
            &t.inputs_embeds,
            vec![1, 1, hidden],
            vec![1, 1, hidden],
            vec![1, chunk, hidden],
        ),
        ProfileInput::new(
            &t.attention_mask,
            vec![1, 1],
            vec![1, ctx / 2],
            vec![1, ctx],
        ),
        ProfileInput::new(&t.position_ids, vec![1, 1], vec![1, 1], vec![1, chunk]),
    ];
    for i in 0..t.num_layers {
        for pattern in [&t.past_key, &t.past_value] {
            inputs.push(ProfileInput::new(
                &TextSpec::layer_name(pattern, i),
                vec![1, kv, 0, hd],
                vec![1, kv, ctx / 2, hd],
                vec![1, kv, ctx - 1, hd],
            ));
        }
    }
    Profile { inputs }
}

/// `state_dir/engines/tensorrt/<family>-<dir>-<hash>-ort<version>`: TensorRT engines are only valid
/// for the graph, the ONNX Runtime build and the GPU they were built with, so the key changes when
/// the model files change (size or mtime) or ONNX Runtime is upgraded. ONNX Runtime adds the GPU's
/// compute capability to each engine file name itself.
pub fn cache_dir(state_dir: &Path, m: &Manifest, ort_version: &str) -> PathBuf {
    let mut h = Sha256::new();
    if let Ok(text) = std::fs::read(m.dir.join("manifest.toml")) {
        h.update(&text);
    }
    for (key, path) in m.file_paths() {
        h.update(key.as_bytes());
        if let Ok(meta) = std::fs::metadata(&path) {
            h.update(meta.len().to_le_bytes());
            let mtime = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_secs());
            h.update(mtime.to_le_bytes());
        }
    }
    let digest = h.finalize();
    let hash: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    let dir_name = m
        .dir
        .canonicalize()
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "model".into());
    state_dir
        .join("engines")
        .join("tensorrt")
        .join(format!("{}-{dir_name}-{hash}-ort{ort_version}", m.family))
}

/// Registers TensorRT (then CUDA for what TensorRT rejects, microsoft/onnxruntime#1837), both
/// failing the session instead of falling back to the CPU.
#[cfg(feature = "ort-tensorrt")]
pub(crate) fn register(
    builder: ort::session::builder::SessionBuilder,
    plan: &SessionPlan<'_>,
    file: &Path,
) -> Result<ort::session::builder::SessionBuilder, EngineError> {
    use super::provider::unavailable;
    use crate::config::ProviderKind;
    super::provider::require_built_in::<ort::ep::TensorRT>(
        ProviderKind::TensorRt,
        "TensorRT",
        plan,
        file,
    )?;
    std::fs::create_dir_all(plan.cache_dir).map_err(|e| EngineError::Io {
        path: plan.cache_dir.to_path_buf(),
        source: e,
    })?;
    let dir = plan.cache_dir.display().to_string();
    let s = plan.tensorrt;
    let mut trt = ort::ep::TensorRT::default()
        .with_device_id(plan.device_id)
        .with_fp16(s.fp16)
        .with_engine_cache(true)
        .with_engine_cache_path(&dir)
        .with_engine_cache_prefix(plan.role.manifest_key())
        .with_timing_cache(true)
        .with_timing_cache_path(&dir)
        .with_max_workspace_size((s.workspace_mib as usize) << 20)
        .with_builder_optimization_level(s.builder_optimization_level);
    // DLA takes convolution-heavy vision work; the decoder's attention and dynamic shapes would
    // mostly fall back to the GPU in fragments, so it stays on the GPU.
    if let Some(core) = s.dla_core
        && plan.role == super::provider::ModelRole::VisionEncoder
    {
        trt = trt.with_dla(true).with_dla_core(core);
    }
    if let Some(p) = &plan.profile {
        tracing::info!(
            model = plan.role.name(),
            min = %p.min_shapes(),
            opt = %p.opt_shapes(),
            max = %p.max_shapes(),
            "TensorRT profile"
        );
        trt = trt
            .with_profile_min_shapes(p.min_shapes())
            .with_profile_opt_shapes(p.opt_shapes())
            .with_profile_max_shapes(p.max_shapes());
    }
    builder
        .with_execution_providers([
            trt.build().error_on_failure(),
            super::cuda::provider(plan.device_id)
                .build()
                .error_on_failure(),
        ])
        .map_err(|e| unavailable(ProviderKind::TensorRt, file, e))
}

/// Without the feature the provider does not exist in this binary.
#[cfg(not(feature = "ort-tensorrt"))]
pub(crate) fn register(
    _builder: ort::session::builder::SessionBuilder,
    _plan: &SessionPlan<'_>,
    _file: &Path,
) -> Result<ort::session::builder::SessionBuilder, EngineError> {
    Err(EngineError::ProviderNotBuilt {
        provider: "tensorrt",
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn tiny() -> Manifest {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("engines/tiny/model");
        Manifest::load(&dir).expect("the tiny model (run scripts/setup.sh)")
    }

    #[test]
    fn the_vision_profile_spans_the_camera_geometries_and_tunes_for_the_largest() {
        let g = Geometry::new;
        let p = vision_profile(&tiny(), &[g(280, 140), g(336, 196), g(308, 224)], 4);
        assert_eq!(p.min_shapes(), "pixel_values:1x3x140x280");
        assert_eq!(p.opt_shapes(), "pixel_values:1x3x224x308"); // 88 tokens beat 336x196's 84
        assert_eq!(p.max_shapes(), "pixel_values:4x3x224x336");
    }

    #[test]
    fn a_model_with_a_processor_rule_bounds_the_vision_profile_by_its_largest_frame() {
        let mut m = tiny();
        m.vision.processor = Some(crate::engine::ProcessorSpec {
            resize: crate::engine::ResizeRule::SmartResize,
            resample: crate::engine::Resample::Bicubic,
            min_pixels: 128 * 784,
            max_pixels: 768 * 784,
            max_frames: 180,
            use_token_compression: true,
        });
        // sqrt(602112 * 16 / 9) = 1034.6 -> 1036: a single 16:9 frame (1008x560) fits either way.
        let p = vision_profile(&m, &[], 2);
        assert_eq!(p.max_shapes(), "pixel_values:2x3x1036x1036");
        assert_eq!(p.min_shapes(), "pixel_values:1x3x28x28");
    }

    #[test]
    fn the_decoder_profile_covers_an_empty_past_up_to_the_context() {
        let p = decoder_profile(&tiny(), 512);
        let min = p.min_shapes();
        let max = p.max_shapes();
        assert!(
            min.starts_with("inputs_embeds:1x1x64,attention_mask:1x1,position_ids:1x1,"),
            "{min}"
        );
        assert!(min.contains("past_key_values.1.value:1x2x0x16"), "{min}");
        assert!(
            max.contains("inputs_embeds:1x512x64,attention_mask:1x4096,position_ids:1x512"),
            "{max}"
        );
        assert!(
            max.ends_with("past_key_values.1.value:1x2x4095x16"),
            "{max}"
        );
        assert_eq!(p.inputs.len(), 3 + 4);
        assert_eq!(embed_profile(&tiny(), 512).max_shapes(), "input_ids:1x512");
    }

    #[test]
    fn the_engine_cache_is_keyed_by_model_files_and_onnx_runtime_version() {
        let m = tiny();
        let state = Path::new("/var/lib/edgevlm");
        let a = cache_dir(state, &m, "1.32.0");
        assert!(a.starts_with("/var/lib/edgevlm/engines/tensorrt"));
        let name = a.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with("tiny-model-") && name.ends_with("-ort1.32.0"),
            "{name}"
        );
        assert_eq!(a, cache_dir(state, &m, "1.32.0"));
        assert_ne!(a, cache_dir(state, &m, "1.23.2"));
    }
}
