//! `edgevlm run` on MQTT, against Mosquitto and the embedded broker: questions are validated and
//! answered (errors, `no_model`), `offline` on SIGTERM, the last will on SIGKILL, sampling goes on
//! while the broker is down, and MQTT 5 response topics are honoured.

mod common;

use common::edgevlm;
use common::mqtt::{Mosquitto, Watcher, free_port};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::Duration;

/// An `edgevlm run` child, killed on drop.
struct Run {
    child: Option<Child>,
    dir: PathBuf,
}

impl Run {
    fn start(tag: &str, mqtt: &str) -> Run {
        let dir = std::env::temp_dir().join(format!("edgevlm-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = dir.join("edgevlm.toml");
        std::fs::write(
            &cfg,
            format!(
                "[runtime]\nstatus_interval_secs = 0.5\nstate_dir = \"state\"\n\n\
                 [mqtt]\nclient_id = \"edgevlm-{tag}\"\nretry_initial_secs = 0.1\nretry_max_secs = 0.5\n{mqtt}\n\n\
                 [[cameras]]\nid = \"door\"\nuri = \"test://ball\"\nsample_fps = 4\nwindow_secs = 30\n"
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.join("stderr.log")).unwrap();
        let child = edgevlm()
            .args(["run", "-c", cfg.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        Run {
            child: Some(child),
            dir,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr.log")).unwrap_or_default()
    }

    fn signal(&self, sig: i32) {
        if let Some(c) = &self.child {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(c.id() as i32, sig) };
        }
    }

    fn wait(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().unwrap();
        for _ in 0..300 {
            if let Some(s) = c.try_wait().unwrap() {
                return s;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = c.kill();
        panic!("edgevlm did not exit:\n{}", self.log());
    }

    fn status_json(&self) -> serde_json::Value {
        let out = edgevlm()
            .args([
                "status",
                "--json",
                "--socket",
                self.dir.join("state/edgevlm.sock").to_str().unwrap(),
            ])
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
            panic!(
                "status: {}\n{}",
                String::from_utf8_lossy(&out.stderr),
                self.log()
            )
        })
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn wait_online(w: &Watcher, run: &Run) {
    assert!(
        w.wait(Duration::from_secs(20), |m| m
            .iter()
            .any(|m| m.topic == "edgevlm/available" && m.text == "online"))
            .await,
        "never online:\n{}",
        run.log()
    );
}

/// Sends every kind of bad question and one valid one; checks each reply.
async fn questions_get_their_replies(port: u16, run: &Run) {
    let w = Watcher::start(
        port,
        &["edgevlm/available", "edgevlm/+/answer/+", "edgevlm/errors"],
    )
    .await;
    wait_online(&w, run).await;
    let big = "x".repeat(20_000);
    let cases: [(&str, String, &str, &str); 8] = [
        ("door", "{not json".into(), "edgevlm/errors", "malformed"),
        (
            "door",
            r#"{"question":"who?"}"#.into(),
            "edgevlm/errors",
            "missing_field",
        ),
        (
            "door",
            format!(r#"{{"id":"big","question":"{big}"}}"#),
            "edgevlm/door/answer/big",
            "too_large",
        ),
        (
            "yard",
            r#"{"id":"u1","question":"who?"}"#.into(),
            "edgevlm/yard/answer/u1",
            "unknown_camera",
        ),
        (
            "door",
            r#"{"id":"e1","question":"   "}"#.into(),
            "edgevlm/door/answer/e1",
            "empty_question",
        ),
        (
            "door",
            r#"{"id":"w1","question":"who?","window_secs":31}"#.into(),
            "edgevlm/door/answer/w1",
            "window_too_long",
        ),
        (
            "door",
            r#"{"id":"t1","question":["who?"]}"#.into(),
            "edgevlm/door/answer/t1",
            "invalid_field",
        ),
        (
            "door",
            r#"{"id":"ok1","question":"What moves?","window_secs":10}"#.into(),
            "edgevlm/door/answer/ok1",
            "no_model",
        ),
    ];
    for (camera, payload, _, _) in &cases {
        w.publish(
            &format!("edgevlm/{camera}/query"),
            payload.as_bytes().to_vec(),
        )
        .await;
    }
    for (_, payload, topic, code) in &cases {
        let found = w
            .wait(Duration::from_secs(10), |m| {
                m.iter()
                    .any(|m| m.topic == *topic && m.json()["error"]["code"] == *code)
            })
            .await;
        assert!(
            found,
            "no `{code}` on {topic} for {}…; got {:#?}\n{}",
            payload.chars().take(60).collect::<String>(),
            w.messages(),
            run.log()
        );
    }
    let reply = w.on("edgevlm/door/answer/ok1").remove(0).json();
    assert_eq!(reply["id"], "ok1");
    assert_eq!(
        reply["error"]["message"],
        "the engine stage is not enabled yet, so no question can be answered"
    );
    let errors = w.on("edgevlm/errors");
    assert!(
        errors
            .iter()
            .all(|e| e.json()["topic"] == "edgevlm/door/query")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_questions_get_their_error_and_valid_ones_no_model_with_mosquitto() {
    let broker = Mosquitto::start();
    let run = Run::start("q-mosq", &format!("broker = \"{}\"", broker.url()));
    questions_get_their_replies(broker.port, &run).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_questions_get_their_error_and_valid_ones_no_model_with_the_embedded_broker() {
    let port = free_port();
    let run = Run::start("q-emb", &format!("listen = \"127.0.0.1:{port}\""));
    // The broker starts with the process.
    assert!(
        common::wait_until(Duration::from_secs(20), || std::net::TcpStream::connect((
            "127.0.0.1",
            port
        ))
        .is_ok())
        .await,
        "{}",
        run.log()
    );
    questions_get_their_replies(port, &run).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_sigterm_exit_publishes_offline_and_leaves_retained_status() {
    let broker = Mosquitto::start();
    let mut run = Run::start("term", &format!("broker = \"{}\"", broker.url()));
    let w = Watcher::start(broker.port, &["edgevlm/available", "edgevlm/door/status"]).await;
    wait_online(&w, &run).await;
    assert!(
        w.wait(Duration::from_secs(10), |m| m.iter().any(|m| m.topic
            == "edgevlm/door/status"
            && m.json()["state"] == "running"))
            .await,
        "{:?}\n{}",
        w.messages(),
        run.log()
    );
    run.signal(libc::SIGTERM);
    assert!(run.wait().success(), "{}", run.log());
    let late = Watcher::start(broker.port, &["edgevlm/available", "edgevlm/door/status"]).await;
    assert!(
        late.wait(Duration::from_secs(5), |m| m.len() >= 2).await,
        "{:?}",
        late.messages()
    );
    let avail = late.on("edgevlm/available");
    assert_eq!(avail.len(), 1);
    assert!(avail[0].retain && avail[0].text == "offline", "{avail:?}");
    let status = late.on("edgevlm/door/status");
    assert!(status[0].retain);
    assert_eq!(status[0].json()["camera"], "door");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_run_leaves_offline_through_its_last_will() {
    let broker = Mosquitto::start();
    let mut run = Run::start("kill", &format!("broker = \"{}\"", broker.url()));
    let w = Watcher::start(broker.port, &["edgevlm/available"]).await;
    wait_online(&w, &run).await;
    run.signal(libc::SIGKILL);
    let _ = run.wait();
    assert!(
        w.wait(Duration::from_secs(10), |m| m
            .last()
            .is_some_and(|m| m.text == "offline"))
            .await,
        "{:?}",
        w.messages()
    );
    let late = Watcher::start(broker.port, &["edgevlm/available"]).await;
    assert!(
        late.wait(Duration::from_secs(5), |m| m
            .iter()
            .any(|m| m.retain && m.text == "offline"))
            .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_keeps_sampling_while_the_broker_is_down_and_republishes_after() {
    let mut broker = Mosquitto::start();
    let run = Run::start("down", &format!("broker = \"{}\"", broker.url()));
    let w = Watcher::start(broker.port, &["edgevlm/available"]).await;
    wait_online(&w, &run).await;
    drop(w);
    broker.stop();
    let sampled =
        |doc: &serde_json::Value| doc["cameras"][0]["counters"]["sampled"].as_u64().unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = sampled(&run.status_json());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let doc = run.status_json();
    assert!(
        sampled(&doc) >= before + 4,
        "sampling stalled while the broker was down: {before} -> {}\n{}",
        sampled(&doc),
        run.log()
    );
    assert!(doc["cameras"][0]["window_frames"].as_u64().unwrap() >= 8);
    assert!(run.log().contains("MQTT connection lost"), "{}", run.log());

    // A fresh broker knows nothing: online and the status come back after the reconnect.
    broker.restart();
    let late = Watcher::start(broker.port, &["edgevlm/available", "edgevlm/door/status"]).await;
    assert!(
        late.wait(Duration::from_secs(15), |m| {
            m.iter().any(|m| m.text == "online")
                && m.iter().any(|m| m.topic == "edgevlm/door/status")
        })
        .await,
        "{:?}\n{}",
        late.messages(),
        run.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt5_response_topic_and_correlation_data_are_honoured() {
    use rumqttc::v5::mqttbytes::QoS;
    use rumqttc::v5::mqttbytes::v5::{Packet, PublishProperties};
    let broker = Mosquitto::start();
    let run = Run::start(
        "v5",
        &format!("broker = \"{}\"\nprotocol = \"5\"", broker.url()),
    );
    let w = Watcher::start(broker.port, &["edgevlm/available", "edgevlm/door/answer/+"]).await;
    wait_online(&w, &run).await;

    let mut opts = rumqttc::v5::MqttOptions::new("v5-asker", "127.0.0.1", broker.port);
    opts.set_keep_alive(Duration::from_secs(5));
    let (client, mut eventloop) = rumqttc::v5::AsyncClient::new(opts, 16);
    client
        .subscribe("app/replies/#", QoS::AtLeastOnce)
        .await
        .unwrap();
    let ask = |id: &str, response: &str, correlation: &'static [u8]| {
        let props = PublishProperties {
            response_topic: Some(response.to_string()),
            correlation_data: Some(bytes::Bytes::from_static(correlation)),
            ..Default::default()
        };
        let payload = format!(r#"{{"id":"{id}","question":"What moves?"}}"#);
        let client = client.clone();
        async move {
            client
                .publish_with_properties(
                    "edgevlm/door/query",
                    QoS::AtLeastOnce,
                    false,
                    payload,
                    props,
                )
                .await
                .unwrap()
        }
    };
    let mut asked = false;
    let mut reply = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while reply.is_none() && tokio::time::Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_secs(1), eventloop.poll()).await {
            Ok(Ok(rumqttc::v5::Event::Incoming(Packet::SubAck(_)))) if !asked => {
                asked = true;
                ask("v1", "app/replies/7", b"corr-7").await;
                ask("v2", "edgevlm/available", b"corr-8").await;
            }
            Ok(Ok(rumqttc::v5::Event::Incoming(Packet::Publish(p)))) => reply = Some(p),
            _ => {}
        }
    }
    let p = reply.unwrap_or_else(|| panic!("no reply on the response topic\n{}", run.log()));
    assert_eq!(&p.topic[..], b"app/replies/7");
    let props = p.properties.unwrap();
    assert_eq!(props.correlation_data.as_deref(), Some(&b"corr-7"[..]));
    let body: serde_json::Value = serde_json::from_slice(&p.payload).unwrap();
    assert_eq!(body["error"]["code"], "no_model");
    // A response topic inside the runtime's own namespace is refused, on the answer topic.
    assert!(
        w.wait(Duration::from_secs(10), |m| m
            .iter()
            .any(|m| m.topic == "edgevlm/door/answer/v2"
                && m.json()["error"]["code"] == "bad_response_topic"))
            .await,
        "{:?}",
        w.messages()
    );
}
