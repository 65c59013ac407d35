//! The HTTP API (docs/HTTP.md) through curl, the real client: health and readiness, cameras,
//! recent narrations and their snapshots, a question answered as JSON and as Server-Sent Events
//! (the deltas add up to the final text), the same error codes as MQTT with HTTP statuses, and
//! bearer tokens. The runtime runs in process with the tiny model and a test camera.

mod common;

use common::mqtt::free_port;
use edgevlm::config::Config;
use edgevlm::runtime::{Runtime, RuntimeOptions};
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

/// A failure bound only: every wait ends as soon as its condition holds.
const BOUND: Duration = Duration::from_secs(90);

/// `curl` with `args` against `url`: (HTTP status, body bytes).
fn curl(url: &str, args: &[&str]) -> (u16, Vec<u8>) {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "60", "-w", "\n%{http_code}"])
        .args(args)
        .arg(url)
        .output()
        .expect("curl");
    let mut body = out.stdout;
    let nl = body.iter().rposition(|b| *b == b'\n').expect("status line");
    let status = String::from_utf8_lossy(&body[nl + 1..])
        .trim()
        .parse()
        .unwrap_or(0);
    body.truncate(nl);
    (status, body)
}

fn json(body: &[u8]) -> Value {
    serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(body)))
}

fn config(state: &std::path::Path, port: u16, extra: &str) -> Config {
    let model = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("engines/tiny/model");
    let text = format!(
        "[runtime]\nstatus_interval_secs = 0.5\nstate_dir = \"{}\"\n\
         [engine]\nmodel_dir = \"{}\"\nthreads = 1\n\
         [mqtt]\nenabled = false\n\
         [http]\nlisten = \"127.0.0.1:{port}\"\n{extra}\n\
         [[cameras]]\nid = \"door\"\nuri = \"test://ball\"\nsample_fps = 2\nwindow_secs = 10\n\
         narrate = [\"interval\"]\nnarrate_interval_secs = 1\nnarrate_max_tokens = 8\n",
        state.display(),
        model.display(),
    );
    Config::parse(&text, None).unwrap_or_else(|e| panic!("{e}"))
}

async fn wait_for(mut cond: impl FnMut() -> bool) -> bool {
    common::wait_until(BOUND, &mut cond).await
}

/// The runtime in process with its HTTP server on a free port.
struct Server {
    rt: edgevlm::runtime::Running,
    base: String,
    state: std::path::PathBuf,
}

impl Server {
    /// Starts `config` (with `extra` in `[http]`, changed by `tweak`) under a state directory
    /// named by `tag`.
    async fn start(tag: &str, extra: &str, tweak: impl FnOnce(&mut Config)) -> Server {
        let port = free_port();
        let state = std::env::temp_dir().join(format!("edgevlm-http-{tag}-{}", std::process::id()));
        let mut c = config(&state, port, extra);
        tweak(&mut c);
        let rt = Runtime::start(c, RuntimeOptions::default())
            .await
            .expect("the runtime starts");
        Server {
            rt,
            base: format!("http://127.0.0.1:{port}"),
            state,
        }
    }

    /// Waits until `/readyz` says ready and a narration says frames are in memory.
    async fn with_footage(&self) {
        let base = &self.base;
        assert!(wait_for(|| curl(&format!("{base}/readyz"), &[]).0 == 200).await);
        assert!(
            wait_for(|| {
                let (_, b) = curl(&format!("{base}/v1/cameras/door/narrations"), &[]);
                json(&b)["narrations"]
                    .as_array()
                    .is_some_and(|a| !a.is_empty())
            })
            .await
        );
    }

