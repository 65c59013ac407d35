//! A Prometheus text endpoint (`GET /metrics`), off by default and meant for loopback.
//!
//! A few dozen lines of HTTP/1.0 on a tokio listener instead of an HTTP framework: one read-only
//! page, no keep-alive, bounded request size and time, so a scraper cannot hold resources.

use crate::engine::{EngineStatsSnapshot, Engines};
use crate::publish::{PublishStats, Publisher};
use crate::supervisor::{CameraState, CameraView};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Largest request head accepted.
const MAX_REQUEST: usize = 8 * 1024;
/// Time a client has to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Renders every camera's counters and gauges in the Prometheus text format.
pub fn render(views: &[CameraView]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP edgevlm_build_info Version of the running edgevlm."
    );
    let _ = writeln!(out, "# TYPE edgevlm_build_info gauge");
    let _ = writeln!(
        out,
        "edgevlm_build_info{{version=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION")
    );

    type Metric = (
        &'static str,
        &'static str,
        &'static str,
        fn(&CameraView) -> f64,
    );
    let metrics: [Metric; 16] = [
        (
            "edgevlm_camera_frames_in_total",
            "counter",
            "Decoded frames that reached the rate stage.",
            |v| v.shared.counters.snapshot().frames_in as f64,
        ),
        (
            "edgevlm_camera_frames_sampled_total",
            "counter",
            "Frames sampled into the window.",
            |v| v.shared.counters.snapshot().sampled as f64,
        ),
        (
            "edgevlm_camera_frames_dropped_total",
            "counter",
            "Frames decimated by fixed-fps sampling.",
            |v| v.shared.counters.snapshot().dropped as f64,
        ),
        (
            "edgevlm_camera_frames_late_total",
            "counter",
            "Frames whose timestamp was not after the last sampled one.",
            |v| v.shared.counters.snapshot().late as f64,
        ),
        (
            "edgevlm_camera_frames_overflow_total",
            "counter",
            "Sampled frames lost to a full hand-off queue.",
            |v| v.shared.counters.snapshot().overflow as f64,
        ),
        (
            "edgevlm_camera_restarts_total",
            "counter",
            "Pipeline restarts after failures.",
            |v| v.shared.counters.snapshot().restarts as f64,
        ),
        (
            "edgevlm_camera_up",
            "gauge",
            "1 while the camera delivers frames.",
            |v| f64::from(u8::from(v.status().state == CameraState::Running)),
        ),
        (
            "edgevlm_camera_window_frames",
            "gauge",
            "Sampled frames held in the window.",
            |v| v.window.info().frames as f64,
        ),
        (
            "edgevlm_camera_window_bytes",
            "gauge",
            "Pixel bytes held in the window.",
            |v| v.window.info().bytes as f64,
        ),
        (
            "edgevlm_camera_window_span_seconds",
            "gauge",
            "Stream time between the oldest and newest frame held.",
            |v| {
                let i = v.window.info();
                match (i.oldest, i.newest) {
                    (Some(a), Some(b)) => (b - a).as_secs_f64(),
                    _ => 0.0,
                }
            },
        ),
        (
            "edgevlm_camera_tokens_total",
            "counter",
            "Visual tokens of sampled frames before DiffFP.",
            |v| v.shared.counters.snapshot().tokens_total as f64,
        ),
        (
            "edgevlm_camera_tokens_kept_total",
            "counter",
            "Visual tokens DiffFP kept.",
            |v| v.shared.counters.snapshot().tokens_kept as f64,
        ),
        (
            "edgevlm_camera_frames_identical_total",
            "counter",
            "Frames bit-identical to their predecessor (encoder output reusable).",
            |v| v.shared.counters.snapshot().frames_identical as f64,
        ),
        (
            "edgevlm_camera_kept_token_ratio",
            "gauge",
            "Share of visual tokens DiffFP kept since start.",
            |v| v.shared.counters.snapshot().kept_ratio(),
        ),
        (
            "edgevlm_camera_prune_threshold",
            "gauge",
            "DiffFP threshold in use (adaptive mode moves it).",
            |v| {
                v.shared
                    .counters
                    .prune_threshold()
                    .map_or(f64::NAN, f64::from)
            },
        ),
        (
            "edgevlm_camera_tokens_per_frame",
            "gauge",
            "Visual tokens per frame at the camera's model geometry.",
            |v| {
                v.shared
                    .geometry
                    .get()
                    .map_or(0.0, |g| f64::from(g.tokens()))
            },
        ),
    ];
    for (name, kind, help, value) in metrics {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for v in views {
            let _ = writeln!(out, "{name}{{camera=\"{}\"}} {}", v.id(), value(v));
        }
    }
    let _ = writeln!(
        out,
        "# HELP edgevlm_camera_state Current lifecycle state (1 for the current one)."
    );
    let _ = writeln!(out, "# TYPE edgevlm_camera_state gauge");
    for v in views {
        let current = v.status().state;
        for state in [
            CameraState::Starting,
            CameraState::Running,
            CameraState::Retrying,
            CameraState::Stopped,
        ] {
            let _ = writeln!(
                out,
                "edgevlm_camera_state{{camera=\"{}\",state=\"{state}\"}} {}",
                v.id(),
                u8::from(state == current)
            );
        }
    }
    out
}

