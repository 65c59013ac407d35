//! SmolVLM2's published ONNX signature through the runtime, against transformers' own SmolVLM
//! classes: engines/smolvlm2/reduced.py builds a reduced SmolVLM2 with seeded weights, exports it
//! to the signature of the files HuggingFaceTB publishes (`onnx/vision_encoder.onnx` with
//! `pixel_values` and `pixel_attention_mask`, `embed_tokens.onnx`, `decoder_model_merged.onnx`)
//! and records what transformers computes (scripts/test.sh makes the fixture). Here the runtime
//! writes the directory's manifest (`edgevlm engines init`), checks and loads it, and must give
//! the processor's resized frames (two Lanczos steps), transformers' image features, the
//! processor's prompt ids, the prompt's logits and the greedy tokens; directories that do not fit the family are refused naming the file and the tensor.

mod common;

use common::smolvlm2::{download, init};
use common::{edgevlm, output_text as text};
use edgevlm::engine::{EngineOptions, Engines, LogitRows, Tokenizer};
use edgevlm::family::smolvlm2;
use edgevlm::generate::render::FrameSlot;
use std::path::Path;

fn check(dir: &Path) -> std::process::Output {
    edgevlm()
        .args(["engines", "check"])
        .arg(dir)
        .output()
        .unwrap()
}

fn read_f32(path: &Path) -> Vec<f32> {
    std::fs::read(path)
        .unwrap()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// max |got - want| over max(1, max |want|).
fn relative_diff(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(1.0f32, |m, x| m.max(x.abs()));
    got.iter()
        .zip(want)
        .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()))
        / scale
}

fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, x) in row.iter().enumerate() {
        if *x > row[best] {
            best = i;
        }
    }
    best as u32
}