    async fn stop(self) {
        self.rt.shutdown().await;
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cameras_narrations_snapshots_and_questions_over_http_with_curl() {
    let server = Server::start("curl", "", |_| {}).await;
    let base = server.base.clone();
    let (s, body) = curl(&format!("{base}/healthz"), &[]);
    assert_eq!((s, body.as_slice()), (200, &b"ok\n"[..]));
    // Ready once the model is loaded and the camera runs.
    let ready = wait_for(|| curl(&format!("{base}/readyz"), &[]).0 == 200).await;
    assert!(
        ready,
        "{}",
        String::from_utf8_lossy(&curl(&format!("{base}/readyz"), &[]).1)
    );
    let r = json(&curl(&format!("{base}/readyz"), &[]).1);
    assert_eq!(r["model"], "ready");
    assert_eq!(r["cameras"][0]["state"], "running");

    let (s, body) = curl(&format!("{base}/v1/cameras"), &[]);
    assert_eq!(s, 200);
    let cams = json(&body);
    assert_eq!(cams["cameras"][0]["camera"], "door");
    let (s, body) = curl(&format!("{base}/v1/cameras/nope"), &[]);
    assert_eq!(s, 404);
    assert_eq!(json(&body)["error"]["code"], "unknown_camera");

    // Narrations, newest last, each with its snapshot.
    let narrated = wait_for(|| {
        let (_, b) = curl(&format!("{base}/v1/cameras/door/narrations?limit=2"), &[]);
        json(&b)["narrations"]
            .as_array()
            .is_some_and(|a| a.len() == 2)
    })
    .await;
    assert!(narrated);
    let list = json(&curl(&format!("{base}/v1/cameras/door/narrations?limit=2"), &[]).1);
    let items = list["narrations"].as_array().unwrap();
    assert!(items[0]["stream_end_secs"].as_f64() < items[1]["stream_end_secs"].as_f64());
    // Paging back: the one-item page before the newer of the two is the older one.
    let newer = items[1]["id"].as_str().unwrap();
    let back = json(
        &curl(
            &format!("{base}/v1/cameras/door/narrations?limit=1&before={newer}"),
            &[],
        )
        .1,
    );
    let back = back["narrations"].as_array().unwrap();
    assert_eq!(back.len(), 1, "{back:?}");
    assert_eq!(back[0]["id"], items[0]["id"]);
    let (s, b) = curl(
        &format!("{base}/v1/cameras/door/narrations?before=nope"),
        &[],
    );
    assert_eq!(
        (s, json(&b)["error"]["code"].clone()),
        (404, "not_found".into())
    );
    let snap = &items[1]["snapshot"];
    let url = format!(
        "{base}/v1/cameras/door/snapshots/{}",
        snap["id"].as_str().unwrap()
    );
    // Encoded off the watch's path: it may come a moment after its narration.
    assert!(wait_for(|| curl(&url, &[]).0 == 200).await);
    let (_, jpeg) = curl(&url, &[]);
    assert_eq!(
        edgevlm::evidence::picture::jpeg_size(&jpeg),
        Some((
            snap["width"].as_u64().unwrap() as u32,
            snap["height"].as_u64().unwrap() as u32
        ))
    );
    let (s, jpeg) = curl(&format!("{base}/v1/cameras/door/snapshot"), &[]);
    assert_eq!(s, 200);
    assert!(edgevlm::evidence::picture::jpeg_size(&jpeg).is_some());

    // A question answered as one JSON.
    let ask = format!("{base}/v1/cameras/door/questions");
    let (s, body) = curl(
        &ask,
        &[
            "-H",
            "Content-Type: application/json",
            "-d",
            r#"{"question":"What is moving?","max_tokens":6}"#,
        ],
    );
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&body));
    let a = json(&body);
    assert!(a["id"].as_str().unwrap().starts_with("http-"));
    assert_eq!(a["camera"], "door");
    assert!(
        (1..=6).contains(&a["generated_tokens"].as_u64().unwrap()),
        "{a}"
    );