/// Renders the MQTT publisher's counters (connection, outbox, questions).
pub fn render_publish(p: &PublishStats) -> String {
    let o = &p.outbox;
    let rows: [(&str, &str, &str, f64); 14] = [
        (
            "edgevlm_mqtt_connected",
            "gauge",
            "1 while connected to the broker.",
            f64::from(u8::from(p.connected)),
        ),
        (
            "edgevlm_mqtt_connects_total",
            "counter",
            "Successful connections (CONNACKs).",
            p.connects as f64,
        ),
        (
            "edgevlm_mqtt_connection_errors_total",
            "counter",
            "Failed connection attempts or lost connections.",
            p.connection_errors as f64,
        ),
        (
            "edgevlm_mqtt_outbox_capacity",
            "gauge",
            "Outbox bound (messages).",
            p.outbox_capacity as f64,
        ),
        (
            "edgevlm_mqtt_outbox_pending",
            "gauge",
            "Messages queued or awaiting acknowledgement.",
            o.pending as f64,
        ),
        (
            "edgevlm_mqtt_outbox_pending_bytes",
            "gauge",
            "Approximate bytes held by the outbox.",
            o.pending_bytes as f64,
        ),
        (
            "edgevlm_mqtt_messages_accepted_total",
            "counter",
            "Messages accepted into the outbox.",
            o.accepted as f64,
        ),
        (
            "edgevlm_mqtt_messages_delivered_total",
            "counter",
            "Messages acknowledged by the broker.",
            o.delivered as f64,
        ),
        (
            "edgevlm_mqtt_messages_dropped_full_total",
            "counter",
            "Messages lost to a full outbox.",
            o.dropped_full as f64,
        ),
        (
            "edgevlm_mqtt_chunks_skipped_total",
            "counter",
            "Stream chunks not sent because the broker was unreachable.",
            o.stream_skipped as f64,
        ),
        (
            "edgevlm_mqtt_messages_resent_total",
            "counter",
            "Messages sent again after a reconnect.",
            o.resent as f64,
        ),
        (
            "edgevlm_mqtt_queries_accepted_total",
            "counter",
            "Valid questions handed to the query stage.",
            p.queries_accepted as f64,
        ),
        (
            "edgevlm_mqtt_queries_rejected_total",
            "counter",
            "Questions refused by validation.",
            p.queries_rejected as f64,
        ),
        (
            "edgevlm_mqtt_queries_busy_total",
            "counter",
            "Valid questions refused because the queue was full.",
            p.queries_busy as f64,
        ),
    ];
    let mut out = String::new();
    for (name, kind, help, value) in rows {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
    }
    out
}

