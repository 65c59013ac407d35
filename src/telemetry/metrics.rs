//! A Prometheus text endpoint (`GET /metrics`), off by default and meant for loopback.
//!
//! A few dozen lines of HTTP/1.0 on a tokio listener instead of an HTTP framework: one read-only
//! page, no keep-alive, bounded request size and time, so a scraper cannot hold resources.

use crate::base::{Histogram, write_histogram};
use crate::engine::{EngineStatsSnapshot, Engines};
use crate::memory::{CameraMemory, WatchStats};
use crate::publish::{PublishStats, Publisher};
use crate::supervisor::{CameraState, CameraView};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Renders every camera's counters and gauges in the Prometheus text format.
pub fn render_cameras(views: &[CameraView]) -> String {
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
    let metrics: [Metric; 17] = [
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
            "edgevlm_camera_pipelines_left_behind_total",
            "counter",
            "Pipelines that did not stop within the bound and were left behind (a GStreamer deadlock; docs/ARCHITECTURE.md).",
            |v| v.shared.counters.snapshot().left_behind as f64,
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
    let rows: [(&str, &str, &str, f64); 16] = [
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
        (
            "edgevlm_mqtt_queries_retained_ignored_total",
            "counter",
            "Retained messages on query topics, refused and cleared (a stored question is stale).",
            p.queries_retained_ignored as f64,
        ),
        (
            "edgevlm_mqtt_queries_oversized_total",
            "counter",
            "Questions over the MQTT packet limit, cut before the client and answered too_large.",
            p.queries_oversized as f64,
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

/// Renders the embedded broker gate's counters (docs/MQTT.md, "Connection limits").
pub fn render_gate(g: &crate::broker::GateCounters) -> String {
    use std::sync::atomic::Ordering::Relaxed;
    counters(&[
        (
            "edgevlm_mqtt_gate_refused_total",
            "Logins refused by a connection limit of the embedded broker.",
            g.refused_busy.load(Relaxed) as f64,
        ),
        (
            "edgevlm_mqtt_gate_idle_closed_total",
            "Sockets closed before their CONNECT (too slow, or a newer socket needed the slot).",
            g.closed_idle.load(Relaxed) as f64,
        ),
    ])
}

/// Counters as Prometheus text: (name, help, value) each.
fn counters(rows: &[(&str, &str, f64)]) -> String {
    let mut out = String::new();
    for (name, help, value) in rows {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
        );
    }
    out
}

/// Renders the snapshot stage's counters (docs/MQTT.md, "Snapshots").
pub fn render_snapshots(s: &crate::evidence::SnapshotStats) -> String {
    use std::sync::atomic::Ordering::Relaxed;
    counters(&[
        (
            "edgevlm_snapshots_encoded_total",
            "Snapshots encoded and published.",
            s.encoded.load(Relaxed) as f64,
        ),
        (
            "edgevlm_snapshots_dropped_total",
            "Snapshots dropped because the encoder's queue was full.",
            s.dropped.load(Relaxed) as f64,
        ),
        (
            "edgevlm_snapshots_failed_total",
            "Snapshots that could not be encoded.",
            s.failed.load(Relaxed) as f64,
        ),
        (
            "edgevlm_snapshots_bytes_total",
            "JPEG bytes produced.",
            s.bytes.load(Relaxed) as f64,
        ),
        (
            "edgevlm_snapshots_encode_seconds_total",
            "Time spent encoding snapshots.",
            s.encode_us.load(Relaxed) as f64 / 1e6,
        ),
    ])
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

/// Renders the CPU decoder's KV cache pool (`engine.cache_memory = "pool"`): the bytes of blocks
/// held by caches and kept idle, and the blocks mapped, reused and unmapped so far.
pub fn render_cache_pool(p: &crate::engine::CachePoolStats) -> String {
    let mut out = String::new();
    let name = "edgevlm_kv_pool_bytes";
    let _ = writeln!(
        out,
        "# HELP {name} Bytes of the KV cache pool's blocks: held by caches (live) or kept for reuse (idle).\n# TYPE {name} gauge"
    );
    let _ = writeln!(out, "{name}{{state=\"live\"}} {}", p.live_bytes);
    let _ = writeln!(out, "{name}{{state=\"idle\"}} {}", p.idle_bytes);
    let name = "edgevlm_kv_pool_blocks_total";
    let _ = writeln!(
        out,
        "# HELP {name} KV cache pool blocks mapped, taken again from the idle ones, and unmapped.\n# TYPE {name} counter"
    );
    for (event, n) in [
        ("mapped", p.mapped),
        ("reused", p.reused),
        ("unmapped", p.unmapped),
    ] {
        let _ = writeln!(out, "{name}{{event=\"{event}\"}} {n}");
    }
    out
}

/// Renders the process's resident memory by kind (`base::memory::resident_by_kind`).
pub fn render_resident(kinds: &[(&'static str, u64)]) -> String {
    let name = "edgevlm_process_resident_bytes";
    let mut out = format!(
        "# HELP {name} Resident memory of the process by kind: anon (heap, arenas, KV cache pool), file (code, libraries), shmem.\n# TYPE {name} gauge\n"
    );
    for (kind, bytes) in kinds {
        let _ = writeln!(out, "{name}{{kind=\"{kind}\"}} {bytes}");
    }
    let name = "edgevlm_process_allocator_info";
    let _ = write!(
        out,
        "# HELP {name} The allocator this build serves memory with (jemalloc by default, libc without the jemalloc feature).\n# TYPE {name} gauge\n{name}{{allocator=\"{}\"}} 1\n",
        crate::base::memory::ALLOCATOR
    );
    out
}

/// Renders the allocator's own figures (`base::memory::allocator_stats`, jemalloc builds).
pub fn render_allocator(stats: &crate::base::memory::AllocatorStats) -> String {
    let name = "edgevlm_allocator_bytes";
    let mut out = format!(
        "# HELP {name} The allocator's own figures: allocated (live allocations), active (pages holding them), resident, mapped, retained (mapped, not resident).\n# TYPE {name} gauge\n"
    );
    for (state, bytes) in stats.by_state() {
        let _ = writeln!(out, "{name}{{state=\"{state}\"}} {bytes}");
    }
    out
}

/// Binds the metrics listener (so a taken port is an error at startup, not later).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// What `/metrics` reads; each part may change while serving (reloads, engines loading later).
#[derive(Debug, Clone)]
pub struct Sources {
    /// The cameras.
    pub views: watch::Receiver<Vec<CameraView>>,
    /// The MQTT publisher, when MQTT is on.
    pub publisher: Option<Publisher>,
    /// What the embedded broker's gate refused and closed (embedded broker only).
    pub gate: Option<Arc<crate::broker::GateCounters>>,
    /// The engines, once loaded (they may load later, or never).
    pub engines: watch::Receiver<Option<Arc<Engines>>>,
    /// Each camera's memory, narration and answer statistics.
    pub memories: watch::Receiver<Vec<Arc<CameraMemory>>>,
    /// The snapshot stage, when snapshots are on.
    pub snapshots: Option<crate::evidence::Snapshotter>,
}

impl Sources {
    /// Sources with only cameras (no MQTT, no engines, no memories).
    pub fn cameras(views: watch::Receiver<Vec<CameraView>>) -> Sources {
        Sources {
            views,
            publisher: None,
            gate: None,
            engines: watch::channel(None).1,
            memories: watch::channel(Vec::new()).1,
            snapshots: None,
        }
    }

    /// The whole page.
    pub fn render(&self) -> String {
        let mut body = render_cameras(&self.views.borrow());
        if let Some(p) = &self.publisher {
            body.push_str(&render_publish(&p.stats()));
        }
        if let Some(g) = &self.gate {
            body.push_str(&render_gate(g));
        }
        if let Some(s) = &self.snapshots {
            body.push_str(&render_snapshots(s.stats()));
        }
        let (engine_stats, pool) = match self.engines.borrow().as_ref() {
            Some(e) => (Some(e.stats()), e.decoder().cache_pool()),
            None => (None, None),
        };
        if let Some(stats) = engine_stats {
            body.push_str(&render_engine(&stats));
        }
        if let Some(pool) = pool {
            body.push_str(&render_cache_pool(&pool));
        }
        if let Some(kinds) = crate::base::memory::resident_by_kind() {
            body.push_str(&render_resident(&kinds));
        }
        if let Some(stats) = crate::base::memory::allocator_stats() {
            body.push_str(&render_allocator(&stats));
        }
        body.push_str(&render_watch(&self.memories.borrow()));
        body
    }
}

/// Renders each camera's memory, narration and answer counters and latency histograms.
pub fn render_watch(memories: &[Arc<CameraMemory>]) -> String {
    use std::sync::atomic::AtomicU64;
    let mut out = String::new();
    if memories.is_empty() {
        return out;
    }
    type Counter = (
        &'static str,
        &'static str,
        &'static str,
        fn(&WatchStats) -> &AtomicU64,
    );
    let counters: [Counter; 17] = [
        (
            "edgevlm_memory_frames_encoded_total",
            "counter",
            "Frames run through the vision encoder, counted once they are in the live cache.",
            |s| &s.frames_encoded,
        ),
        (
            "edgevlm_memory_frames_reused_total",
            "counter",
            "Frames whose features were reused from the identical previous frame, counted once they are in the live cache.",
            |s| &s.frames_reused,
        ),
        (
            "edgevlm_memory_frames_missed_total",
            "counter",
            "Sampled frames that left the window before the memory encoded them.",
            |s| &s.frames_missed,
        ),
        (
            "edgevlm_memory_errors_total",
            "counter",
            "Encoder or prefill failures in the watch worker.",
            |s| &s.errors,
        ),
        (
            "edgevlm_memory_cache_rebuilds_total",
            "counter",
            "Live KV cache rebuilds from memory.",
            |s| &s.rebuilds,
        ),
        (
            "edgevlm_memory_cache_evicted_frames_total",
            "counter",
            "Frames evicted from the live KV cache in place (cache_policy sink_recent).",
            |s| &s.evicted_frames,
        ),
        (
            "edgevlm_memory_cache_compressed_tokens_total",
            "counter",
            "Visual tokens dropped from frames the live KV cache keeps (cache_policy compress).",
            |s| &s.compressed_tokens,
        ),
        (
            "edgevlm_memory_frames",
            "gauge",
            "Encoded frames held in memory.",
            |s| &s.memory_frames,
        ),
        (
            "edgevlm_memory_bytes",
            "gauge",
            "Bytes of visual features held in memory.",
            |s| &s.memory_bytes,
        ),
        (
            "edgevlm_memory_cache_positions",
            "gauge",
            "Positions in the live KV cache.",
            |s| &s.cache_positions,
        ),
        (
            "edgevlm_memory_cache_bytes",
            "gauge",
            "Bytes of the live KV cache's tensors.",
            |s| &s.cache_bytes,
        ),
        (
            "edgevlm_memory_cache_planned_bytes",
            "gauge",
            "The memory plan's bound on the live KV cache's bytes (edgevlm plan).",
            |s| &s.cache_planned_bytes,
        ),
        (
            "edgevlm_narrations_total",
            "counter",
            "Narrations published.",
            |s| &s.narrations,
        ),
        (
            "edgevlm_narrations_skipped_total",
            "counter",
            "Narrations triggered while generation was behind, skipped.",
            |s| &s.narrations_skipped,
        ),
        (
            "edgevlm_narration_errors_total",
            "counter",
            "Narrations that failed while generating.",
            |s| &s.narration_errors,
        ),
        (
            "edgevlm_answers_total",
            "counter",
            "Questions answered.",
            |s| &s.answers,
        ),
        (
            "edgevlm_answer_errors_total",
            "counter",
            "Questions that failed while generating.",
            |s| &s.answer_errors,
        ),
    ];
    for (name, kind, help, get) in counters {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for m in memories {
            let v = WatchStats::get(get(&m.stats));
            let _ = writeln!(out, "{name}{{camera=\"{}\"}} {v}", m.camera);
        }
    }
    type Hist = (&'static str, &'static str, fn(&WatchStats) -> &Histogram);
    let histograms: [Hist; 5] = [
        (
            "edgevlm_narration_first_token_seconds",
            "Time from a narration's trigger to its first token.",
            |s| &s.narration_first_token,
        ),
        (
            "edgevlm_narration_seconds",
            "Time from a narration's trigger to its last token.",
            |s| &s.narration_total,
        ),
        (
            "edgevlm_answer_first_token_seconds",
            "Time from receiving a question to its first token.",
            |s| &s.answer_first_token,
        ),
        (
            "edgevlm_answer_seconds",
            "Time from receiving a question to its last token.",
            |s| &s.answer_total,
        ),
        (
            "edgevlm_memory_append_seconds",
            "Time to append a round of new frames to the live cache.",
            |s| &s.append,
        ),
    ];
    for (name, help, get) in histograms {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} histogram");
        for m in memories {
            let labels = format!("camera=\"{}\"", m.camera);
            write_histogram(&mut out, name, &labels, &get(&m.stats).snapshot());
        }
    }
    out
}

/// Serves `/metrics` from `sources` until the listener fails (axum, the HTTP API's stack).
pub async fn serve(listener: TcpListener, sources: Sources) {
    use axum::http::header;
    let page = move || {
        let sources = sources.clone();
        async move {
            // One page per connection, as before: simple scrapers read until the server closes.
            (
                [
                    (
                        header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    ),
                    (header::CONNECTION, "close"),
                ],
                sources.render(),
            )
        }
    };
    let app = axum::Router::new()
        .route("/metrics", axum::routing::get(page))
        .fallback(|| async {
            (
                axum::http::StatusCode::NOT_FOUND,
                [(header::CONNECTION, "close")],
            )
        });
    if let Err(e) = axum::serve(listener, app).await {
        tracing::warn!(error = %e, "Metrics listener failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
    fn the_kv_pool_and_resident_memory_render_as_labelled_families() {
        let pool = crate::engine::CachePoolStats {
            live_bytes: 4096,
            idle_bytes: 1024,
            mapped: 7,
            reused: 5,
            unmapped: 2,
            largest_bytes: 4096,
        };
        let text = render_cache_pool(&pool);
        for line in [
            "# TYPE edgevlm_kv_pool_bytes gauge",
            "edgevlm_kv_pool_bytes{state=\"live\"} 4096",
            "edgevlm_kv_pool_bytes{state=\"idle\"} 1024",
            "# TYPE edgevlm_kv_pool_blocks_total counter",
            "edgevlm_kv_pool_blocks_total{event=\"mapped\"} 7",
            "edgevlm_kv_pool_blocks_total{event=\"reused\"} 5",
            "edgevlm_kv_pool_blocks_total{event=\"unmapped\"} 2",
        ] {
            assert!(text.lines().any(|l| l == line), "{line}: {text}");
        }
        let text = render_resident(&[("anon", 10), ("file", 20), ("shmem", 0)]);
        assert!(text.contains("# TYPE edgevlm_process_resident_bytes gauge"));
        assert!(text.contains("edgevlm_process_resident_bytes{kind=\"file\"} 20"));
        assert!(text.contains(&format!(
            "edgevlm_process_allocator_info{{allocator=\"{}\"}} 1",
            crate::base::memory::ALLOCATOR
        )));
        let stats = crate::base::memory::AllocatorStats {
            allocated: 1,
            active: 2,
            resident: 3,
            mapped: 4,
            retained: 5,
        };
        let text = render_allocator(&stats);
        assert!(text.contains("# TYPE edgevlm_allocator_bytes gauge"));
        for line in [
            "edgevlm_allocator_bytes{state=\"allocated\"} 1",
            "edgevlm_allocator_bytes{state=\"resident\"} 3",
            "edgevlm_allocator_bytes{state=\"retained\"} 5",
        ] {
            assert!(text.lines().any(|l| l == line), "{line}: {text}");
        }
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
        assert_prometheus_text(&render_cameras(&[]));
        assert_prometheus_text(&render_publish(&PublishStats::default()));
        assert_prometheus_text(&render_snapshots(&crate::evidence::SnapshotStats::default()));
        let h = crate::base::Histogram::latency();
        h.observe(Duration::from_millis(30));
        let mut text = String::from("# HELP h_seconds Test.\n# TYPE h_seconds histogram\n");
        crate::base::write_histogram(&mut text, "h_seconds", "camera=\"a\"", &h.snapshot());
        crate::base::write_histogram(&mut text, "h_seconds", "", &h.snapshot());
        assert_prometheus_text(&text);
    }

    #[test]
    fn watch_stats_render_per_camera_with_latency_histograms() {
        let a = Arc::new(CameraMemory::new("door", Duration::from_secs(60), 61));
        let b = Arc::new(CameraMemory::new("yard", Duration::from_secs(60), 61));
        WatchStats::bump(&a.stats.narrations);
        WatchStats::bump(&a.stats.narrations);
        a.stats
            .narration_first_token
            .observe(Duration::from_millis(40));
        b.stats.answer_total.observe(Duration::from_millis(700));
        let text = render_watch(&[a, b]);
        assert_prometheus_text(&text);
        assert!(
            text.contains("\nedgevlm_narrations_total{camera=\"door\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("\nedgevlm_narrations_total{camera=\"yard\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "edgevlm_narration_first_token_seconds_bucket{camera=\"door\",le=\"0.05\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("edgevlm_answer_seconds_bucket{camera=\"yard\",le=\"0.5\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("edgevlm_answer_seconds_count{camera=\"yard\"} 1"),
            "{text}"
        );
        assert!(render_watch(&[]).is_empty());
    }
}
