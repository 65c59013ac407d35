//! Bad input over HTTP (docs/HTTP.md, "Errors"), as the MQTT questions are fuzzed: 600 request
//! bodies from eleven families (random bytes, empty, truncated JSON, wrong types, nesting 200
//! deep, lone surrogates, huge numbers, unknown fields, invalid UTF-8, 20 KB, ids with `/+#`),
//! with a fixed seed, to the question route and the OpenAI route. Every one gets a JSON error
//! with its HTTP status (or an answer), none takes the server down, and a valid question after
//! them is still handled. Raw HTTP/1.1 on a socket: the bodies are sent byte for byte.

use edgevlm::config::Config;
use edgevlm::runtime::{Runtime, RuntimeOptions};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

mod common;

/// xorshift64*: a fixed sequence for a fixed seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn body(rng: &mut Rng, family: u64) -> Vec<u8> {
    let valid = br#"{"id":"f1","question":"What is moving?","window_secs":5}"#;
    match family {
        0 => (0..rng.below(200)).map(|_| rng.next() as u8).collect(),
        1 => Vec::new(),
        2 => valid[..rng.below(valid.len() as u64) as usize].to_vec(),
        3 => {
            let v = ["3", "[\"a\"]", "{}", "null", "true", "-1.5e3"];
            let field = [
                "question",
                "id",
                "window_secs",
                "max_tokens",
                "conversation",
            ];
            format!(
                r#"{{"question":"q","{}":{}}}"#,
                field[rng.below(5) as usize],
                v[rng.below(6) as usize]
            )
            .into_bytes()
        }
        4 => format!(
            r#"{{"question":{}"q"{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        )
        .into_bytes(),
        5 => br#"{"question":"\ud800 and \udfff"}"#.to_vec(),
        6 => br#"{"question":"q","max_tokens":1e400,"window_secs":-0}"#.to_vec(),
        7 => br#"{"question":"q","colour":"red","windw_secs":3}"#.to_vec(),
        8 => b"{\"question\":\"\xff\xfe\xfd\"}".to_vec(),
        9 => format!(r#"{{"question":"{}"}}"#, "A".repeat(20_000)).into_bytes(),
        _ => br#"{"id":"a/b+#","question":"q"}"#.to_vec(),
    }
}

/// POSTs `body` to `path`: the status and the body of the response.
fn post(port: u16, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    let _ = s.write_all(body);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| out[i + 4..].to_vec())
        .unwrap_or_default();
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_hundred_malformed_bodies_each_get_a_json_error_and_the_server_stays_up() {
    let port = common::mqtt::free_port();
    let state = std::env::temp_dir().join(format!("edgevlm-http-fuzz-{}", std::process::id()));
    let text = format!(
        "[runtime]\nstate_dir = \"{}\"\n[engine]\nenabled = false\n[mqtt]\nenabled = false\n\
         [http]\nlisten = \"127.0.0.1:{port}\"\n\
         [[cameras]]\nid = \"door\"\nuri = \"test://ball\"\nsample_fps = 1\nnarrate = []\n",
        state.display()
    );
    let config = Config::parse(&text, None).unwrap_or_else(|e| panic!("{e}"));
    let rt = Runtime::start(config, RuntimeOptions::default())
        .await
        .expect("the runtime starts");
    let mut rng = Rng(16);
    let mut codes = std::collections::BTreeMap::new();
    let tried = 600;
    for i in 0..tried {
        let family = rng.below(11);
        let b = body(&mut rng, family);
        let path = if i % 2 == 0 {
            "/v1/cameras/door/questions"
        } else {
            "/v1/chat/completions"
        };
        let (status, resp) = tokio::task::spawn_blocking({
            let path = path.to_string();
            move || post(port, &path, &b)
        })
        .await
        .unwrap();
        assert!(
            [400, 404, 413, 503].contains(&status),
            "family {family} on {path}: status {status} {}",
            String::from_utf8_lossy(&resp)
        );
        let v: serde_json::Value = serde_json::from_slice(&resp).unwrap_or_else(|e| {
            panic!(
                "family {family} on {path}: not JSON ({e}): {}",
                String::from_utf8_lossy(&resp)
            )
        });
        let code = v["error"]["code"]
            .as_str()
            .expect("an error code")
            .to_string();
        *codes.entry((status, code)).or_insert(0u32) += 1;
    }
    // Valid questions after all that: answered `no_model` (there is no model here), 503.
    let (status, resp) = tokio::task::spawn_blocking(move || {
        post(
            port,
            "/v1/cameras/door/questions",
            br#"{"question":"What is moving?"}"#,
        )
    })
    .await
    .unwrap();
    assert_eq!(status, 503, "{}", String::from_utf8_lossy(&resp));
    assert!(String::from_utf8_lossy(&resp).contains("no_model"));
    eprintln!("{tried} bodies: {codes:?}");
    for want in ["malformed", "invalid_field", "too_large"] {
        assert!(codes.keys().any(|(_, c)| c == want), "no {want}: {codes:?}");
    }
    rt.shutdown().await;
    let _ = std::fs::remove_dir_all(&state);
}
