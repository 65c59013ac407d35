//! The vision encoder wrapper on the tiny model: shapes per geometry, frame independence and
//! batching, normalisation against the reference (numpy + onnxruntime in the venv), input errors.

mod engine_common;

use edgevlm::engine::{EngineError, Engines, ErrorKind, Progress, warm_up};
use edgevlm::ingest::Geometry;
use engine_common::{frame, max_abs_diff};
use std::io::Write;
use std::process::{Command, Stdio};

#[test]
fn visual_token_shapes_follow_the_geometry() {
    let e = engine_common::tiny();
    for (w, h) in [(28, 28), (56, 28), (28, 84), (112, 84), (336, 196)] {
        for t in [1usize, 3] {
            let frames: Vec<Vec<u8>> = (0..t).map(|i| frame(w, h, i as u32)).collect();
            let refs: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();
            let out = e.vision().encode(&refs, w, h).unwrap();
            let n = ((w / 28) * (h / 28)) as usize;
            assert_eq!(out.shape(), [t, n, 64], "{w}x{h} x{t}");
            assert_eq!(out.as_slice().len(), t * n * 64);
            assert!(out.as_slice().iter().all(|x| x.is_finite()));
        }
    }
}

#[test]
fn frames_are_encoded_independently_so_batching_does_not_change_tokens() {
    let mut opts = engine_common::options(&engine_common::tiny_dir());
    opts.engine.vision_batch_frames = 2;
    let e = Engines::load(&opts).unwrap();
    let frames: Vec<Vec<u8>> = (0..5).map(|i| frame(84, 56, i)).collect();
    let refs: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();
    // Five frames run as batches of 2, 2 and 1.
    let batched = e.vision().encode(&refs, 84, 56).unwrap();
    for (i, f) in frames.iter().enumerate() {
        let alone = e.vision().encode(&[f], 84, 56).unwrap();
        let d = max_abs_diff(batched.frame(i), alone.frame(0));
        assert!(d <= 1e-5, "frame {i} differs by {d:e} inside a batch");
    }
    assert!(max_abs_diff(batched.frame(0), batched.frame(1)) > 1e-2);
}

