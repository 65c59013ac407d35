//! The publisher against real brokers (Mosquitto on a free port, and the embedded rumqttd):
//! availability and last will, retained status, and nothing lost within the outbox bound while
//! the broker is unreachable or restarted without persistence.

mod common;

use common::mqtt::{Mosquitto, Relay, Subscriber, free_port};
use edgevlm::broker::EmbeddedBroker;
use edgevlm::config::{BrokerChoice, EmbeddedConfig, MqttConfig, WhenFull};
use edgevlm::narrate::{Narration, Trigger};
use edgevlm::publish::{self, Connection, Endpoint, Publisher, StartOptions, Topics};
use edgevlm::query::CameraDirectory;
use edgevlm::ring::CounterSnapshot;
use edgevlm::supervisor::{CameraReport, CameraState};
use std::time::Duration;

fn config(client_id: &str) -> MqttConfig {
    MqttConfig {
        broker: BrokerChoice::External {
            host: "127.0.0.1".into(),
            port: 1,
            tls: false,
        },
        client_id: client_id.into(),
        keep_alive: Duration::from_secs(5),
        retry_initial: Duration::from_millis(50),
        retry_max: Duration::from_millis(300),
        ..MqttConfig::default()
    }
}

fn start(cfg: &MqttConfig, endpoint: Endpoint) -> (Publisher, Connection) {
    let cameras = CameraDirectory::new([("door".to_string(), Duration::from_secs(60))]);
    let (publisher, queries, connection) =
        publish::start(cfg, endpoint, cameras, StartOptions::default());
    drop(queries);
    (publisher, connection)
}

fn embedded() -> EmbeddedBroker {
    let cfg = EmbeddedConfig {
        listen: format!("127.0.0.1:{}", free_port()).parse().unwrap(),
        users: Vec::new(),
    };
    EmbeddedBroker::start(&cfg, &Topics::new("edgevlm"), "unused").unwrap()
}

/// `e` reached through another port (a relay in front of it), with the same login.
fn via(e: &Endpoint, port: u16) -> Endpoint {
    Endpoint { port, ..e.clone() }
}

/// The login of an endpoint, as a subscriber takes it.
fn login_of(e: &Endpoint) -> Option<(&str, &str)> {
    e.login.as_ref().map(|(u, p)| (u.as_str(), p.expose()))
}

fn narration(n: u32) -> Narration {
    Narration {
        id: format!("n{n}"),
        camera: "door".into(),
        trigger: Trigger::Interval,
        text: format!("narration number {n}"),
        stream_start_secs: f64::from(n),
        stream_end_secs: f64::from(n) + 1.0,
        wall_start: 1.7e9,
        wall_end: 1.7e9 + 1.0,
        window_start_secs: 0.0,
        window_end_secs: f64::from(n) + 1.0,
        frames: 2,
        visual_tokens: 100,
        prompt_tokens: 130,
        generated_tokens: 5,
        first_token_ms: 10.0,
        total_ms: 30.0,
        incomplete: false,
        activity: 0.3,
        event: None,
        snapshot: None,
        watch: None,
    }
}

fn report(camera: &str) -> CameraReport {
    CameraReport {
        camera: camera.into(),
        state: CameraState::Running,
        reason: None,
        source: "test://ball".into(),
        pipeline: "test".into(),
        geometry: Some("336x196".into()),
        tokens_per_frame: Some(84),
        source_caps: None,
        fps_in: 30.0,
        fps_sampled: 1.0,
        window_frames: 12,
        window_span_secs: 11.0,
        state_secs: 12.5,
        prune_mode: "reference".into(),
        kept_ratio: 0.4,
        prune_threshold: Some(0.1),
        decode: None,
        counters: CounterSnapshot::default(),
        memory: None,
        family: None,
    }
}

/// The id of a narration sent only as a fence.
const MARKER: u32 = 1000;

/// Waits until the broker has acknowledged `n` messages of the outbox (30 s at most).
async fn delivered(publisher: &Publisher, n: u64, port: u16) {
    assert!(
        common::wait_until(Duration::from_secs(30), || publisher
            .stats()
            .outbox
            .delivered
            >= n)
        .await,
        "port {port}: the broker never acknowledged message {n}: {:?}",
        publisher.stats()
    );
}

/// Ids of narrations received, in arrival order.
fn narration_ids(w: &Subscriber) -> Vec<u32> {
    w.on("edgevlm/door/narration")
        .iter()
        .filter_map(|m| m.json()["id"].as_str()?.strip_prefix('n')?.parse().ok())
        .collect()
}

