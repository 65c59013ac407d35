//! Apollo's clip path on the tiny Apollo-shaped model (engines/apollo/generate.py, seeded random
//! weights: its text is meaningless). The runtime's clip encoder gives the tokens of the numpy
//! reference (engines/apollo/check.py); a camera sampled at the clips' 2 fps fills clips of 4
//! frames, each becoming 32 tokens in the live cache in Apollo's clip lines, and a question is
//! answered over HTTP (curl); `validate` refuses a sample rate the clips cannot take.

mod common;
mod engine_common;

use common::mqtt::free_port;
use common::{edgevlm, live, output_text as text};
use edgevlm::engine::{Engines, Manifest, Tokenizer};
use edgevlm::family::{self, Family};
use edgevlm::generate::render::{Rendered, Role, template_text};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const BOUND: Duration = Duration::from_secs(120);

fn apollo_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("engines/apollo/model");
    assert!(
        dir.join("manifest.toml").is_file(),
        "{} is missing: run scripts/setup.sh (it generates the Apollo-shaped model)",
        dir.display()
    );
    dir
}

#[test]
fn the_clip_encoder_gives_the_reference_tokens_of_a_clip() {
    // The reference: the same computation in numpy (float64), run by the project venv.
    let out_dir = common::tempdir::tempdir("apollo-reference");
    let out = Command::new(engine_common::python())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("engines/apollo/check.py"))
        .arg("--model")
        .arg(apollo_dir())
        .arg("--out")
        .arg(out_dir.path())
        .output()
        .expect("python");
    assert!(out.status.success(), "{}", text(&out));
    let reference: Value =
        serde_json::from_slice(&std::fs::read(out_dir.path().join("clip.json")).unwrap()).unwrap();
    let side = reference["size"].as_u64().unwrap() as u32;
    let frames: Vec<Vec<u8>> = reference["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            f.as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u8)
                .collect()
        })
        .collect();
    let want: Vec<f32> = reference["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap() as f32)
        .collect();

    let e = Engines::load(&engine_common::options(&apollo_dir())).unwrap_or_else(|e| panic!("{e}"));
    let clip = e.vision().clip().expect("a clips model");
    assert_eq!((clip.frames, clip.secs, clip.tokens), (4, 2.0, 32));
    let refs: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();
    let got = e.vision().encode(&refs, side, side).unwrap();
    assert_eq!(got.shape(), [1, 32, 64]);
    let d = engine_common::max_abs_diff(got.as_slice(), &want);
    assert!(
        d <= 1e-4,
        "the clip's tokens differ from the reference by {d:e}"
    );
    // Two clips in one run are the same two clips run alone.
    let mut eight = refs.clone();
    eight.extend(refs.iter().rev());
    let two = e.vision().encode(&eight, side, side).unwrap();
    assert_eq!(two.shape(), [2, 32, 64]);
    assert!(engine_common::max_abs_diff(two.frame(0), got.frame(0)) <= 1e-5);
    assert!(engine_common::max_abs_diff(two.frame(1), two.frame(0)) > 1e-3);
    // What is not whole clips of its square is refused, with what it expects.
    let err = e.vision().encode(&refs[..3], side, side).unwrap_err();
    assert!(err.to_string().contains("whole clips of 4"), "{err}");
    let err = e.vision().encode(&refs, 28, 28).unwrap_err();
    assert!(err.to_string().contains("56x56"), "{err}");
}

