//! MQTT over TLS against Mosquitto with a certificate authority made by the test (openssl): the
//! runtime connects with a CA file and a client certificate, publishes narrations, answers
//! `edgevlm ask` over TLS, and refuses a broker its CA does not vouch for.

mod common;

use common::edgevlm;
use common::mqtt::{Mosquitto, Subscriber, free_port};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A CA, a server certificate for 127.0.0.1 and a client certificate, in `dir`.
fn make_pki(dir: &Path) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl (apt-get install openssl)");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    for (name, subject) in [
        ("ca", "/CN=edgevlm test CA"),
        ("other-ca", "/CN=someone else"),
    ] {
        run(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            subject,
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
        ]);
    }
    // Extensions make X.509 v3 certificates: webpki (rustls) refuses v1.
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .unwrap();
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    for (name, cn) in [("server", "127.0.0.1"), ("client", "edgevlm")] {
        run(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            &format!("/CN={cn}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
        ]);
        let mut args = vec![
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            &format!("{name}.pem"),
        ]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>();
        args.extend(["-extfile".into(), format!("{name}.ext")]);
        run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    }
    // Mosquitto started as root drops to its own user, which must read the (throwaway) keys.
    use std::os::unix::fs::PermissionsExt;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
}

struct Run {
    child: Child,
    log: PathBuf,
    metrics_port: u16,
}

impl Run {
    fn start(dir: &Path, tls_port: u16, ca: &str) -> Run {
        let cfg = dir.join(format!("edgevlm-{ca}.toml"));
        let metrics_port = common::closed_port();
        std::fs::write(
            &cfg,
            format!(
                "[runtime]\nstate_dir = \"state\"\nstatus_interval_secs = 0.5\n\
                 [engine]\nmodel_dir = \"{tiny}\"\n\
                 [telemetry]\nmetrics_listen = \"127.0.0.1:{metrics_port}\"\n\
                 [mqtt]\nbroker = \"mqtts://127.0.0.1:{tls_port}\"\nclient_id = \"edgevlm-tls-{ca}\"\n\
                 ca_file = \"{ca}.pem\"\nclient_cert_file = \"client.pem\"\nclient_key_file = \"client.key\"\n\
                 retry_initial_secs = 0.2\nretry_max_secs = 1\n\
                 [[cameras]]\nid = \"door\"\nuri = \"test://ball\"\nsample_fps = 2\n\
                 narrate = [\"interval\"]\nnarrate_interval_secs = 1\nnarrate_max_tokens = 4\n",
                tiny = common::TINY_MODEL
            ),
        )
        .unwrap();
        let log = dir.join(format!("run-{ca}.log"));
        let child = edgevlm()
            .args(["run", "-c", cfg.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Run {
            child,
            log,
            metrics_port,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// One value of its /metrics page; `None` while it does not answer.
    fn metric(&self, name: &str) -> Option<f64> {
        common::metric(self.metrics_port, name)
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_and_ask_speak_tls_with_client_certificates_and_refuse_an_unknown_ca() {
    let dir = std::env::temp_dir().join(format!("edgevlm-tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    make_pki(&dir);
    let tls_port = free_port();
    let p = |f: &str| dir.join(f).display().to_string();
    // A TLS listener that requires a client certificate, next to the plain one the test watches on.
    let broker = Mosquitto::with_config(&format!(
        "listener {tls_port} 127.0.0.1\ncafile {}\ncertfile {}\nkeyfile {}\nrequire_certificate true\n",
        p("ca.pem"),
        p("server.pem"),
        p("server.key")
    ));
    let watcher = Subscriber::start(broker.port, &["edgevlm/#"]).await;

    let run = Run::start(&dir, tls_port, "ca");
    let narrated = watcher
        .wait(Duration::from_secs(90), |m| {
            m.iter().any(|m| m.topic == "edgevlm/door/narration")
        })
        .await;
    assert!(narrated, "no narration over TLS\n{}", run.log());
    let msgs = watcher.messages();
    assert!(
        msgs.iter()
            .any(|m| m.topic == "edgevlm/available" && m.text == "online"),
        "{msgs:?}"
    );
    let n = msgs
        .iter()
        .find(|m| m.topic == "edgevlm/door/narration")
        .unwrap()
        .json();
    assert_eq!(n["trigger"], "interval");

    // `edgevlm ask` over TLS with the client certificate.
    let broker_url = format!("mqtts://127.0.0.1:{tls_port}");
    let out = edgevlm()
        .args([
            "ask",
            "door",
            "What moved?",
            "--broker",
            &broker_url,
            "--max-tokens",
            "5",
        ])
        .args(["--ca-file", &p("ca.pem"), "--cert-file", &p("client.pem")])
        .args([
            "--key-file",
            &p("client.key"),
            "--json",
            "--timeout-secs",
            "30",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "ask failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(answer["camera"], "door");
    assert!(answer["generated_tokens"].as_u64().unwrap() <= 5);

    // Without the client certificate the broker refuses ask: exit 3 (unreachable), no answer.
    // The refusal is a connection error at once; the timeout only bounds a hang, and a timeout
    // (also exit 3) would say so instead.
    let out = edgevlm()
        .args(["ask", "door", "What moved?", "--broker", &broker_url])
        .args(["--ca-file", &p("ca.pem"), "--timeout-secs", "30"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("error: MQTT:"), "{err}");
    drop(run);

    // A runtime that trusts another CA never connects, and says why.
    let before = watcher.messages().len();
    let wrong = Run::start(&dir, tls_port, "other-ca");
    // Several attempts, each refused: its counters say so (once three failed, none succeeded).
    assert!(
        common::wait_until(Duration::from_secs(60), || wrong
            .metric("edgevlm_mqtt_connection_errors_total")
            .is_some_and(|n| n >= 3.0))
        .await,
        "the runtime did not retry: {:?}\n{}",
        wrong.metric("edgevlm_mqtt_connection_errors_total"),
        wrong.log()
    );
    assert_eq!(
        wrong.metric("edgevlm_mqtt_connects_total"),
        Some(0.0),
        "a runtime that does not trust the broker connected\n{}",
        wrong.log()
    );
    assert!(
        common::wait_until(Duration::from_secs(30), || wrong
            .log()
            .to_lowercase()
            .contains("certificate"))
        .await,
        "no certificate error in the log:\n{}",
        wrong.log()
    );
    // Fence for the watcher: a marker published now comes after anything the broker had before.
    watcher.publish("edgevlm/fence", b"fence".to_vec()).await;
    assert!(
        watcher
            .wait(Duration::from_secs(30), |m| m
                .iter()
                .any(|m| m.topic == "edgevlm/fence"))
            .await,
        "the marker never came back"
    );
    let after = watcher.messages();
    assert!(
        !after[before..]
            .iter()
            .any(|m| m.topic == "edgevlm/door/narration"
                || (m.topic == "edgevlm/available" && m.text == "online")),
        "a runtime that does not trust the broker published: {:?}",
        &after[before..]
    );
}
