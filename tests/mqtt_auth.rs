//! The embedded broker with `[[mqtt.users]]`: logins are checked, only users with `ask = true`
//! may publish questions, and nobody but the runtime publishes under the topic prefix.

mod common;

use common::edgevlm;
use common::mqtt::{Watcher, free_port};
use std::time::Duration;

/// Connects once; `Ok` on CONNACK, `Err` with the refusal.
async fn login(port: u16, user: Option<(&str, &str)>) -> Result<(), String> {
    let mut opts = rumqttc::MqttOptions::new(format!("probe-{}", free_port()), "127.0.0.1", port);
    if let Some((u, p)) = user {
        opts.set_credentials(u, p);
    }
    let (_client, mut eventloop) = rumqttc::AsyncClient::new(opts, 4);
    match tokio::time::timeout(Duration::from_secs(5), eventloop.poll()).await {
        Ok(Ok(rumqttc::Event::Incoming(rumqttc::Packet::ConnAck(_)))) => Ok(()),
        Ok(Ok(other)) => Err(format!("unexpected {other:?}")),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("timeout".into()),
    }
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
             [mqtt]\nlisten = \"127.0.0.1:{port}\"\n\
             [[mqtt.users]]\nname = \"viewer\"\npassword_env = \"EDGEVLM_TEST_VIEWER_PW\"\n\
             [[mqtt.users]]\nname = \"asker\"\npassword_file = \"asker.pw\"\nask = true\n\
             [[cameras]]\nid = \"door\"\nuri = \"test://ball\"\n"
        ),
    )
    .unwrap();
    let log = dir.join("stderr.log");
    let mut run = edgevlm()
        .args(["run", "-c", cfg.to_str().unwrap()])
        .env("EDGEVLM_TEST_VIEWER_PW", "s3cret-view")
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        common::wait_until(Duration::from_secs(20), || std::net::TcpStream::connect((
            "127.0.0.1",
            port
        ))
        .is_ok())
        .await,
        "{}",
        read_log()
    );

    // Logins.
    assert!(
        login(port, None).await.is_err(),
        "anonymous must be refused"
    );
    let refused = login(port, Some(("viewer", "wrong"))).await.unwrap_err();
    assert!(refused.contains("BadUserNamePassword"), "{refused}");
    login(port, Some(("viewer", "s3cret-view"))).await.unwrap();

    // Both users read the runtime's topics.
    let asker = Watcher::start_as(
        port,
        &["edgevlm/available", "edgevlm/door/answer/+"],
        Some(("asker", "s3cret-ask")),
    )
    .await;
    let viewer = Watcher::start_as(
        port,
        &["edgevlm/door/status"],
        Some(("viewer", "s3cret-view")),
    )
    .await;
    assert!(
        viewer
            .wait(Duration::from_secs(10), |m| !m.is_empty())
            .await,
        "viewer sees no status\n{}",
        read_log()
    );

    // The viewer's question is refused at the gate: its connection is closed and nothing answers.
    viewer
        .publish(
            "edgevlm/door/query",
            br#"{"id":"from-viewer","question":"Who?"}"#.to_vec(),
        )
        .await;
    // The asker's reaches the runtime and is answered (by the tiny model; `no_frames` while the
    // camera's memory is still empty).
    asker
        .publish(
            "edgevlm/door/query",
            br#"{"id":"from-asker","question":"Who?","max_tokens":8}"#.to_vec(),
        )
        .await;
    assert!(
        asker
            .wait(Duration::from_secs(30), |m| m
                .iter()
                .any(|m| m.topic == "edgevlm/door/answer/from-asker"
                    && (m.json()["text"].is_string()
                        || m.json()["error"]["code"] == "no_frames")))
            .await,
        "{:?}\n{}",
        asker.messages(),
        read_log()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(asker.on("edgevlm/door/answer/from-viewer").is_empty());
    assert!(
        read_log().contains("user `viewer` may not ask questions"),
        "{}",
        read_log()
    );

    // Nobody else may speak for the runtime.
    asker
        .publish("edgevlm/available", b"offline".to_vec())
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let late = Watcher::start_as(
        port,
        &["edgevlm/available"],
        Some(("viewer", "s3cret-view")),
    )
    .await;
    assert!(late.wait(Duration::from_secs(5), |m| !m.is_empty()).await);
    assert_eq!(late.on("edgevlm/available")[0].text, "online");
    assert!(
        read_log().contains("which only edgevlm publishes to"),
        "{}",
        read_log()
    );
    // The password never appears in the log.
    assert!(!read_log().contains("s3cret"), "{}", read_log());

    let _ = run.kill();
    let _ = run.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