#[test]
fn a_downloaded_directory_gets_its_manifest_and_matches_transformers() {
    let tmp = download();
    let dir = tmp.path();
    let out = init(dir);
    assert!(out.status.success(), "{}", text(&out));
    let manifest = std::fs::read_to_string(dir.join("manifest.toml")).unwrap();
    for line in [
        "family = \"smolvlm2\"",
        "vision_encoder = \"onnx/vision_encoder.onnx\"",
        "layout = \"images\"",
        "image_size = 512",
        "pixel_mask = \"pixel_attention_mask\"",
    ] {
        assert!(manifest.contains(line), "{line} in\n{manifest}");
    }
    // A second init keeps the user's manifest unless told.
    let again = init(dir);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    assert!(text(&again).contains("--force"), "{}", text(&again));

    let out = check(dir);
    assert!(out.status.success(), "{}", text(&out));
    let report = text(&out);
    assert!(report.contains("ok (smolvlm2 model)"), "{report}");
    assert!(
        report.contains("vision encoder: 1 frame 512x512 -> [1, 64, 64]"),
        "{report}"
    );

    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
            .unwrap();
    let tol = reference["tolerance"].as_f64().unwrap() as f32;
    let engines = Engines::load(&EngineOptions::cpu(dir.to_path_buf())).unwrap();
    let m = engines.manifest();

    // The video's frames resized by the family as the processor resized them, byte for byte.
    let count = reference["frames"]["count"].as_u64().unwrap() as usize;
    let rgb = std::fs::read(dir.join("frames_512.rgb")).unwrap();
    assert_eq!(rgb.len(), count * 512 * 512 * 3);
    let (fw, fh) = (
        reference["frames"]["width"].as_u64().unwrap() as u32,
        reference["frames"]["height"].as_u64().unwrap() as u32,
    );
    let source: Vec<u8> = reference["frames"]["rgb"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u8)
        .collect();
    let mut resize = smolvlm2::preprocess::FrameResize::new(fw, fh, 512, 512).unwrap();
    let row = fw as usize * 3;
    for (i, (src, want)) in source
        .chunks_exact(row * fh as usize)
        .zip(rgb.chunks_exact(512 * 512 * 3))
        .enumerate()
    {
        let mut got = vec![0u8; resize.dst_len()];
        resize.resize(src, row, &mut got).unwrap();
        let differing = got.iter().zip(want).filter(|(a, b)| a != b).count();
        assert_eq!(
            differing, 0,
            "frame {i}: bytes differ from the processor's resize"
        );
    }

    // Those frames, normalised and encoded by the runtime.
    let frames: Vec<&[u8]> = rgb.chunks_exact(512 * 512 * 3).collect();
    let features = engines.vision().encode(&frames, 512, 512).unwrap();
    assert_eq!(features.shape(), [count, smolvlm2::IMAGE_SEQ_LEN, 64]);
    let want = read_f32(&dir.join("features.f32"));
    let d = relative_diff(features.as_slice(), &want);
    assert!(
        d <= tol,
        "image features differ by {d:e} (tolerance {tol:e})"
    );

    // The processor's prompt ids, from the family's own prompt and the directory's tokenizer.
    let fps = reference["fps"].as_f64().unwrap();
    let slots: Vec<FrameSlot> = (0..count)
        .map(|i| FrameSlot {
            time_secs: i as f64 / fps,
            kept: smolvlm2::IMAGE_SEQ_LEN,
        })
        .collect();
    let prompt = smolvlm2::video_prompt(
        &slots,
        Some(count as f64 / fps),
        reference["question"].as_str().unwrap(),
    )
    .unwrap();
    let tokenizer = Tokenizer::from_file(&dir.join("tokenizer.json")).unwrap();
    let ids = prompt.token_ids(&tokenizer, m.special_tokens.image);
    let want_ids: Vec<u32> = reference["input_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(ids, want_ids, "prompt ids");

    // The prompt with the features in its image rows, then greedy decoding.
    let hidden = m.text.hidden_size as usize;
    let mut embeds = engines.embedder().embed(&ids).unwrap();
    let image_rows: Vec<usize> = (0..ids.len())
        .filter(|&i| ids[i] == m.special_tokens.image)
        .collect();
    assert_eq!(image_rows.len(), count * smolvlm2::IMAGE_SEQ_LEN);
    for (k, row) in image_rows.iter().enumerate() {
        embeds[row * hidden..(row + 1) * hidden]
            .copy_from_slice(&features.as_slice()[k * hidden..(k + 1) * hidden]);
    }
    let positions: Vec<i64> = (0..ids.len() as i64).collect();
    let empty = engines.decoder().empty_cache().unwrap();
    let mut out = engines
        .decoder()
        .forward(&empty, &embeds, &positions, LogitRows::Last)
        .unwrap();
    let want_logits: Vec<f32> = reference["last_logits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap() as f32)
        .collect();
    let d = relative_diff(&out.logits, &want_logits);
    assert!(
        d <= tol,
        "prompt logits differ by {d:e} (tolerance {tol:e})"
    );
    let want_tokens: Vec<u32> = reference["greedy_tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    let mut tokens = Vec::new();
    let mut at = ids.len() as i64;
    while tokens.len() < want_tokens.len() {
        let next = argmax(&out.logits);
        tokens.push(next);
        let e = engines.embedder().embed(&[next]).unwrap();
        out = engines
            .decoder()
            .forward(&out.present, &e, &[at], LogitRows::Last)
            .unwrap();
        at += 1;
    }
    assert_eq!(tokens, want_tokens, "greedy tokens");
}

#[test]
fn directories_that_do_not_fit_the_family_are_refused_with_the_file_and_the_name() {
    let tmp = download();
    let dir = tmp.path();
    assert!(init(dir).status.success());
    let manifest = std::fs::read_to_string(dir.join("manifest.toml")).unwrap();

    // A vision encoder of the frames layout (the tiny model's: [T, 3, H, W], no pixel mask).
    let tiny = Path::new(env!("CARGO_MANIFEST_DIR")).join("engines/tiny/model");
    for f in ["vision_encoder.onnx", "vision_encoder.onnx.data"] {
        if tiny.join(f).exists() {
            std::fs::copy(tiny.join(f), dir.join("onnx").join(f)).unwrap();
        }
    }
    let no_sums = manifest[..manifest.find("[generator.sha256]").unwrap()].to_string();
    std::fs::write(dir.join("manifest.toml"), &no_sums).unwrap();
    let out = check(dir);
    assert!(!out.status.success());
    let msg = text(&out);
    assert!(
        msg.contains("onnx/vision_encoder.onnx") && msg.contains("pixel_values"),
        "{msg}"
    );
    assert!(msg.contains("rank 5"), "{msg}");

    // The family's layout is not optional.
    std::fs::write(
        dir.join("manifest.toml"),
        no_sums
            .replace("layout = \"images\"\n", "")
            .replace("image_size = 512\n", "")
            .replace("pixel_mask = \"pixel_attention_mask\"\n", ""),
    )
    .unwrap();
    let msg = text(&check(dir));
    assert!(
        msg.contains("vision.layout: family `smolvlm2` takes layout = \"images\", got \"frames\""),
        "{msg}"
    );

    // The mask's name must be one the file has.
    let fresh = download();
    assert!(init(fresh.path()).status.success());
    let path = fresh.path().join("manifest.toml");
    let renamed = std::fs::read_to_string(&path).unwrap().replace(
        "pixel_mask = \"pixel_attention_mask\"",
        "pixel_mask = \"mask\"",
    );
    std::fs::write(&path, renamed).unwrap();
    let msg = text(&check(fresh.path()));
    assert!(
        msg.contains("vision_encoder.onnx")
            && msg.contains("mask")
            && msg.contains("no such input"),
        "{msg}"
    );
    assert!(
        msg.contains("pixel_attention_mask"),
        "the file's inputs are named: {msg}"
    );

    // A tokenizer without SmolVLM2's tokens is refused by init, naming the file and the token.
    let bare = download();
    let tj = bare.path().join("tokenizer.json");
    let stripped = std::fs::read_to_string(&tj)
        .unwrap()
        .replace("<end_of_utterance>", "<end_of_turn>");
    std::fs::write(&tj, stripped).unwrap();
    let out = init(bare.path());
    assert!(!out.status.success());
    let msg = text(&out);
    assert!(
        msg.contains("tokenizer.json: no added token <end_of_utterance>"),
        "{msg}"
    );
    assert!(!bare.path().join("manifest.toml").exists());

    // Not a SmolVLM2 checkpoint at all.
    let out = init(&tiny);
    assert!(!out.status.success());
    assert!(text(&out).contains("manifest.toml exists") || text(&out).contains("config.json"));
}