/// First occurrences in arrival order (QoS 1 may duplicate, never lose).
fn first_occurrences(ids: &[u32]) -> Vec<u32> {
    let mut seen = std::collections::BTreeSet::new();
    ids.iter().copied().filter(|i| seen.insert(*i)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn availability_is_online_while_connected_and_offline_after_a_clean_shutdown() {
    let broker = Mosquitto::start();
    let (publisher, connection) = start(
        &config("avail-clean"),
        Endpoint::plain("127.0.0.1", broker.port),
    );
    let w = Subscriber::start(broker.port, &["edgevlm/available"]).await;
    assert!(
        w.wait(Duration::from_secs(30), |m| m
            .iter()
            .any(|m| m.text == "online"))
            .await
    );
    assert!(publisher.is_connected());
    // The bound only limits a failure: shutdown returns once `offline` is acknowledged.
    connection.shutdown(Duration::from_secs(30)).await;
    // A late subscriber sees the retained value: offline.
    let late = Subscriber::start(broker.port, &["edgevlm/available"]).await;
    assert!(
        late.wait(Duration::from_secs(30), |m| m
            .iter()
            .any(|m| m.retain && m.text == "offline"))
            .await,
        "{:?}",
        late.messages()
    );
}

/// The publisher reaches the broker at `publish_to` through a relay; the watcher connects to
/// `broker_port` (the embedded broker's public port: the runtime itself uses an internal one).
async fn will_then_online_again(name: &str, publish_to: Endpoint, broker_port: u16) {
    let relay = Relay::start(publish_to.port).await;
    let (_publisher, _connection) = start(
        &config(&format!("will-{name}")),
        via(&publish_to, relay.port),
    );
    let w = Subscriber::start(broker_port, &["edgevlm/available"]).await;
    let texts = |m: &[common::mqtt::Received]| m.iter().map(|m| m.text.clone()).collect::<Vec<_>>();
    assert!(
        w.wait(Duration::from_secs(30), |m| texts(m)
            .contains(&"online".into()))
            .await,
        "{name}: {:?}",
        w.messages()
    );
    // The link dies without a DISCONNECT: the broker publishes the will.
    relay.cut();
    assert!(
        w.wait(Duration::from_secs(30), |m| texts(m)
            .contains(&"offline".into()))
            .await,
        "{name}: no last will: {:?}",
        w.messages()
    );
    relay.restore();
    assert!(
        w.wait(Duration::from_secs(30), |m| texts(m).last()
            == Some(&"online".to_string()))
            .await,
        "{name}: online not republished: {:?}",
        w.messages()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_connection_fires_the_last_will_and_online_returns_after_reconnect() {
    let mosquitto = Mosquitto::start();
    let plain = Endpoint::plain("127.0.0.1", mosquitto.port);
    will_then_online_again("mosquitto", plain, mosquitto.port).await;
    let embedded = embedded();
    will_then_online_again(
        "embedded",
        embedded.runtime_endpoint(),
        embedded.listen().port(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn camera_status_is_retained_for_a_late_subscriber() {
    let mosquitto = Mosquitto::start();
    let emb = embedded();
    let brokers = [
        (Endpoint::plain("127.0.0.1", mosquitto.port), mosquitto.port),
        (emb.runtime_endpoint(), emb.listen().port()),
    ];
    for (endpoint, port) in brokers {
        let (publisher, _connection) = start(&config(&format!("status-{port}")), endpoint.clone());
        let stats = Subscriber::start_as(port, &["edgevlm/+/stats"], login_of(&endpoint)).await;
        // Stats are not queued while the broker is unreachable (by design): publish once the
        // client is connected, or a slow start drops them and the count below is short.
        assert!(common::wait_until(Duration::from_secs(30), || publisher.is_connected()).await);
        publisher.status(&report("door"));
        publisher.status(&report("yard"));
        // The figures change on every report; the status only when the camera's facts do.
        let mut figures = report("door");
        figures.window_frames = 13;
        figures.fps_in = 14.996;
        publisher.status(&figures);
        let mut second = figures.clone();
        second.geometry = Some("448x252".into());
        publisher.status(&second);
        // Fence: a narration queued after the statuses is handed to the client after them (the
        // retained state goes first), on the same connection; once the broker acknowledged it,
        // it has stored every status before it.
        publisher.narration(&narration(1));
        // Everything queued so far (the stats count too), not just one message.
        delivered(&publisher, publisher.stats().outbox.accepted, port).await;
        let late = Subscriber::start(port, &["edgevlm/+/status"]).await;
        assert!(
            late.wait(Duration::from_secs(30), |m| m.len() >= 2).await,
            "port {port}: {:?}",
            late.messages()
        );
        let door = late.on("edgevlm/door/status");
        let last = door.last().unwrap();
        assert!(last.retain);
        let doc = last.json();
        assert_eq!(doc["state"], "running");
        assert_eq!(doc["geometry"], "448x252");
        assert!(doc.get("window_frames").is_none(), "{doc}");
        assert!(doc["ts"].as_f64().unwrap() > 1.7e9);
        // Every report's figures went to the stats topic, rounded, not retained.
        assert!(
            stats.wait(Duration::from_secs(30), |m| m.len() >= 4).await,
            "port {port}: {:?}",
            stats.messages()
        );
        let door_stats: Vec<_> = stats
            .on("edgevlm/door/stats")
            .iter()
            .map(|m| m.json())
            .collect();
        assert_eq!(door_stats.len(), 3, "{door_stats:?}");
        assert_eq!(door_stats[1]["window_frames"], 13);
        assert_eq!(door_stats[1]["fps_in"], 15.0);
        assert!(stats.messages().iter().all(|m| !m.retain));
        // A camera removed by a reload loses its retained status.
        publisher.clear_status("yard");
        // Fence, as above: the broker has processed the clearing once this one is acknowledged.
        publisher.narration(&narration(2));
        delivered(&publisher, publisher.stats().outbox.accepted, port).await;
        // (It publishes under the prefix: on the embedded broker only the runtime's login may.)
        let later =
            Subscriber::start_as(endpoint.port, &["edgevlm/+/status"], login_of(&endpoint)).await;
        // Fence on the subscriber's side: the broker sends the retained messages of a new
        // subscription before anything published on its filter afterwards, so once this marker
        // (published after the SUBACK, not retained) is in, every retained status has arrived.
        later
            .publish("edgevlm/fence/status", b"fence".to_vec())
            .await;
        assert!(
            later
                .wait(Duration::from_secs(30), |m| m
                    .iter()
                    .any(|m| m.topic == "edgevlm/fence/status"))
                .await,
            "port {port}: the marker never came back: {:?}",
            later.messages()
        );
        assert!(
            later.on("edgevlm/yard/status").is_empty(),
            "port {port}: {:?}",
            later.messages()
        );
        let door = later.on("edgevlm/door/status");
        assert_eq!(door.len(), 1, "port {port}: {:?}", later.messages());
        assert!(door[0].retain, "port {port}: {door:?}");
        assert_eq!(door[0].json()["geometry"], "448x252");
        let fence = later.on("edgevlm/fence/status");
        assert!(
            fence.iter().all(|m| !m.retain && m.text == "fence"),
            "port {port}: {fence:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn narrations_produced_while_mosquitto_is_down_arrive_in_order_after_it_restarts() {
    let mut broker = Mosquitto::start();
    // The relay holds the publisher off until the watcher has re-subscribed to the restarted
    // broker (which, without persistence, forgot every session and subscription).
    let relay = Relay::start(broker.port).await;
    let (publisher, _connection) = start(
        &config("outage-mosq"),
        Endpoint::plain("127.0.0.1", relay.port),
    );
    let w = Subscriber::start(broker.port, &["edgevlm/+/narration"]).await;
    for n in 0..10 {
        publisher.narration(&narration(n));
    }
    assert!(
        w.wait(Duration::from_secs(30), |_| narration_ids(&w).len() >= 10)
            .await
    );
    assert!(
        common::wait_until(Duration::from_secs(30), || publisher.stats().outbox.pending
            == 0)
        .await
    );

    relay.cut();
    broker.stop();
    assert!(
        common::wait_until(Duration::from_secs(30), || !publisher.is_connected()).await,
        "the publisher did not notice the outage"
    );
    for n in 10..40 {
        publisher.narration(&narration(n));
    }
    // A chunk during the outage is not queued (the final message carries the text).
    let mut stream = publisher.narration_stream("door", "n99");
    stream.chunk("partial");
    let stats = publisher.stats();
    assert_eq!(stats.outbox.pending, 30, "{stats:?}");
    assert_eq!(stats.outbox.stream_skipped, 1, "{stats:?}");
    // A reconnection attempt fails while the broker is down (the outbox waits through it).
    let errors = stats.connection_errors;
    assert!(
        common::wait_until(Duration::from_secs(30), || publisher
            .stats()
            .connection_errors
            > errors)
        .await,
        "no reconnection attempt during the outage: {:?}",
        publisher.stats()
    );
    assert_eq!(publisher.stats().outbox.pending, 30);

    broker.restart();
    assert!(
        w.wait(Duration::from_secs(30), |_| w.is_subscribed()).await,
        "watcher did not reconnect"
    );
    relay.restore();
    assert!(
        w.wait(Duration::from_secs(30), |_| first_occurrences(
            &narration_ids(&w)
        )
        .len()
            >= 40)
            .await,
        "got {:?}; stats {:?}",
        narration_ids(&w),
        publisher.stats()
    );
    assert_eq!(
        first_occurrences(&narration_ids(&w)),
        (0..40).collect::<Vec<_>>()
    );
    assert!(
        common::wait_until(Duration::from_secs(30), || publisher.stats().outbox.pending
            == 0)
        .await
    );
    assert_eq!(publisher.stats().outbox.dropped_full, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn narrations_produced_while_the_embedded_broker_is_unreachable_arrive_in_order() {
    let broker = embedded();
    let internal = broker.runtime_endpoint();
    let relay = Relay::start(internal.port).await;
    let (publisher, _connection) = start(&config("outage-emb"), via(&internal, relay.port));
    let w = Subscriber::start(broker.listen().port(), &["edgevlm/+/narration"]).await;
    assert!(common::wait_until(Duration::from_secs(30), || publisher.is_connected()).await);
    for n in 0..5 {
        publisher.narration(&narration(n));
    }
    relay.cut();
    for n in 5..25 {
        publisher.narration(&narration(n));
    }
    // The outage is noticed (the relay closed the connection and refuses new ones) before the
    // link comes back, however slowly the publisher runs.
    assert!(
        common::wait_until(Duration::from_secs(30), || !publisher.is_connected()).await,
        "the publisher did not notice the outage: {:?}",
        publisher.stats()
    );
    relay.restore();
    assert!(
        w.wait(Duration::from_secs(30), |_| first_occurrences(
            &narration_ids(&w)
        )
        .len()
            >= 25)
            .await,
        "got {:?}; stats {:?}",
        narration_ids(&w),
        publisher.stats()
    );
    assert_eq!(
        first_occurrences(&narration_ids(&w)),
        (0..25).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_outbox_bound_drops_are_counted_and_the_policy_decides_which() {
    let broker = Mosquitto::start();
    for (policy, expected) in [
        (WhenFull::DropOldest, (3..8).collect::<Vec<u32>>()),
        (WhenFull::DropNewest, (0..5).collect::<Vec<u32>>()),
    ] {
        let relay = Relay::start(broker.port).await;
        relay.cut();
        let mut cfg = config(&format!("bound-{policy}"));
        cfg.outbox_capacity = 5;
        cfg.outbox_when_full = policy;
        let (publisher, _connection) = start(&cfg, Endpoint::plain("127.0.0.1", relay.port));
        for n in 0..8 {
            publisher.narration(&narration(n));
        }
        let stats = publisher.stats();
        assert_eq!(stats.outbox.dropped_full, 3, "{policy}: {stats:?}");
        assert_eq!(stats.outbox.pending, 5);
        let w = Subscriber::start(broker.port, &["edgevlm/+/narration"]).await;
        relay.restore();
        assert!(
            w.wait(Duration::from_secs(30), |_| narration_ids(&w).len() >= 5)
                .await,
            "{policy}: {:?}",
            publisher.stats()
        );
        // Fence: once the outbox is empty, a marker queued behind everything it held arrives
        // after all of it (one ordered outbox, one connection, QoS 1 in order): a dropped
        // narration that was sent anyway would be in by then.
        assert!(
            common::wait_until(Duration::from_secs(30), || publisher.stats().outbox.pending
                == 0)
            .await,
            "{policy}: {:?}",
            publisher.stats()
        );
        publisher.narration(&narration(MARKER));
        assert!(
            w.wait(Duration::from_secs(30), |_| narration_ids(&w)
                .contains(&MARKER))
                .await,
            "{policy}: the marker never arrived: {:?}",
            narration_ids(&w)
        );
        let ids: Vec<u32> = first_occurrences(&narration_ids(&w))
            .into_iter()
            .filter(|&i| i != MARKER)
            .collect();
        assert_eq!(ids, expected, "{policy}");
    }
}
