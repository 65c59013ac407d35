//! Home Assistant MQTT discovery (docs/HOME_ASSISTANT.md), on Mosquitto with the tiny model: each
//! camera is announced as a device of seven entities whose config payloads use only the options
//! Home Assistant documents for their component, with the required ones; every topic they name
//! carries what they expect, and their templates, rendered with Jinja2 as Home Assistant renders
//! them (`tests/ha_template.py`), give the right state from the runtime's real messages. A
//! question typed in the Ask text entity (its command template) is answered on the Answer
//! sensor. A camera removed by a reload has its entities removed (empty retained configs).

mod common;

use common::mqtt::{Mosquitto, Received, Subscriber};
use edgevlm::config::Config;
use edgevlm::runtime::{Runtime, RuntimeOptions};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A failure bound only: every wait ends as soon as its message comes.
const BOUND: Duration = Duration::from_secs(90);

/// Options every discovered entity may carry (Home Assistant's MQTT docs, "Entity options"
/// common to all platforms, as far as used here).
const COMMON: &[&str] = &[
    "name",
    "unique_id",
    "device",
    "availability_topic",
    "icon",
    "json_attributes_topic",
    "json_attributes_template",
];

/// Per component: (required options, other documented options used here).
fn schema(component: &str) -> (&'static [&'static str], &'static [&'static str]) {
    match component {
        "binary_sensor" => (
            &["state_topic"],
            &[
                "payload_on",
                "payload_off",
                "device_class",
                "value_template",
            ],
        ),
        "sensor" => (&["state_topic"], &["value_template", "device_class"]),
        "image" => (&["image_topic"], &["content_type"]),
        "event" => (&["state_topic", "event_types"], &["value_template"]),
        "text" => (
            &["command_topic"],
            &["command_template", "min", "max", "mode"],
        ),
        other => panic!("unexpected component {other}"),
    }
}

/// Renders a Home Assistant template over `value` with `this` as the entity's current state.
fn render(template: &str, value: &str, this: Value) -> String {
    let python = concat!(env!("CARGO_MANIFEST_DIR"), "/.venv/bin/python");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/ha_template.py");
    let mut child = Command::new(python)
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the project venv's python (scripts/setup.sh)");
    let req = serde_json::json!({"template": template, "value": value, "this": this});
    writeln!(child.stdin.take().unwrap(), "{req}").unwrap();
    let out = child.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    match v {
        Value::String(s) => s,
        other => panic!("template {template:?} failed: {other}"),
    }
}

fn config(state: &std::path::Path, broker: &str, camera: &str) -> Config {
    let model = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("engines/tiny/model");
    let text = format!(
        "[runtime]\nstatus_interval_secs = 1\nstate_dir = \"{}\"\n\
         [engine]\nmodel_dir = \"{}\"\nthreads = 1\n\
         [mqtt]\nbroker = \"{broker}\"\nclient_id = \"edgevlm-ha-test\"\n\
         [home_assistant]\ndiscovery = true\n\
         [[cameras]]\nid = \"{camera}\"\nuri = \"test://ball\"\nsample_fps = 2\nwindow_secs = 10\n\
         narrate = [\"interval\", \"change\"]\nnarrate_interval_secs = 1\nnarrate_max_tokens = 300\n\
         change_start_ratio = 0.005\nchange_end_ratio = 0.001\n",
        state.display(),
        model.display(),
    );
    Config::parse(&text, None).unwrap_or_else(|e| panic!("{e}"))
}

