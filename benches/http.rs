//! The HTTP API under load, on loopback, with the runtime in process (tiny model, one test camera,
//! the embedded MQTT broker for the comparison).
//!
//! `cargo bench --bench http` (after scripts/setup.sh). A documented harness, not criterion:
//! what is measured is the server through sockets.
//!
//! 1. `GET /v1/cameras/door` from 50 concurrent keep-alive clients for 5 s: requests/s and
//!    latency percentiles.
//! 2. Questions as Server-Sent Events from 50 concurrent clients, 4 each (`max_tokens` 8,
//!    `query.concurrency` 1 and a queue of 16, as configured by default): time to the first event
//!    of those answered, and how many were answered `busy` at once.
//! 3. 1,000 idle `GET /v1/live` subscribers: the process's resident memory before and after.
//! 4. Time to the first token of the same question, one at a time: over HTTP (first `chunk`
//!    event) and over MQTT (first chunk on the answer topic, through the embedded broker, or
//!    through Mosquitto with `EDGEVLM_BENCH_BROKER=mosquitto`).

mod common;
use edgevlm::config::Config;
use edgevlm::runtime::{Runtime, RuntimeOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port")
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// One keep-alive GET: the status. Reads exactly the response (Content-Length).
fn get(reader: &mut BufReader<TcpStream>, path: &str) -> u16 {
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
    reader.get_mut().write_all(req.as_bytes()).unwrap();
    let mut status = 0;
    let mut len = 0usize;
    let mut line = String::new();
    loop {
        line.clear();
        reader.read_line(&mut line).unwrap();
        if status == 0 {
            status = line
                .split(' ')
                .nth(1)
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body).unwrap();
    status
}

/// An SSE question: (status, time to the first event, answered or not).
fn ask_sse(port: u16, question: &str) -> (u16, Option<Duration>) {
    let body = format!(r#"{{"question":"{question}","max_tokens":8}}"#);
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let t0 = Instant::now();
    let req = format!(
        "POST /v1/cameras/door/questions HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut reader = BufReader::new(s);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let status = line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let mut first = None;
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        if line.starts_with("event: chunk") && first.is_none() {
            first = Some(t0.elapsed());
        }
        if line.starts_with("event: answer") || line.starts_with("event: error") {
            break;
        }
    }
    (status, first)
}

/// A child process killed when dropped.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (http, mqtt) = (free_port(), free_port());
    let state = std::env::temp_dir().join(format!("edgevlm-bench-http-{}", std::process::id()));
    let model = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("engines/tiny/model");
    let mosquitto = std::env::var("EDGEVLM_BENCH_BROKER").is_ok_and(|b| b == "mosquitto");
    let _broker = mosquitto.then(|| {
        let conf = state.with_extension("mosquitto.conf");
        std::fs::create_dir_all(&state).unwrap();
        std::fs::write(
            &conf,
            format!("listener {mqtt} 127.0.0.1\nallow_anonymous true\nset_tcp_nodelay true\n"),
        )
        .unwrap();
        let child = std::process::Command::new("/usr/sbin/mosquitto")
            .arg("-c")
            .arg(&conf)
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("mosquitto");
        std::thread::sleep(Duration::from_millis(500));
        KillOnDrop(child)
    });
    let mqtt_lines = if mosquitto {
        format!("broker = \"mqtt://127.0.0.1:{mqtt}\"")
    } else {
        format!("listen = \"127.0.0.1:{mqtt}\"")
    };
    let text = format!(
        "[runtime]\nstate_dir = \"{}\"\n[engine]\nmodel_dir = \"{}\"\nthreads = 1\n\
         [mqtt]\n{mqtt_lines}\n[http]\nlisten = \"127.0.0.1:{http}\"\n\
         [[cameras]]\nid = \"door\"\nuri = \"test://ball\"\nsample_fps = 2\nwindow_secs = 10\nnarrate = []\n",
        state.display(),
        model.display()
    );
    let config = Config::parse(&text, None).expect("config");
    let running = rt
        .block_on(Runtime::start(config, RuntimeOptions::default()))
        .expect("start");
    // Ready, with footage.
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let s = TcpStream::connect(("127.0.0.1", http)).unwrap();
        if get(&mut BufReader::new(s), "/readyz") == 200 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(3));
    println!("http bench: loopback, tiny model on 1 thread, 2 tokio workers");

    // 1. GET under 50 concurrent clients.
    let until = Instant::now() + Duration::from_secs(5);
    let workers: Vec<_> = (0..50)
        .map(|_| {
            std::thread::spawn(move || {
                let s = TcpStream::connect(("127.0.0.1", http)).unwrap();
                let mut r = BufReader::new(s);
                let mut lat = Vec::new();
                while Instant::now() < until {
                    let t = Instant::now();
                    assert_eq!(get(&mut r, "/v1/cameras/door"), 200);
                    lat.push(t.elapsed().as_secs_f64() * 1e3);
                }
                lat
            })
        })
        .collect();
    let mut lat: Vec<f64> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    println!(
        "GET /v1/cameras/door, 50 clients, 5 s: {} requests = {:.0} req/s; latency median {:.2} ms, p99 {:.2} ms",
        lat.len(),
        lat.len() as f64 / 5.0,
        pct(&mut lat, 0.5),
        pct(&mut lat, 0.99)
    );

    // 2. SSE questions under 50 concurrent clients.
    let workers: Vec<_> = (0..50)
        .map(|_| {
            std::thread::spawn(move || {
                (0..4)
                    .map(|_| ask_sse(http, "What is moving?"))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let results: Vec<(u16, Option<Duration>)> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    let mut ttfb: Vec<f64> = results
        .iter()
        .filter_map(|(_, f)| f.map(|d| d.as_secs_f64() * 1e3))
        .collect();
    let busy = results.iter().filter(|(s, _)| *s == 503).count();
    println!(
        "SSE questions, 50 clients x 4: {} answered (first event median {:.0} ms, p99 {:.0} ms), {busy} refused busy (503) at once",
        ttfb.len(),
        pct(&mut ttfb, 0.5),
        pct(&mut ttfb, 0.99)
    );

    // 3. 1,000 idle live subscribers.
    let before = common::rss_kib();
    let idle: Vec<TcpStream> = (0..1000)
        .map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", http)).unwrap();
            s.write_all(b"GET /v1/live HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
                .unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let after = common::rss_kib();
    println!(
        "1000 idle /v1/live subscribers: resident memory +{:.1} MiB ({:.1} KiB each)",
        after.saturating_sub(before) as f64 / 1024.0,
        after.saturating_sub(before) as f64 / 1000.0
    );
    drop(idle);

    // 4. First token, HTTP against MQTT, one at a time.
    let mut http_first = Vec::new();
    for _ in 0..10 {
        if let (200, Some(d)) = ask_sse(http, "What colour is it?") {
            http_first.push(d.as_secs_f64() * 1e3);
        }
    }
    let mut mqtt_first = Vec::new();
    rt.block_on(async {
        let mut opts = rumqttc::MqttOptions::new("bench-asker", "127.0.0.1", mqtt);
        opts.set_max_packet_size(1 << 20, 1 << 20);
        let (client, mut events) = rumqttc::AsyncClient::new(opts, 64);
        // As the runtime's own client does (through its size guard): no Nagle delay on small
        // packets, which would hold each question behind the previous answer's acknowledgements.
        let mut net = events.network_options();
        net.set_tcp_nodelay(true);
        events.set_network_options(net);
        client
            .subscribe("edgevlm/door/answer/+", rumqttc::QoS::AtLeastOnce)
            .await
            .unwrap();
        // Until the SUBACK.
        loop {
            if let Ok(rumqttc::Event::Incoming(rumqttc::Packet::SubAck(_))) = events.poll().await {
                break;
            }
        }
        for n in 0..10 {
            let id = format!("b{n}");
            let t0 = Instant::now();
            client
                .publish(
                    "edgevlm/door/query",
                    rumqttc::QoS::AtLeastOnce,
                    false,
                    format!(r#"{{"id":"{id}","question":"What colour is it?","max_tokens":8}}"#),
                )
                .await
                .unwrap();
            let mut first = None;
            loop {
                if let Ok(rumqttc::Event::Incoming(rumqttc::Packet::Publish(p))) =
                    events.poll().await
                    && p.topic.ends_with(&id)
                {
                    let v: serde_json::Value = serde_json::from_slice(&p.payload).unwrap();
                    if first.is_none() && v.get("delta").is_some() {
                        first = Some(t0.elapsed());
                    }
                    if v.get("text").is_some() || v.get("error").is_some() {
                        break;
                    }
                }
            }
            if let Some(d) = first {
                mqtt_first.push(d.as_secs_f64() * 1e3);
            }
        }
    });
    println!(
        "first token, one question at a time (10 each): HTTP SSE median {:.1} ms, MQTT ({}) median {:.1} ms",
        pct(&mut http_first, 0.5),
        if mosquitto {
            "Mosquitto"
        } else {
            "embedded broker"
        },
        pct(&mut mqtt_first, 0.5)
    );
    rt.block_on(running.shutdown());
    let _ = std::fs::remove_dir_all(&state);
}
