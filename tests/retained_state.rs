//! Retained state tells the truth (docs/MQTT.md, "Status"): a camera's state changes are
//! published when they happen, not on the status timer (here an hour); a clean stop leaves every
//! camera `stopped`, sent before `offline`; every status names the run that published it.
//! In process, on Mosquitto, with a real RTSP camera frozen with SIGSTOP.

mod common;

use common::ChildCamera;
use common::mqtt::{Mosquitto, Received, Subscriber};
use edgevlm::config::Config;
use edgevlm::runtime::{Runtime, RuntimeOptions, STOPPED_REASON};
use std::collections::BTreeSet;
use std::time::Duration;

/// A failure bound only: every wait ends as soon as its message comes.
const BOUND: Duration = Duration::from_secs(60);

fn states(m: &[Received]) -> Vec<String> {
    m.iter()
        .filter(|r| r.topic == "edgevlm/hung/status")
        .map(|r| r.json()["state"].as_str().unwrap_or("?").to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_changes_are_published_when_they_happen_and_a_clean_stop_leaves_stopped() {
    let broker = Mosquitto::start();
    let camera = ChildCamera::spawn(0);
    let state = std::env::temp_dir().join(format!("edgevlm-retained-{}", std::process::id()));
    // The status timer never fires during the test: everything published is a change.
    let text = format!(
        "[runtime]\nstatus_interval_secs = 3600\nstate_dir = \"{}\"\n\
         [engine]\nenabled = false\n\
         [mqtt]\nbroker = \"{}\"\nretry_initial_secs = 0.1\nretry_max_secs = 0.5\n\
         [[cameras]]\nid = \"hung\"\nuri = \"{}\"\nsample_fps = 2\nstall_secs = 2\n\
         retry_initial_secs = 0.5\nretry_max_secs = 1\n",
        state.display(),
        broker.url(),
        camera.url()
    );
    let config = Config::parse(&text, None).unwrap_or_else(|e| panic!("{e}"));
    let w = Subscriber::start(broker.port, &["edgevlm/available", "edgevlm/hung/status"]).await;
    let rt = Runtime::start(config, RuntimeOptions::default())
        .await
        .expect("the runtime starts");

    let running = |m: &[Received]| states(m).iter().any(|s| s == "running");
    assert!(w.wait(BOUND, running).await, "{:?}", w.messages());

    // A freeze: the watchdog restarts the camera after stall_secs; thawed, it runs again. Both
    // changes are published although the timer is an hour.
    camera.freeze();
    let retrying = |m: &[Received]| {
        m.iter().any(|r| {
            r.topic == "edgevlm/hung/status"
                && r.json()["state"] == "retrying"
                && r.json()["reason"]
                    .as_str()
                    .is_some_and(|s| s.contains("stalled"))
        })
    };
    assert!(w.wait(BOUND, retrying).await, "{:?}", states(&w.messages()));
    camera.thaw();
    let back = |m: &[Received]| {
        let s = states(m);
        s.iter()
            .position(|s| s == "retrying")
            .is_some_and(|i| s[i..].iter().any(|s| s == "running"))
    };
    assert!(w.wait(BOUND, back).await, "{:?}", states(&w.messages()));

    // A clean stop: `stopped` (retained), then `offline`.
    rt.shutdown().await;
    let offline = |m: &[Received]| {
        m.iter()
            .any(|r| r.topic == "edgevlm/available" && r.text == "offline")
    };
    assert!(w.wait(BOUND, offline).await, "{:?}", w.messages());
    let all = w.messages();
    let at_offline = all
        .iter()
        .position(|r| r.topic == "edgevlm/available" && r.text == "offline")
        .unwrap();
    let statuses: Vec<&Received> = all[..at_offline]
        .iter()
        .filter(|r| r.topic == "edgevlm/hung/status")
        .collect();
    let last = statuses.last().expect("a status before offline").json();
    assert_eq!(last["state"], "stopped", "{last}");
    assert_eq!(last["reason"], STOPPED_REASON, "{last}");
    // The engine is off: no model family watches it.
    assert!(last["family"].is_null(), "{last}");
    // One run published them all, and says when it started.
    let instance = last["instance"].as_str().unwrap().to_string();
    assert_eq!(instance.len(), 16, "{last}");
    for s in &statuses {
        let j = s.json();
        assert_eq!(j["instance"], instance.as_str(), "{j}");
        assert!(
            j["started"].as_f64().unwrap() <= j["ts"].as_f64().unwrap(),
            "{j}"
        );
    }

    // What a consumer that connects later is told.
    let late = Subscriber::start(broker.port, &["edgevlm/available", "edgevlm/hung/status"]).await;
    assert!(
        late.wait(BOUND, |m| m.len() >= 2).await,
        "{:?}",
        late.messages()
    );
    let status = late.on("edgevlm/hung/status");
    assert!(status[0].retain, "{status:?}");
    assert_eq!(status[0].json()["state"], "stopped");
    assert_eq!(late.on("edgevlm/available")[0].text, "offline");
    let _ = std::fs::remove_dir_all(&state);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_narration_cut_by_the_stop_is_marked_incomplete() {
    let broker = Mosquitto::start();
    let state = std::env::temp_dir().join(format!("edgevlm-cut-{}", std::process::id()));
    let model = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("engines/tiny/model");
    // Long narrations (the tiny model rarely ends its turn), one a second.
    let text = format!(
        "[runtime]\nstatus_interval_secs = 1\nstate_dir = \"{}\"\n\
         [engine]\nmodel_dir = \"{}\"\nthreads = 1\n\
         [mqtt]\nbroker = \"{}\"\n\
         [[cameras]]\nid = \"door\"\nuri = \"test://ball\"\nsample_fps = 2\nwindow_secs = 10\n\
         narrate = [\"interval\"]\nnarrate_interval_secs = 1\nnarrate_max_tokens = 4096\n",
        state.display(),
        model.display(),
        broker.url(),
    );
    let config = Config::parse(&text, None).unwrap_or_else(|e| panic!("{e}"));
    let w = Subscriber::start(
        broker.port,
        &[
            "edgevlm/door/narration",
            "edgevlm/door/narration/stream",
            "edgevlm/door/status",
            "edgevlm/available",
        ],
    )
    .await;
    let rt = Runtime::start(config, RuntimeOptions::default())
        .await
        .expect("the runtime starts");
    // A narration has begun (a chunk) and not ended (no final message with its id).
    let in_progress = |m: &[Received]| -> Option<String> {
        let started: Vec<String> = m
            .iter()
            .filter(|r| r.topic == "edgevlm/door/narration/stream")
            .filter_map(|r| r.json()["id"].as_str().map(String::from))
            .collect();
        let ended: Vec<String> = m
            .iter()
            .filter(|r| r.topic == "edgevlm/door/narration")
            .filter_map(|r| r.json()["id"].as_str().map(String::from))
            .collect();
        started.into_iter().rev().find(|id| !ended.contains(id))
    };
    assert!(
        w.wait(BOUND, |m| in_progress(m).is_some()).await,
        "{:?}",
        w.messages()
    );
    let cut = in_progress(&w.messages()).unwrap();
    // Narrating, so the model is loaded: the retained status names its family (the manifest's).
    let family = |m: &[Received]| {
        m.iter()
            .filter(|r| r.topic == "edgevlm/door/status")
            .any(|r| r.json()["family"] == "tiny")
    };
    assert!(
        w.wait(BOUND, family).await,
        "{:?}",
        w.on("edgevlm/door/status")
    );
    rt.shutdown().await;
    let offline = |m: &[Received]| m.iter().any(|r| r.text == "offline");
    assert!(w.wait(BOUND, offline).await, "{:?}", w.messages());
    let narrations: Vec<serde_json::Value> = w
        .on("edgevlm/door/narration")
        .iter()
        .map(Received::json)
        .collect();
    // Every narration published says something; only the one the stop cut is incomplete.
    for n in &narrations {
        assert!(!n["text"].as_str().unwrap().trim().is_empty(), "{n}");
        let expected = n["id"] == cut.as_str();
        assert_eq!(n["incomplete"], expected, "{n} (cut: {cut})");
    }
    assert!(
        narrations.iter().any(|n| n["id"] == cut.as_str()),
        "the cut narration had text and was not published: {narrations:?}"
    );
    let _ = std::fs::remove_dir_all(&state);
}

/// `mosquitto_pub` (the real client) publishing `payload` on `topic`, retained.
fn mosquitto_pub_retained(port: u16, topic: &str, payload: &str) {
    let ok = std::process::Command::new("mosquitto_pub")
        .args([
            "-p",
            &port.to_string(),
            "-q",
            "1",
            "-r",
            "-t",
            topic,
            "-m",
            payload,
        ])
        .status()
        .expect("mosquitto_pub runs")
        .success();
    assert!(ok, "mosquitto_pub -r {topic}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retained_question_is_refused_once_and_its_retained_copy_cleared() {
    let broker = Mosquitto::start();
    // Published retained before the runtime exists: the broker delivers it at every subscribe.
    mosquitto_pub_retained(
        broker.port,
        "edgevlm/door/query",
        r#"{"id":"kept","question":"What is moving?"}"#,
    );
    let state = std::env::temp_dir().join(format!("edgevlm-rq-{}", std::process::id()));
    let text = format!(
        "[runtime]\nstate_dir = \"{}\"\n[engine]\nenabled = false\n\
         [mqtt]\nbroker = \"{}\"\n\
         [[cameras]]\nid = \"door\"\nuri = \"test://ball\"\nsample_fps = 1\nnarrate = []\n",
        state.display(),
        broker.url(),
    );
    let config = Config::parse(&text, None).unwrap_or_else(|e| panic!("{e}"));
    let w = Subscriber::start(broker.port, &["edgevlm/door/answer/+", "edgevlm/errors"]).await;
    let rt = Runtime::start(config, RuntimeOptions::default())
        .await
        .expect("the runtime starts");
    let replied = |m: &[Received]| m.iter().any(|r| r.topic == "edgevlm/door/answer/kept");
    assert!(w.wait(BOUND, replied).await, "{:?}", w.messages());
    let reply = w.on("edgevlm/door/answer/kept").remove(0).json();
    assert_eq!(reply["error"]["code"], "retained", "{reply}");
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("without the retain flag"),
        "{reply}"
    );
    // The clearing went out before the reply, on the same connection: the broker holds no
    // retained question now. A new subscriber asks for the query topic, then for a sentinel
    // retained after the reply; Mosquitto answers subscriptions in order, so the sentinel
    // arriving first-and-alone shows the query topic has nothing retained.
    mosquitto_pub_retained(broker.port, "sentinel/after", "1");
    let late = Subscriber::start(broker.port, &["edgevlm/door/query", "sentinel/after"]).await;
    assert!(
        late.wait(BOUND, |m| m.iter().any(|r| r.topic == "sentinel/after"))
            .await
    );
    assert!(
        late.on("edgevlm/door/query").is_empty(),
        "still retained: {:?}",
        late.messages()
    );
    // The echo of the clearing (an empty message) is not taken for a bad question.
    let live = Subscriber::start(broker.port, &["edgevlm/door/answer/+"]).await;
    live.publish(
        "edgevlm/door/query",
        r#"{"id":"live","question":"What is moving?"}"#,
    )
    .await;
    assert!(
        live.wait(BOUND, |m| m
            .iter()
            .any(|r| r.topic == "edgevlm/door/answer/live"))
            .await
    );
    assert!(
        w.on("edgevlm/errors").is_empty(),
        "{:?}",
        w.on("edgevlm/errors")
    );
    assert_eq!(w.on("edgevlm/door/answer/kept").len(), 1);
    rt.shutdown().await;
    let _ = std::fs::remove_dir_all(&state);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_camera_gone_between_two_runs_has_its_retained_state_cleared_and_other_nodes_keep_theirs()
{
    let broker = Mosquitto::start();
    let state = std::env::temp_dir().join(format!("edgevlm-gone-{}", std::process::id()));
    let config = |cameras: &[&str]| {
        let mut text = format!(
            "[runtime]\nstate_dir = \"{}\"\n[engine]\nenabled = false\n\
             [mqtt]\nbroker = \"{}\"\nclient_id = \"edgevlm-gone\"\n",
            state.display(),
            broker.url(),
        );
        for c in cameras {
            text.push_str(&format!(
                "[[cameras]]\nid = \"{c}\"\nuri = \"test://ball\"\nsample_fps = 1\nnarrate = []\n"
            ));
        }
        Config::parse(&text, None).unwrap_or_else(|e| panic!("{e}"))
    };
    // Another node shares the prefix: its camera's status is not ours to clear.
    mosquitto_pub_retained(
        broker.port,
        "edgevlm/porch/status",
        r#"{"camera":"porch","state":"running","node":"edgevlm-other","instance":"1"}"#,
    );
    let w = Subscriber::start(broker.port, &["edgevlm/+/status", "edgevlm/+/activity"]).await;
    let first = Runtime::start(config(&["door", "yard"]), RuntimeOptions::default())
        .await
        .expect("the first run starts");
    let yard_running = |m: &[Received]| {
        m.iter()
            .any(|r| r.topic == "edgevlm/yard/status" && r.json()["state"] == "running")
    };
    assert!(w.wait(BOUND, yard_running).await, "{:?}", w.messages());
    assert_eq!(
        w.on("edgevlm/yard/status").last().unwrap().json()["node"],
        "edgevlm-gone"
    );
    first.shutdown().await;

    // The second run has no `yard`: what the first left retained about it is cleared.
    let second = Runtime::start(config(&["door"]), RuntimeOptions::default())
        .await
        .expect("the second run starts");
    let cleared = |m: &[Received]| {
        ["edgevlm/yard/status", "edgevlm/yard/activity"]
            .iter()
            .all(|t| m.iter().any(|r| r.topic == *t && r.bytes.is_empty()))
    };
    assert!(w.wait(BOUND, cleared).await, "{:?}", w.messages());
    // A late subscriber sees door's and the other node's statuses, not yard's: the sentinel,
    // retained after the clearing and asked for last, comes after whatever is retained.
    mosquitto_pub_retained(broker.port, "sentinel/gone", "1");
    let late = Subscriber::start(broker.port, &["edgevlm/+/status", "sentinel/gone"]).await;
    assert!(
        late.wait(BOUND, |m| m.iter().any(|r| r.topic == "sentinel/gone"))
            .await
    );
    let retained: BTreeSet<String> = late
        .messages()
        .iter()
        .filter(|r| r.topic.ends_with("/status"))
        .map(|r| r.topic.clone())
        .collect();
    assert_eq!(
        retained,
        BTreeSet::from([
            "edgevlm/door/status".to_string(),
            "edgevlm/porch/status".to_string()
        ])
    );
    second.shutdown().await;
    let _ = std::fs::remove_dir_all(&state);
}
