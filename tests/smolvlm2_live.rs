//! SmolVLM2 watching a live camera, on the reduced model in the published ONNX signature
//! (engines/smolvlm2/reduced.py, seeded random weights: its text is meaningless). The camera's
//! frames are the model's 512 x 512 squares, DiffFP prunes by the model's 64-pixel tokens, the
//! live cache follows the family's live format and a question is answered over HTTP (curl); the
//! format's items tokenize one by one as the whole text does; `validate` refuses camera settings
//! the family cannot take.

mod common;

use common::mqtt::free_port;
use common::smolvlm2::{download, init};
use common::{edgevlm, live, output_text as text};
use edgevlm::engine::{Manifest, Tokenizer};
use edgevlm::family::{self, Family};
use edgevlm::generate::render::{Rendered, Role, template_text};
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

const BOUND: Duration = Duration::from_secs(120);

/// A downloaded directory with the manifest `engines init` writes.
fn model() -> common::tempdir::TempDir {
    let tmp = download();
    let out = init(tmp.path());
    assert!(out.status.success(), "{}", text(&out));
    tmp
}

fn config(model: &Path, state: &Path, extra: &str) -> String {
    format!(
        "[runtime]\nstatus_interval_secs = 0.5\nstate_dir = \"{}\"\n\
         [engine]\nmodel_dir = \"{}\"\nthreads = 1\n\
         [mqtt]\nenabled = false\n{extra}\n\
         [[cameras]]\nid = \"door\"\nuri = \"test://ball\"\nsample_fps = 1\nwindow_secs = 8\n\
         narrate = [\"interval\"]\nnarrate_interval_secs = 3\nnarrate_max_tokens = 4\n",
        state.display(),
        model.display(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smolvlm2_watches_a_camera_in_square_frames_pruned_by_its_tokens_and_answers() {
    let model = model();
    let state = common::tempdir::tempdir("smolvlm2-live-state");
    let port = free_port();
    let text = config(
        model.path(),
        state.path(),
        &format!("[http]\nlisten = \"127.0.0.1:{port}\"\n"),
    );
    // The camera takes the model's square (whatever the source's size) and its 64-pixel tokens,
    // and at least four frames are in memory.
    let (rt, cam) = live::watching(&text, "door", |m| m.frames >= 4, BOUND).await;
    assert_eq!(cam.geometry.as_deref(), Some("512x512"), "{cam:?}");
    assert_eq!(cam.tokens_per_frame, Some(64), "{cam:?}");
    assert_eq!(cam.family, Some(Family::Smolvlm2), "{cam:?}");

    // A question over the window: every frame carries at most its 64 tokens, and DiffFP kept
    // fewer than all of them (a ball moving over a still background changes a few blocks). Were
    // its blocks not the model's tokens, the masks would not fit and every token would be kept.
    let (status, a) = live::ask(port, "door", "What is moving?", 4);
    rt.shutdown().await;
    assert_eq!(status, 200, "{a}");
    let frames = a["frames"].as_u64().unwrap();
    let visual = a["visual_tokens"].as_u64().unwrap();
    assert!(frames >= 4, "{a}");
    assert!(
        visual >= frames && visual < 64 * frames,
        "{visual} visual tokens over {frames} frames: {a}"
    );
    assert!(
        (1..=4).contains(&a["generated_tokens"].as_u64().unwrap()),
        "{a}"
    );
}

#[test]
fn live_items_tokenized_one_by_one_give_the_tokens_of_the_whole_text() {
    let model = model();
    let manifest = Manifest::load(model.path()).unwrap();
    assert!(
        manifest.chat_template.stream_timestamps,
        "engines init writes it on"
    );
    let tok = Tokenizer::from_file(&model.path().join("tokenizer.json")).unwrap();
    let image = manifest.special_tokens.image;
    let f = family::stream(Family::Smolvlm2).unwrap();
    // What a camera's cache and a conversation of two questions append, in order.
    let items: Vec<Rendered> = vec![
        f.prefix(Some("Answer briefly.")),
        f.frame(3, Some(0.0)).unwrap(),
        f.frame(2, Some(61.4)).unwrap(),
        f.ask(Role::User, "What is moving?"),
        template_text(" A ball.<end_of_utterance>"),
        f.turn_close(true),
        f.frame(1, Some(62.0)).unwrap(),
        f.ask(Role::User, "Where is it?"),
        template_text(" Left"),
        f.turn_close(false),
        f.frame(2, Some(63.0)).unwrap(),
    ];
    let whole: String = items.iter().map(Rendered::text).collect();
    assert_eq!(
        whole,
        "<|im_start|>System: Answer briefly.<end_of_utterance>\n\
         User: You are provided the following series of frames from a live video.\n\
         \nFrame from 00:00:<fake_token_around_image><global-img><image><image><image><fake_token_around_image>\
         \nFrame from 01:01:<fake_token_around_image><global-img><image><image><fake_token_around_image>\
         \n\nWhat is moving?<end_of_utterance>\nAssistant: A ball.<end_of_utterance>\nUser:\
         \nFrame from 01:02:<fake_token_around_image><global-img><image><fake_token_around_image>\
         \n\nWhere is it?<end_of_utterance>\nAssistant: Left<end_of_utterance>\nUser:\
         \nFrame from 01:03:<fake_token_around_image><global-img><image><image><fake_token_around_image>"
    );
    let one_by_one: Vec<u32> = items
        .iter()
        .flat_map(|r| r.token_ids(&tok, image))
        .collect();
    assert_eq!(one_by_one, template_text(&whole).token_ids(&tok, image));
    // No system message: the intro follows `<|im_start|>` at once.
    assert_eq!(
        f.prefix(Some("")).text(),
        "<|im_start|>User: You are provided the following series of frames from a live video.\n"
    );
    assert!(f.speak_signal(&manifest.special_tokens).is_none());
}

#[test]
fn validate_refuses_camera_settings_the_family_cannot_take() {
    let model = model();
    let state = common::tempdir::tempdir("smolvlm2-validate-state");
    let dir = common::tempdir::tempdir("smolvlm2-validate");
    let good = config(model.path(), state.path(), "");
    let path = dir.path().join("good.toml");
    std::fs::write(&path, &good).unwrap();
    let out = edgevlm().arg("validate").arg(&path).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    // The plan counts the square's 64 tokens a frame, whatever the source.
    let out = edgevlm()
        .args(["plan", "--json", "-c"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["cameras"][0]["frame_tokens"], 64, "{plan}");
    assert_eq!(plan["cameras"][0]["tokens_per_second"], 64.0, "{plan}");

    // A fixed size (which `[[cameras]]` takes in multiples of 28) other than the square, and the
    // model trigger, which needs a signal SmolVLM2 does not have.
    let bad = good
        .replace(
            "sample_fps = 1\n",
            "sample_fps = 1\nwidth = 560\nheight = 420\n",
        )
        .replace(
            "narrate = [\"interval\"]",
            "narrate = [\"interval\", \"model\"]",
        );
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, &bad).unwrap();
    let out = edgevlm().arg("validate").arg(&path).output().unwrap();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains("cameras[0].width: camera door: family `smolvlm2` takes 512x512 frames")
            && said.contains("not 560x420; remove width and height"),
        "{said}"
    );
    assert!(
        said.contains("cameras[0].narrate: camera door: the `model` trigger")
            && said.contains("family `smolvlm2` has none"),
        "{said}"
    );
    assert!(said.contains("2 problem(s)"), "{said}");
}
