//! A fleet on an existing MQTT infrastructure (docs/MQTT.md, "Fleets"): two edge nodes, each with
//! its own Mosquitto bridged to a central Mosquitto and its own topic prefix (`site/node1`,
//! `site/node2`). A client on the central broker subscribes to the narrations of both nodes with
//! one filter, and asks a camera of one node a question: the question is bridged down to that
//! node only, and the answer back up.

mod common;

use common::mqtt::{Mosquitto, Received, Subscriber};
use edgevlm::config::Config;
use edgevlm::runtime::{Runtime, RuntimeOptions};
use std::time::Duration;

/// A failure bound only: every wait ends as soon as its message comes.
const BOUND: Duration = Duration::from_secs(90);

fn node(state: &std::path::Path, broker: &str, prefix: &str) -> Config {
    let model = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("engines/tiny/model");
    let text = format!(
        "[runtime]\nstate_dir = \"{}\"\n\
         [engine]\nmodel_dir = \"{}\"\nthreads = 1\n\
         [mqtt]\nbroker = \"{broker}\"\ntopic_prefix = \"{prefix}\"\n\
         client_id = \"edgevlm-{}\"\n\
         [[cameras]]\nid = \"door\"\nuri = \"test://ball\"\nsample_fps = 2\nwindow_secs = 10\n\
         narrate = [\"interval\"]\nnarrate_interval_secs = 1\nnarrate_max_tokens = 6\n",
        state.display(),
        model.display(),
        prefix.replace('/', "-"),
    );
    Config::parse(&text, None).unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_central_client_hears_two_bridged_nodes_and_its_question_is_answered_by_the_right_one() {
    let central = Mosquitto::start();
    // Each edge broker bridges its node's prefix both ways (Mosquitto's own bridge).
    let bridge = |prefix: &str| {
        format!(
            "connection central-{}\naddress 127.0.0.1:{}\ntopic {prefix}/# both 1\n\
             cleansession true\nrestart_timeout 1\n",
            prefix.replace('/', "-"),
            central.port
        )
    };
    let edge1 = Mosquitto::with_config(&bridge("site/node1"));
    let edge2 = Mosquitto::with_config(&bridge("site/node2"));
    let c = Subscriber::start(
        central.port,
        &[
            "site/+/+/narration",
            "site/+/available",
            "site/+/door/answer/+",
        ],
    )
    .await;
    let dir = std::env::temp_dir().join(format!("edgevlm-fleet-{}", std::process::id()));
    let rt1 = Runtime::start(
        node(&dir.join("n1"), &edge1.url(), "site/node1"),
        RuntimeOptions::default(),
    )
    .await
    .expect("node 1 starts");
    let rt2 = Runtime::start(
        node(&dir.join("n2"), &edge2.url(), "site/node2"),
        RuntimeOptions::default(),
    )
    .await
    .expect("node 2 starts");

    // Both nodes' narrations reach the central broker under their own prefixes.
    let both = |m: &[Received]| {
        ["site/node1/door/narration", "site/node2/door/narration"]
            .iter()
            .all(|t| m.iter().any(|r| r.topic == *t))
    };
    assert!(c.wait(BOUND, both).await, "{:?}", c.messages());
    for n in ["node1", "node2"] {
        assert!(
            c.on(&format!("site/{n}/available"))
                .iter()
                .any(|r| r.text == "online"),
            "{n} not online centrally"
        );
    }

    // A question asked centrally of node 1's door: answered by node 1 only.
    c.publish(
        "site/node1/door/query",
        r#"{"id":"central1","question":"What is moving?"}"#,
    )
    .await;
    let answered = |m: &[Received]| {
        m.iter()
            .any(|r| r.topic == "site/node1/door/answer/central1" && r.json()["text"].is_string())
    };
    assert!(c.wait(BOUND, answered).await, "{:?}", c.messages());
    let fin = c
        .on("site/node1/door/answer/central1")
        .into_iter()
        .map(|r| r.json())
        .find(|j| j["text"].is_string())
        .unwrap();
    assert_eq!(fin["camera"], "door");
    assert!(fin["generated_tokens"].as_u64().unwrap() >= 1, "{fin}");
    assert!(
        c.on("site/node2/door/answer/central1").is_empty(),
        "node 2 answered a question for node 1"
    );
    rt1.shutdown().await;
    rt2.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