fn config(state: &Path, sample_fps: &str, extra: &str) -> String {
    format!(
        "[runtime]\nstatus_interval_secs = 0.5\nstate_dir = \"{}\"\n\
         [engine]\nmodel_dir = \"{}\"\nthreads = 1\n\
         [mqtt]\nenabled = false\n{extra}\n\
         [[cameras]]\nid = \"yard\"\nuri = \"test://ball\"\nsample_fps = {sample_fps}\nwindow_secs = 8\n\
         narrate = [\"interval\"]\nnarrate_interval_secs = 3\nnarrate_max_tokens = 4\n",
        state.display(),
        apollo_dir().display(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apollo_watches_a_camera_in_clips_of_four_frames_and_answers() {
    let state = common::tempdir::tempdir("apollo-live-state");
    let port = free_port();
    let text = config(
        state.path(),
        "2",
        &format!("[http]\nlisten = \"127.0.0.1:{port}\"\n"),
    );
    // Two clips in memory, both counted: eight frames sampled at 2 fps, padded to the model's
    // square, each run through the encoder.
    let two_clips = |m: &edgevlm::memory::MemoryReport| m.frames >= 2 && m.frames_encoded >= 8;
    let (rt, cam) = live::watching(&text, "yard", two_clips, BOUND).await;
    assert_eq!(cam.geometry.as_deref(), Some("56x56"), "{cam:?}");
    assert_eq!(cam.family, Some(Family::Apollo), "{cam:?}");
    // A frame's share of its clip: 32 tokens over 4 frames.
    assert_eq!(cam.tokens_per_frame, Some(8), "{cam:?}");
    let memory = cam.memory.unwrap();
    // The encoder runs whole clips: its frames are counted four at a time.
    assert_eq!(memory.frames_encoded % 4, 0, "{memory:?}");

    let (status, a) = live::ask(port, "yard", "What is moving?", 4);
    rt.shutdown().await;
    assert_eq!(status, 200, "{a}");
    // The answer's footage is clips, each exactly its 32 tokens (nothing is pruned from a clip).
    let clips = a["frames"].as_u64().unwrap();
    let visual = a["visual_tokens"].as_u64().unwrap();
    assert!(clips >= 2, "{a}");
    assert_eq!(visual, 32 * clips, "{a}");
    assert!(
        (1..=4).contains(&a["generated_tokens"].as_u64().unwrap()),
        "{a}"
    );
}

#[test]
fn live_clip_lines_tokenized_one_by_one_give_the_tokens_of_the_whole_text() {
    let dir = apollo_dir();
    let manifest = Manifest::load(&dir).unwrap();
    assert!(manifest.chat_template.stream_timestamps);
    let tok = Tokenizer::from_file(&dir.join("tokenizer.json")).unwrap();
    let image = manifest.special_tokens.image;
    let f = family::stream(Family::Apollo).unwrap();
    let items: Vec<Rendered> = vec![
        f.prefix(Some("Answer briefly.")),
        f.item(2, Some((0.0, 1.5))).unwrap(),
        f.item(1, Some((2.0, 3.5))).unwrap(),
        f.ask(Role::User, "What is moving?"),
        template_text(" A ball.<|im_end|>"),
        f.turn_close(true),
        f.item(1, Some((4.0, 5.5))).unwrap(),
        f.ask(Role::User, "Where?"),
        template_text(" Left"),
        f.turn_close(false),
    ];
    let whole: String = items.iter().map(Rendered::text).collect();
    assert_eq!(
        whole,
        "<|im_start|>system\n\nAnswer briefly.<|im_end|>\n<|im_start|>user\n\
         You are provided the following series of clips from a live video.\n\
         0.0-1.5 seconds: <|video_token|><|video_token|>,\n\
         2.0-3.5 seconds: <|video_token|>,\n\
         \nWhat is moving?<|im_end|>\n<|im_start|>assistant\n A ball.<|im_end|>\n<|im_start|>user\n\
         4.0-5.5 seconds: <|video_token|>,\n\
         \nWhere?<|im_end|>\n<|im_start|>assistant\n Left<|im_end|>\n<|im_start|>user\n"
    );
    let one_by_one: Vec<u32> = items
        .iter()
        .flat_map(|r| r.token_ids(&tok, image))
        .collect();
    assert_eq!(one_by_one, template_text(&whole).token_ids(&tok, image));
    assert!(f.speak_signal(&manifest.special_tokens).is_none());
    // A clip ending before it starts is a bug the render names.
    assert!(f.item(1, Some((3.0, 2.0))).is_err());
}

#[test]
fn validate_refuses_a_sample_rate_the_clips_cannot_take_and_plan_counts_clip_tokens() {
    let state = common::tempdir::tempdir("apollo-validate-state");
    let dir = common::tempdir::tempdir("apollo-validate");
    let good = dir.path().join("good.toml");
    std::fs::write(&good, config(state.path(), "2", "")).unwrap();
    let out = edgevlm().arg("validate").arg(&good).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    // Tokens per frame and per second are the clip's: 32 over 4 frames, 16 a second at 2 fps.
    let out = edgevlm()
        .args(["plan", "--json", "-c"])
        .arg(&good)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    let cam = &plan["cameras"][0];
    assert_eq!(cam["frame_tokens"], 8, "{cam}");
    assert_eq!(cam["tokens_per_second"], 16.0, "{cam}");
    // 8 s at 2 fps: 16 frames, 4 clips (and the slack the live cache keeps).
    assert_eq!(cam["window_frames"], 16, "{cam}");
    assert!(cam["window_cache_frames"].as_u64().unwrap() <= 6, "{cam}");
    for fps in ["1", "4"] {
        let bad = dir.path().join(format!("fps-{fps}.toml"));
        std::fs::write(&bad, config(state.path(), fps, "")).unwrap();
        let out = edgevlm().arg("validate").arg(&bad).output().unwrap();
        let msg = text(&out);
        assert!(!out.status.success(), "{msg}");
        assert!(msg.contains("cameras[0].sample_fps"), "{msg}");
        assert!(msg.contains("sampled at 2 fps"), "{msg}");
    }
}

#[test]
fn a_model_directory_that_does_not_match_the_clips_layout_is_refused_with_file_and_expectation() {
    let dir = common::tempdir::tempdir("apollo-bad");
    let copy = |to: &Path| {
        std::fs::create_dir_all(to).unwrap();
        for f in std::fs::read_dir(apollo_dir()).unwrap() {
            let f = f.unwrap().path();
            std::fs::copy(&f, to.join(f.file_name().unwrap())).unwrap();
        }
    };
    let check = |model: &Path| {
        let out = edgevlm()
            .args(["engines", "check"])
            .arg(model)
            .output()
            .unwrap();
        assert!(!out.status.success());
        text(&out)
    };
    // A clips manifest without its clip.
    let model = dir.path().join("no-clip");
    copy(&model);
    let manifest = model.join("manifest.toml");
    let m = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, m.replace("clip_frames = 4\n", "")).unwrap();
    let msg = check(&model);
    assert!(
        msg.contains("manifest.toml") && msg.contains("vision.clip_frames"),
        "{msg}"
    );
    // A frames encoder (the tiny model's) where the manifest says clips: the file, the tensor
    // and the expected signature are named.
    let model = dir.path().join("frames-encoder");
    copy(&model);
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("engines/tiny/model/vision_encoder.onnx"),
        model.join("vision_encoder.onnx"),
    )
    .unwrap();
    let manifest = model.join("manifest.toml");
    let m = std::fs::read_to_string(&manifest).unwrap();
    let m = m
        .lines()
        .filter(|l| !l.starts_with("\"vision_encoder.onnx\""))
        .collect::<Vec<_>>();
    std::fs::write(&manifest, m.join("\n")).unwrap();
    let msg = check(&model);
    assert!(
        msg.contains("vision_encoder.onnx")
            && msg.contains("`pixel_values`")
            && msg.contains("[clips, 4, 3, 56, 56]"),
        "{msg}"
    );
}
