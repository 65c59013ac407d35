//! `edgevlm eval`: a question set over clips through the runtime under the three conditions, the
//! table and the JSON report; bad question files, an undecodable clip and a model of the wrong
//! family (docs/EVAL.md).

mod common;

use common::edgevlm;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("edgevlm-eval-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Two held-out scenes written by engines/scenes/scenes.py.
fn scenes(dir: &Path) {
    scenes_of(dir, &["--first", "100", "--count", "2"]);
}

/// Held-out scenes written by engines/scenes/scenes.py (`args`: which, how long).
fn scenes_of(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new(repo().join(".venv/bin/python"))
        .arg(repo().join("engines/scenes/scenes.py"))
        .args(["--split", "heldout"])
        .args(args)
        .arg("--out")
        .arg(dir)
        .output()
        .expect("run scenes.py (scripts/setup.sh makes .venv)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn eval(args: &[&str]) -> (i32, String, String) {
    let out = edgevlm()
        .arg("eval")
        .args(args)
        .current_dir(repo())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn eval_scores_every_question_under_three_conditions_and_skips_a_broken_clip() {
    let dir = tmp("run");
    scenes(&dir);
    // A third clip that is not a video: reported, skipped and counted; the others go on.
    std::fs::write(dir.join("broken.mkv"), b"this is not a matroska file").unwrap();
    let mut clips = std::fs::read_to_string(dir.join("clips.jsonl")).unwrap();
    clips.push_str("{\"clip\":\"broken\",\"file\":\"broken.mkv\"}\n");
    std::fs::write(dir.join("clips.jsonl"), clips).unwrap();
    let mut qs = std::fs::read_to_string(dir.join("questions.jsonl")).unwrap();
    let asked = qs.lines().count();
    qs.push_str("{\"clip\":\"broken\",\"kind\":\"count\",\"question\":\"How many objects are there?\",\"answer\":\"There is one object.\"}\n");
    std::fs::write(dir.join("questions.jsonl"), qs).unwrap();
    let json = dir.join("report.json");
    let (code, out, err) = eval(&[
        "--clips",
        dir.join("clips.jsonl").to_str().unwrap(),
        "--questions",
        dir.join("questions.jsonl").to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("2 clips (1 skipped)"), "{out}");
    assert!(out.contains("skipped broken: "), "{out}");
    for header in ["video", "centre", "text", "colour", "all"] {
        assert!(out.contains(header), "{header}: {out}");
    }
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let items = report["items"].as_array().unwrap();
    assert_eq!(items.len(), asked, "every question of the two good clips");
    for item in items {
        let conditions: Vec<&str> = item["outcomes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["condition"].as_str().unwrap())
            .collect();
        assert_eq!(conditions, ["video", "centre", "text"], "{item}");
        for o in item["outcomes"].as_array().unwrap() {
            let answer = o["answer"].as_str().unwrap();
            assert!(!answer.starts_with("error:"), "{item}");
        }
    }
    // Every frame of both clips was sampled and encoded: a file is read at the encoder's pace.
    let frames: u64 = std::fs::read_to_string(dir.join("clips.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["frames"].as_u64())
        .sum();
    assert_eq!(report["frames"].as_u64(), Some(frames), "{out}");
    // DiffFP pruned the still parts: far fewer visual tokens than frames x tokens.
    let kept = report["kept_ratio"].as_f64().unwrap();
    assert!(kept > 0.0 && kept < 0.6, "kept {kept}");
    assert_eq!(report["skipped"][0]["clip"], "broken");
    // The scored table is the items' tally.
    let right: u64 = items
        .iter()
        .filter(|i| i["outcomes"][0]["right"].as_bool().unwrap())
        .count() as u64;
    assert_eq!(
        report["scores"]["all"]["video"]["right"].as_u64(),
        Some(right)
    );
    assert_eq!(
        report["scores"]["all"]["video"]["total"].as_u64(),
        Some(asked as u64)
    );
    // Narrations (several sentences) are also scored sentence by sentence: a right answer has
    // every sentence of the truth, and the row sums the truth's sentences.
    assert!(out.contains("sentence by sentence"), "{out}");
    let narrations: Vec<&serde_json::Value> =
        items.iter().filter(|i| i["kind"] == "narration").collect();
    assert_eq!(narrations.len(), 2, "one narration a clip");
    let truth_sentences: u64 = narrations
        .iter()
        .map(|i| i["expected"][0].as_str().unwrap().matches(". ").count() as u64 + 1)
        .sum();
    let row = &report["sentences"]["narration"]["video"];
    assert_eq!(row["expected"].as_u64(), Some(truth_sentences), "{row}");
    for item in &narrations {
        let o = &item["outcomes"][0];
        if o["right"].as_bool().unwrap() {
            assert_eq!(
                o["sentences"]["matched"], o["sentences"]["expected"],
                "{item}"
            );
        }
    }
    let matched: u64 = narrations
        .iter()
        .map(|i| i["outcomes"][0]["sentences"]["matched"].as_u64().unwrap())
        .sum();
    assert_eq!(row["matched"].as_u64(), Some(matched), "{row}");
}

/// The answers of one run of `edgevlm eval`, in the questions' order.
fn answers_of(dir: &Path, json: &Path, extra: &[&str]) -> Vec<String> {
    let (clips, questions) = (dir.join("clips.jsonl"), dir.join("questions.jsonl"));
    let mut args = vec![
        "--clips",
        clips.to_str().unwrap(),
        "--questions",
        questions.to_str().unwrap(),
        "--conditions",
        "video",
        "--json",
        json.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let (code, out, err) = eval(&args);
    assert_eq!(code, 0, "{out}\n{err}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    report["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["outcomes"][0]["answer"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_file_watched_twice_gives_the_same_answers_when_its_window_slides() {
    // Clips of 150 s under a 120-s window: the live cache evicts and is rebuilt as the clip plays.
    // Before, which frames it held depended on the host's speed: a file read on while the model
    // loaded (its first frames slid out of the window unseen, more or fewer), the watch worker
    // took frames in groups of the size that had arrived, and a question could come before the
    // last frame was in the live cache. Two runs differed in up to 13 of these 56 answers, and in
    // up to 28 of 113 over 8 such clips (docs/ARCHITECTURE.md, "Ingest").
    let dir = tmp("repeat");
    scenes_of(
        &dir,
        &["--first", "5000", "--count", "4", "--frames", "150"],
    );
    let window = ["--window-secs", "120", "--parallel", "4"];
    let first = answers_of(&dir, &dir.join("first.json"), &window);
    let second = answers_of(&dir, &dir.join("second.json"), &window);
    assert!(!first.is_empty());
    let differ: Vec<String> = first
        .iter()
        .zip(&second)
        .filter(|(a, b)| a != b)
        .map(|(a, b)| format!("{a:?} / {b:?}"))
        .collect();
    assert!(
        differ.is_empty(),
        "{} of {} answers differ between two runs:\n{}",
        differ.len(),
        first.len(),
        differ.join("\n")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn eval_names_the_file_and_line_of_a_bad_question_set() {
    let dir = tmp("bad");
    let clips = dir.join("clips.jsonl");
    std::fs::write(&clips, "{\"clip\":\"a\",\"file\":\"a.mkv\"}\n").unwrap();
    let q = dir.join("q.jsonl");
    let cases: [(&str, &str); 3] = [
        (
            "{\"clip\":\"a\",\"question\":\"Q\",\"answer\":\"A\"}\n{\"clip\": \n",
            "q.jsonl:2: ",
        ),
        (
            "{\"clip\":\"zz\",\"question\":\"Q\",\"answer\":\"A\"}\n",
            "q.jsonl:1: unknown clip `zz`",
        ),
        (
            "{\"clip\":\"a\",\"question\":\"Q\"}\n",
            "q.jsonl:1: needs a non-empty `answer`",
        ),
    ];
    for (text, want) in cases {
        std::fs::write(&q, text).unwrap();
        let (code, out, err) = eval(&[
            "--clips",
            clips.to_str().unwrap(),
            "--questions",
            q.to_str().unwrap(),
        ]);
        assert_eq!(code, 2, "{text}: {out}{err}");
        assert!(err.contains(want), "{text}: {err}");
    }
    let (code, _, err) = eval(&[
        "--clips",
        clips.to_str().unwrap(),
        "--questions",
        dir.join("absent.jsonl").to_str().unwrap(),
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("absent.jsonl"), "{err}");
    let (code, _, err) = eval(&[
        "--clips",
        clips.to_str().unwrap(),
        "--questions",
        q.to_str().unwrap(),
        "--conditions",
        "video,ears",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("`ears`"), "{err}");
}

#[test]
fn eval_refuses_a_model_of_another_family_naming_its_manifest() {
    let dir = tmp("family");
    let model = dir.join("model");
    std::fs::create_dir_all(&model).unwrap();
    let src = repo().join("engines/tiny/model");
    for f in std::fs::read_dir(&src).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, model.join(f.file_name().unwrap())).unwrap();
    }
    let manifest = std::fs::read_to_string(model.join("manifest.toml")).unwrap();
    std::fs::write(
        model.join("manifest.toml"),
        manifest.replace("family = \"tiny\"", "family = \"apollo\""),
    )
    .unwrap();
    let clips = dir.join("clips.jsonl");
    std::fs::write(&clips, "{\"clip\":\"a\",\"file\":\"a.mkv\"}\n").unwrap();
    let q = dir.join("q.jsonl");
    std::fs::write(&q, "{\"clip\":\"a\",\"question\":\"Q\",\"answer\":\"A\"}\n").unwrap();
    let (code, _, err) = eval(&[
        "--clips",
        clips.to_str().unwrap(),
        "--questions",
        q.to_str().unwrap(),
        "--model",
        model.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("manifest.toml") && err.contains("family `apollo`"),
        "{err}"
    );
}
