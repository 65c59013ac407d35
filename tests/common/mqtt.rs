//! MQTT fixtures: a real Mosquitto on a free loopback port, a relay that can cut the link, and an
//! independent subscriber (plain rumqttc, not the code under test) that records what arrives.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A free loopback port (bound then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

fn wait_port(port: u16, up: bool, bound: Duration) -> bool {
    let deadline = Instant::now() + bound;
    while Instant::now() < deadline {
        let ok = std::net::TcpStream::connect(("127.0.0.1", port)).is_ok();
        if ok == up {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Mosquitto from Debian on a free loopback port, persistence off; killed on drop.
pub struct Mosquitto {
    /// Its port.
    pub port: u16,
    dir: PathBuf,
    extra: String,
    child: Option<Child>,
}

impl Mosquitto {
    /// Starts it.
    pub fn start() -> Mosquitto {
        Mosquitto::with_config("")
    }

    /// Starts it with extra configuration lines for the listener.
    pub fn with_config(extra: &str) -> Mosquitto {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("edgevlm-mosq-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut m = Mosquitto {
            port,
            dir,
            extra: extra.to_string(),
            child: None,
        };
        m.restart();
        m
    }

    /// The broker URL.
    pub fn url(&self) -> String {
        format!("mqtt://127.0.0.1:{}", self.port)
    }

    /// The directory of its configuration (for extra files).
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// Kills it (SIGKILL: no goodbye to clients, nothing kept).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        assert!(
            wait_port(self.port, false, Duration::from_secs(30)),
            "mosquitto did not stop"
        );
    }

    /// Starts it again on the same port (a fresh broker: no sessions, no retained messages).
    pub fn restart(&mut self) {
        let conf = self.dir.join("mosquitto.conf");
        std::fs::write(
            &conf,
            format!(
                "persistence false\nlistener {} 127.0.0.1\nallow_anonymous true\n{}\n",
                self.port, self.extra
            ),
        )
        .unwrap();
        let child = Command::new("/usr/sbin/mosquitto")
            .arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mosquitto (apt-get install mosquitto)");
        self.child = Some(child);
        assert!(
            wait_port(self.port, true, Duration::from_secs(30)),
            "mosquitto did not start on {}",
            self.port
        );
    }
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A TCP relay in front of a broker: `cut()` closes every connection and refuses new ones until
/// `restore()`, like a network outage (the broker itself keeps running).
pub struct Relay {
    /// The relay's port.
    pub port: u16,
    open: Arc<AtomicBool>,
    generation: Arc<std::sync::atomic::AtomicU64>,
}

impl Relay {
    /// Relays to `127.0.0.1:upstream` (runs on the current tokio runtime).
    pub async fn start(upstream: u16) -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let open = Arc::new(AtomicBool::new(true));
        let generation = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (o, g) = (open.clone(), generation.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    continue;
                };
                if !o.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let gen_at_start = g.load(Ordering::SeqCst);
                let g = g.clone();
                tokio::spawn(async move {
                    let Ok(mut server) =
                        tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await
                    else {
                        return;
                    };
                    let cut = async {
                        while g.load(Ordering::SeqCst) == gen_at_start {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = cut => {}
                    }
                });
            }
        });
        Relay {
            port,
            open,
            generation,
        }
    }

    /// The URL through the relay.
    pub fn url(&self) -> String {
        format!("mqtt://127.0.0.1:{}", self.port)
    }

    /// Cuts every connection and refuses new ones.
    pub fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// Accepts connections again.
    pub fn restore(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

/// One received message.
#[derive(Debug, Clone)]
pub struct Received {
    /// Topic.
    pub topic: String,
    /// Payload as text.
    pub text: String,
    /// Payload as it came.
    pub bytes: Vec<u8>,
    /// Delivered as a retained message.
    pub retain: bool,
}

impl Received {
    /// The payload as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.text).unwrap_or(serde_json::Value::Null)
    }
}