/// Renders the engines' work per stage (vision, embed, prefill, decode) since they loaded.
pub fn render_engine(s: &EngineStatsSnapshot) -> String {
    let stages = [
        ("vision", s.vision_runs, s.vision_frames, s.vision_seconds),
        ("embed", s.embed_runs, s.embed_tokens, s.embed_seconds),
        (
            "prefill",
            s.prefill_runs,
            s.prefill_tokens,
            s.prefill_seconds,
        ),
        // A decode step is one run of one token: its items are its runs.
        ("decode", s.decode_steps, s.decode_steps, s.decode_seconds),
    ];
    type Family = (&'static str, &'static str, fn(u64, u64, f64) -> f64);
    let families: [Family; 3] = [
        (
            "edgevlm_engine_runs_total",
            "Model runs per stage (vision: one per batch of frames).",
            |runs, _, _| runs as f64,
        ),
        (
            "edgevlm_engine_seconds_total",
            "Time spent in model runs per stage.",
            |_, _, secs| secs,
        ),
        (
            "edgevlm_engine_items_total",
            "Items run per stage: frames (vision), tokens (embed, prefill), steps (decode).",
            |_, items, _| items as f64,
        ),
    ];
    let mut out = String::new();
    for (name, help, value) in families {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for (stage, runs, items, secs) in stages {
            let _ = writeln!(
                out,
                "{name}{{stage=\"{stage}\"}} {}",
                value(runs, items, secs)
            );
        }
    }
    out
}

