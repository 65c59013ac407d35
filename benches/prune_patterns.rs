//! Kept-token ratio of DiffFP on RTSP test patterns, `reference` vs `adaptive` mode.
//!
//! `cargo bench --bench prune_patterns`: for each videotestsrc pattern an in-process RTSP camera
//! (x264, 640x480 at 15 fps) is ingested by two cameras at 2 fps, one per mode, for 12 s. A
//! documented harness rather than criterion: what is measured is a ratio over live streams.

#[path = "../tests/common/rtsp.rs"]
#[allow(dead_code)]
mod rtsp;

use edgevlm::config::Config;
use edgevlm::supervisor::Supervisor;
use std::time::Duration;

const SECONDS: u64 = 12;

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    println!("\nDiffFP kept-token ratio, RTSP x264 640x480@15 -> 2 fps, {SECONDS} s per pattern");
    println!(
        "{:<8} {:>10} {:>10} {:>18} {:>16}",
        "pattern", "reference", "adaptive", "adaptive threshold", "identical frames"
    );
    for pattern in ["ball", "snow", "smpte"] {
        let server = rtsp::RtspServer::start(rtsp::CameraSpec {
            pattern: pattern.into(),
            width: 640,
            height: 480,
            ..Default::default()
        });
        let toml = format!(
            "[[cameras]]\nid = \"reference\"\nuri = \"{url}\"\nsample_fps = 2\n\n\
             [[cameras]]\nid = \"adaptive\"\nuri = \"{url}\"\nsample_fps = 2\nprune_mode = \"adaptive\"\n",
            url = server.url()
        );
        let cfg = Config::parse(&toml, None).expect("bench config");
        let (reference, adaptive, threshold, identical) = rt.block_on(async {
            let sup = Supervisor::start(&cfg);
            tokio::time::sleep(Duration::from_secs(SECONDS)).await;
            let r = sup
                .camera("reference")
                .expect("camera")
                .shared
                .counters
                .snapshot();
            let a_cam = sup.camera("adaptive").expect("camera");
            let a = a_cam.shared.counters.snapshot();
            let t = a_cam.shared.counters.prune_threshold().unwrap_or(f32::NAN);
            sup.shutdown(Duration::from_secs(10)).await;
            (r.kept_ratio(), a.kept_ratio(), t, r.frames_identical)
        });
        println!(
            "{pattern:<8} {:>9.1}% {:>9.1}% {threshold:>18.3} {identical:>16}",
            reference * 100.0,
            adaptive * 100.0
        );
    }
}
