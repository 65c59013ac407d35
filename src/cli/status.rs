//! `edgevlm status`: read a running instance through its control socket.

use edgevlm::telemetry::control;
use std::path::PathBuf;

pub(crate) async fn status(socket: PathBuf, json: bool) -> anyhow::Result<()> {
    let doc = control::query(&socket).await.map_err(anyhow::Error::msg)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    println!(
        "edgevlm {}, pid {}, up {}, reports {:.0} s old",
        doc.version,
        doc.pid,
        human_duration(doc.uptime_secs),
        doc.report_age_secs
    );
    if !doc.model.is_empty() {
        println!("model: {}", doc.model);
    }
    println!(
        "{:<16} {:<9} {:>7} {:>8} {:>14} {:>18} {:>8}  LAST",
        "CAMERA", "STATE", "IN FPS", "SAMPLED", "WINDOW", "GEOMETRY", "RESTARTS"
    );
    for c in &doc.cameras {
        let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
        let n = |k: &str| c[k].as_f64().unwrap_or(0.0);
        let geometry = match (c["geometry"].as_str(), c["tokens_per_frame"].as_u64()) {
            (Some(g), Some(t)) => format!("{g} ({t} tok)"),
            _ => "pending".into(),
        };
        println!(
            "{:<16} {:<9} {:>7.1} {:>8.2} {:>14} {:>18} {:>8}  {}",
            s("camera"),
            s("state"),
            n("fps_in"),
            n("fps_sampled"),
            format!("{} fr/{:.0} s", n("window_frames"), n("window_span_secs")),
            geometry,
            c["counters"]["restarts"].as_u64().unwrap_or(0),
            s("reason"),
        );
        let m = &c["memory"];
        if m.is_object() {
            let n = |k: &str| m[k].as_u64().unwrap_or(0);
            let ms = |k: &str| {
                m[k].as_f64()
                    .map(|v| format!("{v:.0} ms"))
                    .unwrap_or_else(|| "-".into())
            };
            let mib = |k: &str| n(k) as f64 / (1u64 << 20) as f64;
            let planned = if n("cache_planned_bytes") > 0 {
                format!(
                    ", {:.1} of {:.1} MiB planned",
                    mib("cache_bytes"),
                    mib("cache_planned_bytes")
                )
            } else {
                String::new()
            };
            println!(
                "{:<16} memory {} frames, cache {} positions ({} rebuilds{planned}) | narrations {} ({} skipped), first token {} | answers {}, first token {} | errors {}",
                "",
                n("frames"),
                n("cache_positions"),
                n("rebuilds"),
                n("narrations"),
                n("narrations_skipped"),
                ms("narration_first_token_p50_ms"),
                n("answers"),
                ms("answer_first_token_p50_ms"),
                n("errors"),
            );
        }
    }
    Ok(())
}

pub(crate) fn human_duration(secs: f64) -> String {
    let s = secs as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}
