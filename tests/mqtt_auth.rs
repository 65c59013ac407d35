//! The embedded broker with `[[mqtt.users]]`: logins are checked, only users with `ask = true`
//! may publish questions, and nobody but the runtime publishes under the topic prefix.

mod common;

use common::edgevlm;
use common::mqtt::{Subscriber, free_port};
use std::time::Duration;

/// Connects once; `Ok` on CONNACK, `Err` with the refusal.
async fn login(port: u16, user: Option<(&str, &str)>) -> Result<(), String> {
    let mut opts = rumqttc::MqttOptions::new(format!("probe-{}", free_port()), "127.0.0.1", port);
    if let Some((u, p)) = user {
        opts.set_credentials(u, p);
    }
    let (_client, mut eventloop) = rumqttc::AsyncClient::new(opts, 4);
    // The bound only limits a hang; a refusal is a CONNACK, not a timeout.
    match tokio::time::timeout(Duration::from_secs(30), eventloop.poll()).await {
        Ok(Ok(rumqttc::Event::Incoming(rumqttc::Packet::ConnAck(_)))) => Ok(()),
        Ok(Ok(other)) => Err(format!("unexpected {other:?}")),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("timeout".into()),
    }
}

/// (accepted, refused) questions of the newest `mqtt:` status line in `log`.
fn questions_counted(log: &str) -> Option<(u64, u64)> {
    let line = log.lines().rev().find(|l| l.contains("mqtt: connected"))?;
    let (_, counts) = line.split_once("| questions ")?;
    let mut words = counts.split(' ');
    let accepted = words.next()?.parse().ok()?;
    let _ = words.next()?;
    let refused = words.next()?.parse().ok()?;
    Some((accepted, refused))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_users_allowed_to_ask_can_publish_questions() {
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("edgevlm-auth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("asker.pw"), "s3cret-ask\n").unwrap();
    let cfg = dir.join("edgevlm.toml");
    std::fs::write(
        &cfg,
        format!(
            "[runtime]\nstate_dir = \"state\"\nstatus_interval_secs = 0.5\n\
             [engine]\nmodel_dir = \"{}\"\n\
             [mqtt]\nlisten = \"127.0.0.1:{port}\"\n\
             [[mqtt.users]]\nname = \"viewer\"\npassword_env = \"EDGEVLM_TEST_VIEWER_PW\"\n\
             [[mqtt.users]]\nname = \"asker\"\npassword_file = \"asker.pw\"\nask = true\n\
             [[cameras]]\nid = \"door\"\nuri = \"test://ball\"\n",
            common::TINY_MODEL
        ),
    )
    .unwrap();
    let log = dir.join("stderr.log");
    let mut run = common::KillOnDrop::new(
        edgevlm()
            .args(["run", "-c", cfg.to_str().unwrap()])
            .env("EDGEVLM_TEST_VIEWER_PW", "s3cret-view")
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        common::wait_until(Duration::from_secs(30), || std::net::TcpStream::connect((
            "127.0.0.1",
            port
        ))
        .is_ok())
        .await,
        "{}",
        read_log()
    );

    // Logins.
    let anonymous = login(port, None).await.unwrap_err();
    assert!(
        anonymous.contains("NotAuthorized"),
        "anonymous must be refused: {anonymous}"
    );
    let refused = login(port, Some(("viewer", "wrong"))).await.unwrap_err();
    assert!(refused.contains("BadUserNamePassword"), "{refused}");
    // A user name cannot forge a log line: its newline is logged as `\n`.
    let forged = "mallory\n2026-12-01T00:00:00Z  INFO edgevlm: forged";
    login(port, Some((forged, "x"))).await.unwrap_err();
    assert!(
        common::wait_until(Duration::from_secs(30), || read_log()
            .contains(r"mallory\n2026-12-01T00:00:00Z  INFO edgevlm: forged"))
        .await,
        "{}",
        read_log()
    );
    assert!(
        !read_log()
            .lines()
            .any(|l| l.starts_with("2026-12-01T00:00:00Z")),
        "{}",
        read_log()
    );
    login(port, Some(("viewer", "s3cret-view"))).await.unwrap();

    // Both users read the runtime's topics.
    let asker = Subscriber::start_as(
        port,
        &["edgevlm/available", "edgevlm/door/answer/+"],
        Some(("asker", "s3cret-ask")),
    )
    .await;
    let viewer = Subscriber::start_as(
        port,
        &["edgevlm/door/status"],
        Some(("viewer", "s3cret-view")),
    )
    .await;
    assert!(
        viewer
            .wait(Duration::from_secs(30), |m| !m.is_empty())
            .await,
        "viewer sees no status\n{}",
        read_log()
    );

    // The viewer's question is refused at the gate: its connection is closed and nothing answers.
    let viewer_drops = viewer.disconnects();
    viewer
        .publish(
            "edgevlm/door/query",
            br#"{"id":"from-viewer","question":"Who?"}"#.to_vec(),
        )
        .await;
    // Positive signals that the gate took its decision: it said so, and it closed the connection.
    assert!(
        common::wait_until(Duration::from_secs(30), || read_log()
            .contains("user `viewer` may not ask questions"))
        .await,
        "{}",
        read_log()
    );
    assert!(
        viewer
            .wait(Duration::from_secs(30), |_| viewer.disconnects()
                > viewer_drops)
            .await,
        "the gate did not close the viewer's connection\n{}",
        read_log()
    );
    // The asker's, sent only now, is handled: answered by the model (or, if the camera has no
    // frame encoded yet, told so); either way it passed the gate and the validation.
    asker
        .publish(
            "edgevlm/door/query",
            br#"{"id":"from-asker","question":"Who?","max_tokens":4}"#.to_vec(),
        )
        .await;
    assert!(
        asker
            .wait(Duration::from_secs(60), |m| m
                .iter()
                .any(|m| m.topic == "edgevlm/door/answer/from-asker"
                    && (m.json()["text"].is_string()
                        || m.json()["error"]["code"] == "no_frames")))
            .await,
        "{:?}\n{}",
        asker.messages(),
        read_log()
    );
    // Fence: the runtime receives questions in the order the broker got them, and the viewer's
    // would have reached the broker before the gate's verdict, so before the asker's. A status
    // line logged after the asker's answer arrived therefore counts every question the runtime
    // ever accepted: only the asker's.
    let log_since = |from: usize| {
        let bytes = std::fs::read(&log).unwrap_or_default();
        String::from_utf8_lossy(&bytes[from.min(bytes.len())..]).into_owned()
    };
    let seen = std::fs::read(&log).unwrap().len();
    assert!(
        common::wait_until(Duration::from_secs(30), || questions_counted(&log_since(
            seen
        ))
        .is_some())
        .await,
        "no status line after the answer\n{}",
        read_log()
    );
    assert_eq!(
        questions_counted(&log_since(seen)),
        Some((1, 0)),
        "questions (accepted, refused) after the answer; only the asker's may count\n{}",
        read_log()
    );
    assert!(
        asker.on("edgevlm/door/answer/from-viewer").is_empty(),
        "{:?}",
        asker.messages()
    );

    // Nobody else may speak for the runtime.
    let asker_drops = asker.disconnects();
    asker
        .publish("edgevlm/available", b"offline".to_vec())
        .await;
    // The gate refused it (it says so and closes the connection, MQTT 3.1.1 §3.3.5) instead of
    // relaying it: the frame is checked before it is written to the broker.
    assert!(
        common::wait_until(Duration::from_secs(30), || read_log()
            .contains("which only edgevlm publishes to"))
        .await,
        "{}",
        read_log()
    );
    assert!(
        asker
            .wait(Duration::from_secs(30), |_| asker.disconnects()
                > asker_drops)
            .await,
        "the gate did not close the asker's connection\n{}",
        read_log()
    );
    let late = Subscriber::start_as(
        port,
        &["edgevlm/available"],
        Some(("viewer", "s3cret-view")),
    )
    .await;
    assert!(late.wait(Duration::from_secs(30), |m| !m.is_empty()).await);
    let available = late.on("edgevlm/available");
    assert!(
        available[0].retain && available[0].text == "online",
        "{available:?}"
    );
    // The password never appears in the log.
    assert!(!read_log().contains("s3cret"), "{}", read_log());

    let _ = run.kill();
    let _ = run.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
