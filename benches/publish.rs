//! Publishing cost on loopback, against a real Mosquitto started here on a free port.
//!
//! `cargo bench --bench publish` (needs /usr/sbin/mosquitto). A documented harness rather than
//! criterion: what is measured is delivery through a broker to another client, not a function.
//!
//! 1. Sustained rate: answer chunks (a few bytes of text each, as a token stream produces) and
//!    narrations (~600 bytes) pushed as fast as the API accepts them, timed until the last one is
//!    received by a subscriber (QoS 1 end to end).
//! 2. Latency from the call that publishes a token to its delivery at a subscriber, median and
//!    p99, at a steady 200 tokens/s (faster than an edge LLM generates).
//! 3. Memory of a full outbox: `mqtt.outbox_capacity` narrations while the broker is unreachable,
//!    as the outbox accounts it and as the process's resident memory grows.
//! 4. Chunking (`mqtt.chunk_interval_ms`): a 64-token narration at 50 tokens/s (an edge LLM's
//!    pace), every token its own message (0 ms) against the default 100 ms: messages per
//!    narration and the delay from a token's call to the delivery of the chunk that carries it.

mod common;
use edgevlm::config::{BrokerChoice, MqttConfig};
use edgevlm::narrate::{Narration, Trigger};
use edgevlm::publish::{self, Endpoint, Publisher, QueryRequest, ReplyTo, StartOptions};
use edgevlm::query::CameraDirectory;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

fn mosquitto(port: u16) -> Child {
    let dir = std::env::temp_dir().join(format!("edgevlm-bench-mosq-{port}"));
    std::fs::create_dir_all(&dir).expect("dir");
    let conf = dir.join("m.conf");
    std::fs::write(
        &conf,
        format!("persistence false\nlistener {port} 127.0.0.1\nallow_anonymous true\nmax_queued_messages 0\n"),
    )
    .expect("conf");
    let mut child = Command::new("/usr/sbin/mosquitto")
        .arg("-c")
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("mosquitto (apt-get install mosquitto)");
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return child;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("mosquitto did not start");
}

fn config(capacity: usize) -> MqttConfig {
    MqttConfig {
        broker: BrokerChoice::External {
            host: "127.0.0.1".into(),
            port: 1,
            tls: false,
        },
        client_id: format!("bench-{}", free_port()),
        outbox_capacity: capacity,
        retry_initial: Duration::from_millis(50),
        retry_max: Duration::from_millis(200),
        // Sections 1 and 2 measure one message per call; section 4 compares intervals.
        chunk_interval: Duration::ZERO,
        ..MqttConfig::default()
    }
}

fn start(cfg: &MqttConfig, port: u16) -> (Publisher, publish::Connection) {
    let (p, q, c) = publish::start(
        cfg,
        Endpoint::plain("127.0.0.1", port),
        CameraDirectory::new([("door".to_string(), Duration::from_secs(60))]),
        StartOptions::default(),
    );
    let _: tokio::sync::mpsc::Receiver<QueryRequest> = q;
    (p, c)
}