/// A subscriber on its own task (plain rumqttc 3.1.1, QoS 1) that records every message.
pub struct Subscriber {
    got: Arc<Mutex<Vec<Received>>>,
    subscribed: Arc<AtomicBool>,
    disconnects: Arc<std::sync::atomic::AtomicU64>,
    client: rumqttc::AsyncClient,
    task: tokio::task::JoinHandle<()>,
}

impl Subscriber {
    /// Connects to `127.0.0.1:port` and subscribes to `filters`; returns once subscribed.
    pub async fn start(port: u16, filters: &[&str]) -> Subscriber {
        Subscriber::start_as(port, filters, None).await
    }

    /// Same with a login.
    pub async fn start_as(port: u16, filters: &[&str], login: Option<(&str, &str)>) -> Subscriber {
        let id = format!("watcher-{}-{}", std::process::id(), free_port());
        let mut opts = rumqttc::MqttOptions::new(id, "127.0.0.1", port);
        opts.set_keep_alive(Duration::from_secs(5))
            .set_max_packet_size(2 << 20, 2 << 20);
        if let Some((u, p)) = login {
            opts.set_credentials(u, p);
        }
        let (client, mut eventloop) = rumqttc::AsyncClient::new(opts, 64);
        let got = Arc::new(Mutex::new(Vec::new()));
        let subscribed = Arc::new(AtomicBool::new(false));
        let disconnects = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let filters: Vec<String> = filters.iter().map(|s| s.to_string()).collect();
        let (g, s, c) = (got.clone(), subscribed.clone(), client.clone());
        let d = disconnects.clone();
        let task = tokio::spawn(async move {
            let mut pending_subacks = 0;
            loop {
                match eventloop.poll().await {
                    Ok(rumqttc::Event::Incoming(rumqttc::Packet::ConnAck(_))) => {
                        pending_subacks = filters.len();
                        for f in &filters {
                            let _ = c.try_subscribe(f.clone(), rumqttc::QoS::AtLeastOnce);
                        }
                    }
                    Ok(rumqttc::Event::Incoming(rumqttc::Packet::SubAck(_))) => {
                        pending_subacks -= 1;
                        if pending_subacks == 0 {
                            s.store(true, Ordering::SeqCst);
                        }
                    }
                    Ok(rumqttc::Event::Incoming(rumqttc::Packet::Publish(p))) => {
                        g.lock().unwrap().push(Received {
                            topic: p.topic.clone(),
                            text: String::from_utf8_lossy(&p.payload).into_owned(),
                            bytes: p.payload.to_vec(),
                            retain: p.retain,
                        });
                    }
                    Ok(_) => {}
                    Err(_) => {
                        s.store(false, Ordering::SeqCst);
                        d.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        });
        let w = Subscriber {
            got,
            subscribed,
            disconnects,
            client,
            task,
        };
        assert!(
            w.wait(Duration::from_secs(30), |_| w
                .subscribed
                .load(Ordering::SeqCst))
                .await,
            "watcher could not subscribe on port {port}"
        );
        w
    }

    /// A copy of everything received so far.
    pub fn messages(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    /// Messages on `topic`.
    pub fn on(&self, topic: &str) -> Vec<Received> {
        self.messages()
            .into_iter()
            .filter(|m| m.topic == topic)
            .collect()
    }

    /// Waits until `cond` holds over the messages (polling every 20 ms) or `bound` passes.
    pub async fn wait(&self, bound: Duration, cond: impl Fn(&[Received]) -> bool) -> bool {
        let deadline = Instant::now() + bound;
        loop {
            if cond(&self.messages()) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Publishes (QoS 1).
    pub async fn publish(&self, topic: &str, payload: impl Into<Vec<u8>>) {
        self.client
            .publish(topic, rumqttc::QoS::AtLeastOnce, false, payload)
            .await
            .unwrap();
    }

    /// How many times its connection failed or was closed (it reconnects by itself).
    pub fn disconnects(&self) -> u64 {
        self.disconnects.load(Ordering::SeqCst)
    }

    /// Whether the watcher is connected and subscribed.
    pub fn is_subscribed(&self) -> bool {
        self.subscribed.load(Ordering::SeqCst)
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        self.task.abort();
    }
}
