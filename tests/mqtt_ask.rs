//! `edgevlm ask`: streams an answer, fills gaps from the final message, reports error replies and
//! timeouts with distinct exit codes. The responder here is a test fake of the query stage (a
//! plain MQTT client), because these tests are about the ask client; against a real `edgevlm run`
//! the error path is exercised end to end.

mod common;

use common::edgevlm;
use common::mqtt::{Mosquitto, free_port};
use std::process::Output;
use std::time::Duration;

/// Answers every question: chunks (one of them twice, as QoS 1 may), then the final message.
/// A question containing "gap" loses its second chunk; "refuse" gets an error reply. The flag
/// is set once its subscription to questions is acknowledged.
fn responder(
    port: u16,
) -> (
    tokio::task::JoinHandle<()>,
    std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let mut opts = rumqttc::MqttOptions::new("fake-query-stage", "127.0.0.1", port);
    opts.set_keep_alive(Duration::from_secs(5));
    let (client, mut eventloop) = rumqttc::AsyncClient::new(opts, 64);
    let subscribed = std::sync::Arc::new(AtomicBool::new(false));
    let flag = subscribed.clone();
    let task = tokio::spawn(async move {
        loop {
            match eventloop.poll().await {
                Ok(rumqttc::Event::Incoming(rumqttc::Packet::ConnAck(_))) => {
                    let _ = client.try_subscribe("edgevlm/+/query", rumqttc::QoS::AtLeastOnce);
                }
                Ok(rumqttc::Event::Incoming(rumqttc::Packet::SubAck(_))) => {
                    flag.store(true, Ordering::SeqCst);
                }
                Ok(rumqttc::Event::Incoming(rumqttc::Packet::Publish(p))) => {
                    let q: serde_json::Value = serde_json::from_slice(&p.payload).unwrap();
                    let camera = p.topic.split('/').nth(1).unwrap().to_string();
                    let id = q["id"].as_str().unwrap().to_string();
                    let question = q["question"].as_str().unwrap().to_string();
                    let topic = format!("edgevlm/{camera}/answer/{id}");
                    let client = client.clone();
                    tokio::spawn(async move {
                        let send = |body: serde_json::Value| {
                            let client = client.clone();
                            let topic = topic.clone();
                            async move {
                                client
                                    .publish(
                                        topic,
                                        rumqttc::QoS::AtLeastOnce,
                                        false,
                                        body.to_string(),
                                    )
                                    .await
                                    .unwrap();
                            }
                        };
                        if question.contains("refuse") {
                            send(serde_json::json!({"id": id, "error": {"code": "busy", "message": "2 questions are already waiting"}})).await;
                            return;
                        }
                        let pieces = ["The ", "ball ", "moves."];
                        for (seq, delta) in pieces.iter().enumerate() {
                            if seq == 1 && question.contains("gap") {
                                continue;
                            }
                            let chunk = serde_json::json!({"id": id, "seq": seq, "delta": delta, "done": false});
                            send(chunk.clone()).await;
                            if seq == 1 {
                                send(chunk).await;
                            }
                        }
                        send(serde_json::json!({"id": id, "seq": 3, "delta": "", "done": true}))
                            .await;
                        send(serde_json::json!({
                            "id": id, "camera": camera, "text": "The ball moves.", "finish": "stop",
                            "window_start_secs": 0.0, "window_end_secs": 10.0, "frames": 10,
                            "visual_tokens": 840, "prompt_tokens": 880, "generated_tokens": 4,
                            "first_token_ms": 120.0, "total_ms": 300.0
                        }))
                        .await;
                    });
                }
                Ok(_) => {}
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    });
    (task, subscribed)
}

async fn ask(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || edgevlm().arg("ask").args(args).output().unwrap())
        .await
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_prints_the_streamed_answer_and_exits_0() {
    let broker = Mosquitto::start();
    let (_fake, subscribed) = responder(broker.port);
    // Questions sent before the fake has subscribed would reach nobody.
    assert!(
        common::wait_until(Duration::from_secs(30), || subscribed
            .load(std::sync::atomic::Ordering::SeqCst))
        .await,
        "the fake query stage never subscribed"
    );
    let base = |q: &str| {
        vec![
            "door".into(),
            q.into(),
            "--broker".into(),
            broker.url(),
            // The bound only limits a failure: the fake answers at once.
            "--timeout-secs".into(),
            "30".into(),
        ]
    };
    let out = ask(base("What moves?")).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "The ball moves.\n");

    // A chunk that never arrived: the rest comes from the final message.
    let out = ask(base("What moves? (gap)")).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "The ball moves.\n");

    let mut json = base("What moves?");
    json.push("--json".into());
    let out = ask(json).await;
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["text"], "The ball moves.");
    assert_eq!(doc["frames"], 10);

    let out = ask(base("please refuse")).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("error: busy: 2 questions are already waiting"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_reports_the_runtimes_error_reply_with_exit_1() {
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("edgevlm-ask-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("edgevlm.toml");
    std::fs::write(
        &cfg,
        format!(
            "[runtime]\nstate_dir = \"state\"\n[mqtt]\nlisten = \"127.0.0.1:{port}\"\n\
             [engine]\nenabled = false\n\
             [[cameras]]\nid = \"door\"\nuri = \"test://ball\"\nwindow_secs = 20\n"
        ),
    )
    .unwrap();
    let mut run = common::KillOnDrop::new(
        edgevlm()
            .args(["run", "-c", cfg.to_str().unwrap()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    assert!(
        common::wait_until(Duration::from_secs(30), || std::net::TcpStream::connect((
            "127.0.0.1",
            port
        ))
        .is_ok())
        .await
    );
    // `online` follows the runtime's subscription to questions on its connection: a question
    // published before that would reach nobody (the broker keeps no session for it).
    let w = common::mqtt::Subscriber::start(port, &["edgevlm/available"]).await;
    assert!(
        w.wait(Duration::from_secs(30), |m| m
            .iter()
            .any(|m| m.text == "online"))
            .await
    );
    let broker = format!("mqtt://127.0.0.1:{port}");
    let out = ask(vec![
        "door".into(),
        "What moves?".into(),
        "--broker".into(),
        broker.clone(),
        "--window-secs".into(),
        "5".into(),
    ])
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(
            "error: no_model: no model is loaded: the engine stage is off (engine.enabled = false)"
        ),
        "{}",
        text(&out.stderr)
    );
    let out = ask(vec![
        "door".into(),
        "What moves?".into(),
        "--broker".into(),
        broker.clone(),
        "--window-secs".into(),
        "25".into(),
    ])
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("window_too_long"),
        "{}",
        text(&out.stderr)
    );
    let out = ask(vec![
        "porch".into(),
        "Anyone?".into(),
        "--broker".into(),
        broker,
    ])
    .await;
    assert!(
        text(&out.stderr).contains("unknown_camera: no camera `porch` (cameras: door)"),
        "{}",
        text(&out.stderr)
    );
    let _ = run.kill();
    let _ = run.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_exits_3_when_nothing_answers_or_the_broker_is_unreachable() {
    let broker = Mosquitto::start();
    let out = ask(vec![
        "door".into(),
        "Anyone?".into(),
        "--broker".into(),
        broker.url(),
        "--timeout-secs".into(),
        "1".into(),
    ])
    .await;
    assert_eq!(out.status.code(), Some(3));
    assert!(
        text(&out.stderr).contains("no answer within 1 s"),
        "{}",
        text(&out.stderr)
    );

    let out = ask(vec![
        "door".into(),
        "Anyone?".into(),
        "--broker".into(),
        format!("mqtt://127.0.0.1:{}", free_port()),
        "--timeout-secs".into(),
        "2".into(),
    ])
    .await;
    assert_eq!(out.status.code(), Some(3));
    assert!(
        text(&out.stderr).contains("error: MQTT:"),
        "{}",
        text(&out.stderr)
    );

    let out = ask(vec![
        "door".into(),
        "x".into(),
        "--broker".into(),
        "ws://h".into(),
    ])
    .await;
    assert_eq!(out.status.code(), Some(2));
}