#[test]
fn normalisation_and_layout_match_the_reference_processor() {
    let e = engine_common::tiny();
    let (w, h) = (56u32, 84u32);
    let f = frame(w, h, 7);
    let ours = e.vision().encode(&[&f], w, h).unwrap();
    // numpy: (rgb / 255 - mean) / std in float32, HWC -> CHW, then the ONNX graph in Python.
    let script = r#"
import sys, numpy as np, onnxruntime as ort
try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11 (scripts/debian11.sh's root): the same parser
    import tomli as tomllib
d, w, h = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
m = tomllib.load(open(d + "/manifest.toml", "rb"))["vision"]
rgb = np.frombuffer(sys.stdin.buffer.read(), dtype=np.uint8).reshape(h, w, 3)
x = (rgb.astype(np.float32) / np.float32(255) - np.array(m["mean"], np.float32)) / np.array(m["std"], np.float32)
x = x.transpose(2, 0, 1)[None].astype(np.float32)
s = ort.InferenceSession(d + "/vision_encoder.onnx", providers=["CPUExecutionProvider"])
sys.stdout.buffer.write(s.run(None, {m["input"]: x})[0].astype("<f4").tobytes())
"#;
    let dir = engine_common::tiny_dir();
    let mut child = Command::new(engine_common::python())
        .args([
            "-c",
            script,
            dir.to_str().unwrap(),
            &w.to_string(),
            &h.to_string(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&f).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let reference: Vec<f32> = out
        .stdout
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let d = max_abs_diff(ours.as_slice(), &reference);
    assert!(d <= 1e-5, "differs from numpy + onnxruntime by {d:e}");
}

#[test]
fn frames_of_the_wrong_size_are_input_errors() {
    let e = engine_common::tiny();
    let f = frame(56, 56, 0);
    let cases: [(&[&[u8]], u32, u32, &str); 4] = [
        (&[&f], 50, 56, "not a positive multiple of 28"),
        (&[&f], 0, 56, "not a positive multiple of 28"),
        (
            &[&f[..100]],
            56,
            56,
            "frame 0 has 100 bytes; 56x56 packed RGB is 9408",
        ),
        (&[], 56, 56, "no frames"),
    ];
    for (frames, w, h, expect) in cases {
        let err = e.vision().encode(frames, w, h).unwrap_err();
        assert!(matches!(err, EngineError::Input { .. }), "{err}");
        assert_eq!(err.kind(), ErrorKind::Input);
        assert!(err.to_string().contains(expect), "{err}");
    }
}

#[test]
fn warming_up_runs_the_vision_encoder_per_geometry_and_the_decoder_once() {
    // The same code `engines build` runs on TensorRT; on the CPU it only exercises the shapes.
    let e = engine_common::tiny();
    let geometries = [Geometry::new(56, 28), Geometry::new(112, 84)];
    let mut progress = Progress::hidden(3);
    let mut steps = Vec::new();
    warm_up(&e, &geometries, &mut progress, &mut steps).unwrap();
    let names: Vec<&str> = steps.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(
        names,
        [
            "vision encoder 56x28",
            "vision encoder 112x84",
            "embedding + decoder (prefill 512 tokens, 1 decode step)"
        ]
    );
    assert_eq!(progress.done(), 3);
}

/// Encodes each request's frames on its own thread, all at once (with `first_ahead`, the others
/// once the first one's first run is done); each thread's features and when it got them.
fn concurrently(
    e: &std::sync::Arc<Engines>,
    requests: Vec<(u32, u32, Vec<Vec<u8>>)>,
    first_ahead: bool,
) -> Vec<(edgevlm::engine::VisualTokens, std::time::Instant)> {
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(requests.len()));
    let start = e.vision().batch_counts().runs;
    let threads: Vec<_> = requests
        .into_iter()
        .enumerate()
        .map(|(i, (w, h, frames))| {
            let (e, barrier) = (e.clone(), barrier.clone());
            std::thread::spawn(move || {
                let refs: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();
                barrier.wait();
                if first_ahead && i > 0 {
                    // Queued behind the first: once its first run is done (it has many more).
                    while e.vision().batch_counts().runs == start {
                        std::thread::yield_now();
                    }
                }
                let out = e.vision().encode(&refs, w, h).unwrap();
                (out, std::time::Instant::now())
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn cameras_share_vision_runs_and_each_gets_its_own_features() {
    let mut opts = engine_common::options(&engine_common::tiny_dir());
    opts.engine.vision_batch_frames = 4;
    // Long enough that the four threads meet in one run on a loaded machine.
    opts.engine.vision_batch_wait_ms = Some(50);
    let e = std::sync::Arc::new(Engines::load(&opts).unwrap());
    let frames: Vec<Vec<u8>> = (0..4).map(|i| frame(84, 56, 10 + i)).collect();
    let alone: Vec<_> = frames
        .iter()
        .map(|f| e.vision().encode(&[f], 84, 56).unwrap())
        .collect();
    let before = e.vision().batch_counts();
    let out = concurrently(
        &e,
        frames.iter().map(|f| (84, 56, vec![f.clone()])).collect(),
        false,
    );
    let after = e.vision().batch_counts();
    for (i, (tokens, _)) in out.iter().enumerate() {
        assert_eq!(tokens.frames(), 1);
        let d = max_abs_diff(tokens.frame(0), alone[i].frame(0));
        assert!(
            d <= 1e-5,
            "camera {i}'s features differ by {d:e} in a shared run"
        );
    }
    assert_eq!(after.frames - before.frames, 4);
    assert!(
        after.runs - before.runs < 4 && after.shared_runs > before.shared_runs,
        "no run was shared: {before:?} -> {after:?}"
    );
}

#[test]
fn a_camera_with_a_backlog_does_not_hold_back_another_or_another_geometry() {
    let mut opts = engine_common::options(&engine_common::tiny_dir());
    opts.engine.vision_batch_frames = 4;
    opts.engine.vision_batch_wait_ms = Some(20);
    let e = std::sync::Arc::new(Engines::load(&opts).unwrap());
    let backlog: Vec<Vec<u8>> = (0..256).map(|i| frame(112, 84, i)).collect();
    let one = vec![frame(112, 84, 99)];
    let other = vec![frame(56, 56, 7)];
    let out = concurrently(
        &e,
        vec![
            (112, 84, backlog.clone()),
            (112, 84, one.clone()),
            (56, 56, other.clone()),
        ],
        true,
    );
    assert_eq!(out[0].0.frames(), 256);
    // Every frame's features are its own, wherever in the runs it went.
    let check = |tokens: &edgevlm::engine::VisualTokens, frames: &[Vec<u8>], w, h| {
        for (i, f) in frames.iter().enumerate() {
            let alone = e.vision().encode(&[f], w, h).unwrap();
            assert!(
                max_abs_diff(tokens.frame(i), alone.frame(0)) <= 1e-5,
                "frame {i}"
            );
        }
    };
    check(&out[0].0, &backlog, 112, 84);
    check(&out[1].0, &one, 112, 84);
    check(&out[2].0, &other, 56, 56);
    // The single frame and the other geometry were served while the backlog's 64 runs went on.
    assert!(
        out[1].1 < out[0].1,
        "the one frame waited for the whole backlog"
    );
    assert!(
        out[2].1 < out[0].1,
        "the other geometry waited for the whole backlog"
    );
}