/// A QoS 1 subscriber that records (receive instant, payload).
async fn subscriber(port: u16, filter: &str) -> Arc<Mutex<Vec<(Instant, Vec<u8>)>>> {
    let mut opts =
        rumqttc::MqttOptions::new(format!("bench-sub-{}", free_port()), "127.0.0.1", port);
    opts.set_max_packet_size(2 << 20, 2 << 20)
        .set_inflight(1000);
    let (client, mut eventloop) = rumqttc::AsyncClient::new(opts, 1000);
    let got = Arc::new(Mutex::new(Vec::new()));
    let (g, filter) = (got.clone(), filter.to_string());
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let mut ready_tx = Some(ready_tx);
    tokio::spawn(async move {
        loop {
            match eventloop.poll().await {
                Ok(rumqttc::Event::Incoming(rumqttc::Packet::ConnAck(_))) => {
                    let _ = client.try_subscribe(filter.clone(), rumqttc::QoS::AtLeastOnce);
                }
                Ok(rumqttc::Event::Incoming(rumqttc::Packet::SubAck(_))) => {
                    if let Some(tx) = ready_tx.take() {
                        let _ = tx.send(());
                    }
                }
                Ok(rumqttc::Event::Incoming(rumqttc::Packet::Publish(p))) => {
                    g.lock().unwrap().push((Instant::now(), p.payload.to_vec()));
                }
                Ok(_) => {}
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    });
    let _ = ready_rx.await;
    got
}

fn narration(n: u32) -> Narration {
    Narration {
        id: format!("n{n}"),
        camera: "door".into(),
        trigger: Trigger::Model,
        text: "A person in a red jacket walks up to the front door, rings the bell, waits for a \
               moment, then leaves a parcel on the step and walks back to a van parked on the \
               street. The van drives away to the left. Nothing else moves in the scene; the \
               porch light stays on and the door remains closed throughout."
            .into(),
        stream_start_secs: 1.0,
        stream_end_secs: 11.0,
        wall_start: 1.767e9,
        wall_end: 1.767e9 + 10.0,
        window_start_secs: 0.0,
        window_end_secs: 11.0,
        frames: 11,
        visual_tokens: 402,
        prompt_tokens: 471,
        generated_tokens: 60,
        first_token_ms: 180.0,
        total_ms: 900.0,
        incomplete: false,
        activity: 0.4,
        event: None,
        snapshot: None,
        watch: None,
    }
}

async fn wait_count(got: &Mutex<Vec<(Instant, Vec<u8>)>>, n: usize, bound: Duration) -> bool {
    let deadline = Instant::now() + bound;
    while got.lock().unwrap().len() < n {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    true
}

fn main() {
    if !std::path::Path::new("/usr/sbin/mosquitto").exists() {
        eprintln!("publish bench skipped: /usr/sbin/mosquitto is not installed");
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let port = free_port();
    let mut broker = mosquitto(port);
    rt.block_on(async {
        println!("publish bench: Mosquitto 2 on loopback, QoS 1 end to end, 2 worker threads");

        // 1a. Sustained chunk rate.
        const CHUNKS: usize = 20_000;
        let (publisher, _c) = start(&config(CHUNKS + 10), port);
        while !publisher.is_connected() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let got = subscriber(port, "edgevlm/door/answer/+").await;
        let reply = ReplyTo {
            id: "bench".into(),
            camera: "door".into(),
            topic: "edgevlm/door/answer/bench".into(),
            correlation: None,
        };
        let mut stream = publisher.answer_stream(reply);
        let t0 = Instant::now();
        for _ in 0..CHUNKS {
            stream.chunk(" token");
        }
        let pushed = t0.elapsed();
        assert!(wait_count(&got, CHUNKS, Duration::from_secs(120)).await, "chunks not delivered");
        let total = t0.elapsed();
        println!(
            "chunk rate: {CHUNKS} answer chunks in {:.2} s = {:.0} chunks/s delivered (push: {:.2} µs per call)",
            total.as_secs_f64(),
            CHUNKS as f64 / total.as_secs_f64(),
            pushed.as_secs_f64() * 1e6 / CHUNKS as f64
        );

        // 1b. Sustained narration rate.
        const NARRATIONS: usize = 5_000;
        let got_n = subscriber(port, "edgevlm/door/narration").await;
        let t0 = Instant::now();
        for n in 0..NARRATIONS {
            publisher.narration(&narration(n as u32));
        }
        assert!(wait_count(&got_n, NARRATIONS, Duration::from_secs(120)).await, "narrations not delivered");
        let total = t0.elapsed();
        let size = serde_json::to_vec(&narration(0)).map(|v| v.len()).unwrap_or(0);
        println!(
            "narration rate: {NARRATIONS} narrations ({size} B each) in {:.2} s = {:.0} narrations/s delivered",
            total.as_secs_f64(),
            NARRATIONS as f64 / total.as_secs_f64()
        );

        // 2. Latency at 200 tokens/s.
        got.lock().unwrap().clear();
        const TOKENS: usize = 2_000;
        let reply = ReplyTo {
            id: "lat".into(),
            camera: "door".into(),
            topic: "edgevlm/door/answer/lat".into(),
            correlation: None,
        };
        let mut stream = publisher.answer_stream(reply);
        let mut sent = Vec::with_capacity(TOKENS);
        let mut tick = tokio::time::interval(Duration::from_millis(5));
        for _ in 0..TOKENS {
            tick.tick().await;
            sent.push(Instant::now());
            stream.chunk(" token");
        }
        assert!(wait_count(&got, TOKENS, Duration::from_secs(30)).await, "latency chunks not delivered");
        let received = got.lock().unwrap().clone();
        let mut lat: Vec<f64> = received
            .iter()
            .filter_map(|(at, payload)| {
                let v: serde_json::Value = serde_json::from_slice(payload).ok()?;
                let seq = v["seq"].as_u64()? as usize;
                Some(at.duration_since(*sent.get(seq)?).as_secs_f64() * 1e3)
            })
            .collect();
        lat.sort_by(f64::total_cmp);
        let pct = |p: f64| lat[((lat.len() - 1) as f64 * p).round() as usize];
        println!(
            "token -> delivery latency at 200 tokens/s over {} tokens: median {:.3} ms, p99 {:.3} ms, max {:.3} ms",
            lat.len(),
            pct(0.5),
            pct(0.99),
            lat[lat.len() - 1]
        );

        // 4. Chunking.
        for interval_ms in [0u64, 100] {
            let cfg = MqttConfig {
                chunk_interval: Duration::from_millis(interval_ms),
                ..config(1000)
            };
            let (p, _c) = start(&cfg, port);
            while !p.is_connected() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let topic = "edgevlm/door/narration/stream".to_string();
            let got = subscriber(port, &topic).await;
            const TOKENS: usize = 64;
            const TOKEN: &str = " tok";
            let mut stream = p.narration_stream("door", format!("chunk-{interval_ms}"));
            let mut sent = Vec::with_capacity(TOKENS);
            let mut tick = tokio::time::interval(Duration::from_millis(20));
            for _ in 0..TOKENS {
                tick.tick().await;
                sent.push(Instant::now());
                stream.chunk(TOKEN);
            }
            stream.finish(&narration(0));
            let closed = |g: &[(Instant, Vec<u8>)]| {
                g.iter().any(|(_, m)| {
                    serde_json::from_slice::<serde_json::Value>(m)
                        .is_ok_and(|v| v["done"] == serde_json::Value::Bool(true))
                })
            };
            let until = Instant::now() + Duration::from_secs(10);
            while !closed(&got.lock().unwrap()) && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let chunks = got.lock().unwrap().clone();
            // Token i is in the chunk whose text reaches past i tokens.
            let mut lat = Vec::with_capacity(TOKENS);
            let mut carried = 0;
            for (at, m) in &chunks {
                let v: serde_json::Value = serde_json::from_slice(m).expect("chunk JSON");
                let n = v["delta"].as_str().unwrap_or("").len() / TOKEN.len();
                for t in &sent[carried..carried + n] {
                    lat.push(at.duration_since(*t).as_secs_f64() * 1e3);
                }
                carried += n;
            }
            assert_eq!(carried, TOKENS, "every token delivered");
            lat.sort_by(f64::total_cmp);
            println!(
                "chunking {interval_ms} ms: a {TOKENS}-token narration at 50 tokens/s in {} messages; token -> delivery median {:.1} ms, max {:.1} ms",
                chunks.len(),
                lat[lat.len() / 2],
                lat[lat.len() - 1]
            );
        }

        // 3. A full outbox while the broker is unreachable.
        let capacity = MqttConfig::default().outbox_capacity;
        let rss0 = common::rss_kib();
        let (offline, _c2) = start(&config(capacity), free_port());
        for n in 0..capacity as u32 * 2 {
            offline.narration(&narration(n));
        }
        let s = offline.stats();
        let rss1 = common::rss_kib();
        println!(
            "full outbox ({capacity} narrations of {size} B, default capacity): {} messages, {:.0} KiB accounted, resident memory +{} KiB; {} dropped by drop_oldest",
            s.outbox.pending,
            s.outbox.pending_bytes as f64 / 1024.0,
            rss1.saturating_sub(rss0),
            s.outbox.dropped_full
        );
        let big = 100_000;
        let (offline, _c3) = start(&config(big), free_port());
        let rss2 = common::rss_kib();
        for n in 0..big as u32 {
            offline.narration(&narration(n));
        }
        let s = offline.stats();
        println!(
            "full outbox (100000 narrations): {:.1} MiB accounted, resident memory +{:.1} MiB",
            s.outbox.pending_bytes as f64 / (1 << 20) as f64,
            common::rss_kib().saturating_sub(rss2) as f64 / 1024.0
        );
    });
    let _ = broker.kill();
    let _ = broker.wait();
}