fn on(w: &Subscriber, topic: &str) -> Vec<Received> {
    w.on(topic)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_camera_is_a_home_assistant_device_whose_entities_read_the_runtimes_topics() {
    let broker = Mosquitto::start();
    let state = std::env::temp_dir().join(format!("edgevlm-ha-{}", std::process::id()));
    let w = Subscriber::start(broker.port, &["homeassistant/#", "edgevlm/#"]).await;
    let rt = Runtime::start(
        config(&state, &broker.url(), "door"),
        RuntimeOptions::default(),
    )
    .await
    .expect("the runtime starts");

    // Seven retained configs, one device.
    let configs = |m: &[Received]| -> BTreeMap<String, Value> {
        m.iter()
            .filter(|r| r.topic.starts_with("homeassistant/") && !r.bytes.is_empty())
            .map(|r| (r.topic.clone(), r.json()))
            .collect()
    };
    assert!(
        w.wait(BOUND, |m| configs(m).len() == 7).await,
        "{:?}",
        configs(&w.messages()).keys()
    );
    let configs = configs(&w.messages());
    let mut by_entity = BTreeMap::new();
    let mut devices = BTreeSet::new();
    for (topic, c) in &configs {
        // <prefix>/<component>/<node id>/<object id>/config
        let parts: Vec<&str> = topic.split('/').collect();
        assert_eq!(parts.len(), 5, "{topic}");
        assert_eq!(
            (parts[0], parts[2], parts[4]),
            ("homeassistant", "edgevlm-ha-test", "config")
        );
        let (component, object) = (parts[1], parts[3]);
        let (required, optional) = schema(component);
        let obj = c.as_object().unwrap();
        for key in required {
            assert!(obj.contains_key(*key), "{topic} lacks {key}");
        }
        for key in obj.keys() {
            assert!(
                COMMON.contains(&key.as_str())
                    || required.contains(&key.as_str())
                    || optional.contains(&key.as_str()),
                "{topic}: `{key}` is not an option of {component}"
            );
        }
        assert_eq!(c["availability_topic"], "edgevlm/available");
        devices.insert(c["device"]["identifiers"][0].as_str().unwrap().to_string());
        by_entity.insert(object.trim_start_matches("door_").to_string(), c.clone());
    }
    assert_eq!(devices.len(), 1, "{devices:?}");
    let unique: BTreeSet<String> = configs
        .values()
        .map(|c| c["unique_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(unique.len(), 7);

    // The state sensor reads the retained status.
    let state_cfg = &by_entity["state"];
    let status_topic = state_cfg["state_topic"].as_str().unwrap();
    assert!(
        w.wait(BOUND, |m| m.iter().any(
            |r| r.topic == status_topic && r.json()["state"] == "running"
        ))
        .await
    );
    let status = on(&w, status_topic).last().unwrap().text.clone();
    assert_eq!(
        render(
            state_cfg["value_template"].as_str().unwrap(),
            &status,
            Value::Null
        ),
        "running"
    );

    // The narration sensor: at most 255 characters of the text as its state, all of it as an
    // attribute.
    let n_cfg = &by_entity["narration"];
    let n_topic = n_cfg["state_topic"].as_str().unwrap();
    let long = |m: &[Received]| {
        m.iter().any(|r| {
            r.topic == n_topic
                && r.json()["text"]
                    .as_str()
                    .is_some_and(|t| t.chars().count() > 255)
        })
    };
    assert!(
        w.wait(BOUND, long).await,
        "no narration over 255 characters"
    );
    let narration = on(&w, n_topic)
        .into_iter()
        .find(|r| r.json()["text"].as_str().unwrap().chars().count() > 255)
        .unwrap();
    let text = narration.json()["text"].as_str().unwrap().to_string();
    let shown = render(
        n_cfg["value_template"].as_str().unwrap(),
        &narration.text,
        Value::Null,
    );
    assert_eq!(shown, text.chars().take(255).collect::<String>());
    let attrs: Value = serde_json::from_str(&render(
        n_cfg["json_attributes_template"].as_str().unwrap(),
        &narration.text,
        Value::Null,
    ))
    .unwrap();
    assert_eq!(attrs["text"], text.as_str());

    // The image entity: a JPEG on its image topic.
    let img = &by_entity["snapshot"];
    assert_eq!(img["content_type"], "image/jpeg");
    let img_topic = img["image_topic"].as_str().unwrap();
    assert!(
        w.wait(BOUND, |m| m.iter().any(|r| r.topic == img_topic))
            .await
    );
    let jpeg = &on(&w, img_topic)[0].bytes;
    assert!(edgevlm::evidence::picture::jpeg_size(jpeg).is_some());

    // The event entity: each event message renders to an object whose event_type it declares;
    // the activity binary sensor went ON with the event.
    let ev = &by_entity["event"];
    let ev_topic = ev["state_topic"].as_str().unwrap();
    assert!(
        w.wait(BOUND, |m| m.iter().any(|r| r.topic == ev_topic))
            .await
    );
    let first = on(&w, ev_topic).remove(0);
    let rendered: Value = serde_json::from_str(&render(
        ev["value_template"].as_str().unwrap(),
        &first.text,
        Value::Null,
    ))
    .unwrap();
    assert_eq!(rendered["event_type"], "new");
    assert!(
        ev["event_types"]
            .as_array()
            .unwrap()
            .contains(&rendered["event_type"])
    );
    assert_eq!(rendered["id"], first.json()["id"]);
    let act = &by_entity["activity"];
    let act_topic = act["state_topic"].as_str().unwrap();
    let values: Vec<String> = on(&w, act_topic).iter().map(|r| r.text.clone()).collect();
    assert_eq!(
        values.first().map(String::as_str),
        Some("OFF"),
        "{values:?}"
    );
    assert!(values.iter().any(|v| v == "ON"), "{values:?}");
    assert!(values.iter().all(|v| v == "ON" || v == "OFF"));

    // Ask: Home Assistant publishes the text box's command template; the Answer sensor shows the
    // final answer and keeps its state through the chunks.
    let ask = &by_entity["ask"];
    let payload = render(
        ask["command_template"].as_str().unwrap(),
        "What is \"moving\"?",
        Value::Null,
    );
    let question: Value = serde_json::from_str(&payload).unwrap();
    assert_eq!(question["question"], "What is \"moving\"?");
    w.publish(ask["command_topic"].as_str().unwrap(), payload)
        .await;
    let answer_cfg = &by_entity["answer"];
    let a_topic = answer_cfg["state_topic"].as_str().unwrap();
    assert!(
        w.wait(BOUND, |m| m
            .iter()
            .any(|r| r.topic == a_topic && r.json()["text"].is_string()))
            .await,
        "{:?}",
        on(&w, a_topic)
    );
    let replies = on(&w, a_topic);
    let template = answer_cfg["value_template"].as_str().unwrap();
    let previous = serde_json::json!({"state": "the previous answer", "attributes": {}});
    let chunk = replies
        .iter()
        .find(|r| r.json()["delta"].is_string())
        .unwrap();
    assert_eq!(
        render(template, &chunk.text, previous.clone()),
        "the previous answer"
    );
    let last = replies
        .iter()
        .find(|r| r.json()["text"].is_string())
        .unwrap();
    let answer_text: String = last.json()["text"]
        .as_str()
        .unwrap()
        .chars()
        .take(255)
        .collect();
    assert_eq!(render(template, &last.text, previous), answer_text);

    // A reload without the camera removes its entities: an empty retained config each.
    let reloaded = config(&state, &broker.url(), "gate");
    rt.reload(reloaded).await.expect("reload");
    let removed = |m: &[Received]| {
        configs
            .keys()
            .all(|t| m.iter().any(|r| &r.topic == t && r.bytes.is_empty()))
    };
    assert!(
        w.wait(BOUND, removed).await,
        "the door's entities were not removed"
    );
    let gate_configs = |m: &[Received]| {
        m.iter()
            .filter(|r| r.topic.contains("/gate_") && !r.bytes.is_empty())
            .count()
    };
    assert!(w.wait(BOUND, |m| gate_configs(m) == 7).await);
    rt.shutdown().await;
    let _ = std::fs::remove_dir_all(&state);
}