    // The same as Server-Sent Events: chunks, then the answer; the deltas are its text.
    let (s, body) = curl(
        &ask,
        &[
            "-N",
            "-H",
            "Accept: text/event-stream",
            "-d",
            r#"{"id":"sse1","question":"What is moving?","max_tokens":6}"#,
        ],
    );
    assert_eq!(s, 200);
    let text = String::from_utf8(body).unwrap();
    let mut deltas = String::new();
    let mut answer = None;
    for block in text.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let event = block.lines().find_map(|l| l.strip_prefix("event: "));
        let data = block.lines().find_map(|l| l.strip_prefix("data: "));
        match (event, data) {
            (Some("chunk"), Some(d)) => {
                deltas.push_str(json(d.as_bytes())["delta"].as_str().unwrap())
            }
            (Some("answer"), Some(d)) => answer = Some(json(d.as_bytes())),
            _ => {}
        }
    }
    let answer = answer.unwrap_or_else(|| panic!("no answer event in {text}"));
    assert_eq!(answer["id"], "sse1");
    assert_eq!(answer["text"].as_str().unwrap(), deltas);

    // The same errors as MQTT, with HTTP statuses.
    for (body, status, code) in [
        ("{not json", 400, "malformed"),
        (r#"{"question":"x","windw_secs":3}"#, 400, "invalid_field"),
        (r#"{"question":"  "}"#, 400, "empty_question"),
        (
            r#"{"question":"x","window_secs":3000}"#,
            400,
            "window_too_long",
        ),
    ] {
        let (s, b) = curl(&ask, &["-d", body]);
        assert_eq!(
            (s, json(&b)["error"]["code"].as_str().unwrap()),
            (status, code),
            "{body}"
        );
    }
    let big = format!(r#"{{"question":"{}"}}"#, "A".repeat(20_000));
    let (s, b) = curl(&ask, &["-d", &big]);
    assert_eq!(
        (s, json(&b)["error"]["code"].clone()),
        (413, "too_large".into())
    );
    let (s, b) = curl(
        &format!("{base}/v1/cameras/yard/questions"),
        &["-d", r#"{"question":"x"}"#],
    );
    assert_eq!(
        (s, json(&b)["error"]["code"].clone()),
        (404, "unknown_camera".into())
    );
    let (s, _) = curl(&format!("{base}/../../etc/passwd"), &["--path-as-is"]);
    assert_eq!(s, 404);

    // Every JSON response above, and a few more, matches docs/openapi.json.
    let mut samples = Vec::new();
    let mut take = |path: &str, method: &str, url: String, args: &[&str]| {
        let (status, body) = curl(&url, args);
        samples.push(serde_json::json!({
            "path": path, "method": method, "status": status, "body": json(&body)
        }));
    };
    take("/readyz", "get", format!("{base}/readyz"), &[]);
    take("/v1/cameras", "get", format!("{base}/v1/cameras"), &[]);
    take(
        "/v1/cameras/{camera}",
        "get",
        format!("{base}/v1/cameras/door"),
        &[],
    );
    take(
        "/v1/cameras/{camera}",
        "get",
        format!("{base}/v1/cameras/nope"),
        &[],
    );
    for route in ["narrations", "events"] {
        let path = format!("/v1/cameras/{{camera}}/{route}");
        take(
            &path,
            "get",
            format!("{base}/v1/cameras/door/{route}?limit=5"),
            &[],
        );
    }
    take(
        "/v1/cameras/{camera}/snapshots/{id}",
        "get",
        format!("{base}/v1/cameras/door/snapshots/none"),
        &[],
    );
    let q = "/v1/cameras/{camera}/questions";
    take(
        q,
        "post",
        ask.clone(),
        &["-d", r#"{"question":"What is moving?","max_tokens":4}"#],
    );
    take(q, "post", ask.clone(), &["-d", "{not json"]);
    take(q, "post", ask.clone(), &["-d", &big]);
    take(
        q,
        "post",
        format!("{base}/v1/cameras/yard/questions"),
        &["-d", r#"{"question":"x"}"#],
    );
    take("/v1/models", "get", format!("{base}/v1/models"), &[]);
    let chat = r#"{"model":"door","messages":[{"role":"user","content":"What is moving?"}],"max_tokens":4}"#;
    take(
        "/v1/chat/completions",
        "post",
        format!("{base}/v1/chat/completions"),
        &["-d", chat],
    );
    let lines: String = samples.iter().map(|s| format!("{s}\n")).collect();
    let python = concat!(env!("CARGO_MANIFEST_DIR"), "/.venv/bin/python");
    let mut check = Command::new(python)
        .args([
            concat!(env!("CARGO_MANIFEST_DIR"), "/tests/openapi_check.py"),
            concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.json"),
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python");
    use std::io::Write;
    check
        .stdin
        .take()
        .unwrap()
        .write_all(lines.as_bytes())
        .unwrap();
    let out = check.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(json(&out.stdout)["checked"], samples.len());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_package_lists_cameras_chats_streams_and_follows_up() {
    let server = Server::start("oa", "", |_| {}).await;
    let base = server.base.clone();
    server.with_footage().await;
    let python = concat!(env!("CARGO_MANIFEST_DIR"), "/.venv/bin/python");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/openai_client.py");
    let out = Command::new(python)
        .args([script, &base, "door"])
        .output()
        .expect("the project venv's python (scripts/setup.sh)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = json(&out.stdout);
    assert_eq!(r["models"], serde_json::json!(["door"]));
    let c = &r["completion"];
    assert_eq!(c["object"], "chat.completion");
    assert!(
        ["stop", "length"].contains(&c["finish_reason"].as_str().unwrap()),
        "{c}"
    );
    assert!(
        (1..=6).contains(&c["completion_tokens"].as_u64().unwrap()),
        "{c}"
    );
    let s = &r["stream"];
    assert!(
        ["stop", "length"].contains(&s["finish_reason"].as_str().unwrap()),
        "{s}"
    );
    assert!(!s["content"].as_str().unwrap().is_empty(), "{s}");
    // The follow-up continued the chat's conversation.
    let conv = r["conversations"].as_array().unwrap();
    assert_eq!(conv[0]["conversation"], conv[1]["conversation"], "{conv:?}");
    assert_eq!(
        (conv[0]["turn"].as_u64(), conv[1]["turn"].as_u64()),
        (Some(1), Some(2))
    );
    assert_eq!(r["unknown_camera"]["status"], 404, "{r}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_page_shows_the_camera_and_its_narrations_and_streams_an_answer_in_chromium() {
    let server = Server::start("page", "", |_| {}).await;
    let base = server.base.clone();
    let (s, page) = curl(&format!("{base}/"), &[]);
    assert_eq!(s, 200);
    let page = String::from_utf8(page).unwrap();
    // Everything the page needs is in it or on this server: no external resource.
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "external resource"
    );
    assert!(wait_for(|| curl(&format!("{base}/readyz"), &[]).0 == 200).await);
    let shot = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/http-page.png");
    let python = concat!(env!("CARGO_MANIFEST_DIR"), "/.venv/bin/python");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/web_page.py");
    let out = Command::new(python)
        .args([script, &format!("{base}/"), shot.to_str().unwrap()])
        .output()
        .expect("python");
    let r: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "web_page.py printed no result ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(
        out.status.success(),
        "{r} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(r["state"].as_str().unwrap().starts_with("running"), "{r}");
    assert!(!r["narration"].as_str().unwrap().is_empty(), "{r}");
    assert!(r["snapshot"][0].as_u64().unwrap() > 0, "{r}");
    assert_eq!(r["answer_class"], "", "the answer is not an error: {r}");
    assert!(!r["answer"].as_str().unwrap().is_empty(), "{r}");
    assert!(
        r["model"].as_str().unwrap().starts_with("model ready"),
        "{r}"
    );
    // The screenshot the run saved is a PNG.
    let png = std::fs::read(&shot).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn questions_beyond_concurrency_and_queue_are_answered_busy_with_503() {
    let server = Server::start("busy", "", |c| {
        c.query.concurrency = 1;
        c.mqtt.query_queue = 1;
    })
    .await;
    let base = server.base.clone();
    server.with_footage().await;
    // Six long answers at once: one runs, one waits, the others are refused at once.
    let ask = format!("{base}/v1/cameras/door/questions");
    let askers: Vec<_> = (0..6)
        .map(|_| {
            let ask = ask.clone();
            std::thread::spawn(move || {
                curl(
                    &ask,
                    &[
                        "-d",
                        r#"{"question":"Describe everything.","max_tokens":300}"#,
                    ],
                )
            })
        })
        .collect();
    let results: Vec<(u16, Vec<u8>)> = askers.into_iter().map(|a| a.join().unwrap()).collect();
    let busy: Vec<&(u16, Vec<u8>)> = results.iter().filter(|(s, _)| *s == 503).collect();
    assert!(
        results.iter().filter(|(s, _)| *s == 200).count() >= 2,
        "{:?}",
        results.iter().map(|(s, _)| s).collect::<Vec<_>>()
    );
    assert!(!busy.is_empty(), "none refused");
    for (_, b) in busy {
        assert_eq!(json(b)["error"]["code"], "busy");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_every_api_call_needs_it_and_health_checks_do_not() {
    let token_file =
        std::env::temp_dir().join(format!("edgevlm-http-token-{}", std::process::id()));
    std::fs::write(&token_file, "s3cret-token\n").unwrap();
    let extra = format!("token_file = \"{}\"", token_file.display());
    let server = Server::start("tok", &extra, |_| {}).await;
    let base = server.base.clone();
    assert_eq!(curl(&format!("{base}/healthz"), &[]).0, 200);
    let (s, b) = curl(&format!("{base}/v1/cameras"), &[]);
    assert_eq!(
        (s, json(&b)["error"]["code"].clone()),
        (401, "unauthorized".into())
    );
    let (s, _) = curl(
        &format!("{base}/v1/cameras"),
        &["-H", "Authorization: Bearer wrong"],
    );
    assert_eq!(s, 401);
    let (s, b) = curl(
        &format!("{base}/v1/cameras"),
        &["-H", "Authorization: Bearer s3cret-token"],
    );
    assert_eq!(s, 200);
    assert_eq!(json(&b)["cameras"][0]["camera"], "door");
    server.stop().await;
    let _ = std::fs::remove_file(&token_file);
}
