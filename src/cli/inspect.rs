//! `edgevlm probe` and `edgevlm prune --uri`: attach to one source and report per frame.

use edgevlm::config::CameraConfig;

pub(crate) async fn prune_uri(cam: CameraConfig, frames: usize) -> anyhow::Result<()> {
    let vision = edgevlm::config::VisionConfig::default();
    let mut pruner: Option<edgevlm::prune::Pruner> = None;
    let mut failure = None;
    let mut index = 0;
    edgevlm::ingest::probe(&cam, &vision, frames, |f| {
        if failure.is_some() {
            return;
        }
        let (w, h) = (f.width as usize, f.height as usize);
        if pruner.is_none() {
            match edgevlm::prune::Pruner::new(w, h, cam.prune) {
                Ok(p) => pruner = Some(p),
                Err(e) => failure = Some(e.to_string()),
            }
        }
        if let Some(p) = pruner.as_mut() {
            match p.push(&f.rgb, w * 3) {
                Ok(d) => println!("{}", edgevlm::prune::inspect::json_line(index, d)),
                Err(e) => failure = Some(e.to_string()),
            }
            index += 1;
        }
    })
    .await
    .map_err(anyhow::Error::msg)?;
    match failure {
        Some(e) => Err(anyhow::anyhow!(e)),
        None => Ok(()),
    }
}

pub(crate) async fn probe(cam: CameraConfig, frames: usize, json: bool) -> anyhow::Result<()> {
    let vision = edgevlm::config::VisionConfig::default();
    let summary = edgevlm::ingest::probe(&cam, &vision, frames, |f| {
        if json {
            println!(
                "{}",
                serde_json::json!({
                    "seq": f.seq,
                    "pts_secs": f.pts.as_secs_f64(),
                    "width": f.width,
                    "height": f.height,
                })
            );
        } else {
            println!(
                "frame {:>4}  pts {:>9.3} s  {}x{} RGB  {} bytes",
                f.seq,
                f.pts.as_secs_f64(),
                f.width,
                f.height,
                f.rgb.len()
            );
        }
    })
    .await
    .map_err(anyhow::Error::msg)?;
    eprintln!(
        "probe: {} frames from {} in {:.1} s; source {}; model geometry {}; {} frames decoded{}",
        summary.frames,
        cam.uri,
        summary.elapsed.as_secs_f64(),
        summary.source_caps.as_deref().unwrap_or("unknown"),
        summary
            .geometry
            .map(|g| format!("{g} ({} tokens/frame)", g.tokens()))
            .unwrap_or_else(|| "unknown".into()),
        summary.decoded,
        summary
            .decode
            .map(|d| format!(", {} not; decode {d}", summary.undecoded))
            .unwrap_or_default(),
    );
    Ok(())
}