/// Binds the metrics listener (so a taken port is an error at startup, not later).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves `/metrics` from `views` until the listener fails; each client is handled on its own.
/// Engine counters appear once `engines` holds loaded engines (they may load later, or never).
pub async fn serve(
    listener: TcpListener,
    views: watch::Receiver<Vec<CameraView>>,
    publisher: Option<Publisher>,
    engines: watch::Receiver<Option<Arc<Engines>>>,
) {
    loop {
        let (mut stream, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "Metrics listener failed to accept");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let views = views.clone();
        let publisher = publisher.clone();
        let engines = engines.clone();
        tokio::spawn(async move {
            let response = match tokio::time::timeout(REQUEST_TIMEOUT, read_head(&mut stream)).await
            {
                Ok(Some(head))
                    if head.starts_with("GET /metrics ") || head.starts_with("GET /metrics?") =>
                {
                    let mut body = render(&views.borrow());
                    if let Some(p) = &publisher {
                        body.push_str(&render_publish(&p.stats()));
                    }
                    let engine_stats = engines.borrow().as_ref().map(|e| e.stats());
                    if let Some(stats) = engine_stats {
                        body.push_str(&render_engine(&stats));
                    }
                    format!(
                        "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    )
                }
                Ok(Some(_)) => {
                    "HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                        .into()
                }
                _ => "HTTP/1.0 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    .into(),
            };
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}

/// Reads up to the end of the request head; `None` if it is too large or the client goes away.
async fn read_head(stream: &mut tokio::net::TcpStream) -> Option<String> {
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 512];
    loop {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.windows(4).any(|w| w == b"\r\n\r\n") || buf.windows(2).any(|w| w == b"\n\n") {
            return String::from_utf8(buf).ok();
        }
        if buf.len() > MAX_REQUEST {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publisher_counters_render_as_prometheus_text() {
        let mut stats = PublishStats {
            connected: true,
            outbox_capacity: 1000,
            ..PublishStats::default()
        };
        stats.outbox.pending = 7;
        stats.outbox.dropped_full = 2;
        let text = render_publish(&stats);
        assert!(text.contains("\nedgevlm_mqtt_connected 1\n"), "{text}");
        assert!(text.contains("\nedgevlm_mqtt_outbox_pending 7\n"), "{text}");
        assert!(
            text.contains("\nedgevlm_mqtt_messages_dropped_full_total 2\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE edgevlm_mqtt_queries_busy_total counter"),
            "{text}"
        );
    }

    /// Every line is a comment or `name{labels} number`, each family has one HELP and one TYPE,
    /// and every sample belongs to a family declared before it.
    fn assert_prometheus_text(text: &str) {
        let mut help = std::collections::HashSet::new();
        let mut kinds = std::collections::HashMap::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap();
                assert!(help.insert(name.to_string()), "second HELP for {name}");
                continue;
            }
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap_or_else(|| panic!("{line}"));
                assert!(
                    ["counter", "gauge", "histogram"].contains(&kind),
                    "kind of `{line}`"
                );
                let again = kinds.insert(name.to_string(), kind.to_string());
                assert!(again.is_none(), "second TYPE for {name}");
                continue;
            }
            let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line}"));
            assert!(value.parse::<f64>().is_ok(), "value of `{line}`");
            let (name, labels) = series.split_at(series.find('{').unwrap_or(series.len()));
            assert!(
                !name.is_empty()
                    && !name.starts_with(|c: char| c.is_ascii_digit())
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
                "name of `{line}`"
            );
            if !labels.is_empty() {
                let inner = labels
                    .strip_prefix('{')
                    .and_then(|l| l.strip_suffix('}'))
                    .unwrap_or_else(|| panic!("labels of `{line}`"));
                for pair in inner.split(',') {
                    let (k, v) = pair.split_once('=').unwrap_or_else(|| panic!("{line}"));
                    assert!(!k.is_empty(), "label name in `{line}`");
                    assert!(
                        v.len() >= 2 && v.starts_with('"') && v.ends_with('"'),
                        "label value in `{line}`"
                    );
                }
            }
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .filter_map(|s| name.strip_suffix(s))
                .find(|f| kinds.get(*f).is_some_and(|k| k == "histogram"))
                .unwrap_or(name);
            assert!(kinds.contains_key(family), "{name} has no TYPE before it");
        }
        assert_eq!(help.len(), kinds.len(), "HELP and TYPE differ");
    }

    #[test]
    fn engine_stats_render_as_one_counter_family_each_labelled_by_stage() {
        let stats = EngineStatsSnapshot {
            vision_runs: 3,
            vision_frames: 10,
            vision_seconds: 0.5,
            embed_runs: 4,
            embed_tokens: 40,
            embed_seconds: 0.25,
            prefill_runs: 2,
            prefill_tokens: 700,
            prefill_seconds: 1.5,
            decode_steps: 64,
            decode_seconds: 3.0,
        };
        let text = render_engine(&stats);
        assert_prometheus_text(&text);
        for line in [
            "# TYPE edgevlm_engine_runs_total counter",
            "# TYPE edgevlm_engine_seconds_total counter",
            "# TYPE edgevlm_engine_items_total counter",
            "edgevlm_engine_runs_total{stage=\"vision\"} 3",
            "edgevlm_engine_runs_total{stage=\"embed\"} 4",
            "edgevlm_engine_runs_total{stage=\"prefill\"} 2",
            "edgevlm_engine_runs_total{stage=\"decode\"} 64",
            "edgevlm_engine_seconds_total{stage=\"vision\"} 0.5",
            "edgevlm_engine_seconds_total{stage=\"embed\"} 0.25",
            "edgevlm_engine_seconds_total{stage=\"prefill\"} 1.5",
            "edgevlm_engine_seconds_total{stage=\"decode\"} 3",
            "edgevlm_engine_items_total{stage=\"vision\"} 10",
            "edgevlm_engine_items_total{stage=\"embed\"} 40",
            "edgevlm_engine_items_total{stage=\"prefill\"} 700",
            "edgevlm_engine_items_total{stage=\"decode\"} 64",
        ] {
            assert!(text.lines().any(|l| l == line), "no `{line}` in\n{text}");
        }
        assert_eq!(text.lines().count(), 3 * (2 + 4));
    }

    #[test]
    fn the_other_pages_and_histograms_pass_the_same_format_check() {
        assert_prometheus_text(&render(&[]));
        assert_prometheus_text(&render_publish(&PublishStats::default()));
        let h = crate::telemetry::Histogram::latency();
        h.observe(Duration::from_millis(30));
        let mut text = String::from("# HELP h_seconds Test.\n# TYPE h_seconds histogram\n");
        crate::telemetry::write_histogram(&mut text, "h_seconds", "camera=\"a\"", &h.snapshot());
        crate::telemetry::write_histogram(&mut text, "h_seconds", "", &h.snapshot());
        assert_prometheus_text(&text);
    }
}
