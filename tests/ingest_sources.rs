//! Ingest from non-RTSP sources: files, test patterns, and the templates themselves.

mod common;

use common::wait_until;
use edgevlm::config::Config;
use edgevlm::ingest::Template;
use edgevlm::supervisor::{CameraState, Supervisor};
use gst::prelude::*;
use std::time::Duration;

#[test]
fn every_template_instantiates_where_its_elements_exist() {
    gst::init().unwrap();
    let mut built = 0;
    for t in Template::all() {
        t.check_text().unwrap();
        // As the running GStreamer builds it (stand-ins for elements newer than it).
        let missing: Vec<_> = t
            .missing_elements()
            .unwrap()
            .into_iter()
            .map(|m| m.factory)
            .collect();
        if missing.is_empty() {
            let launch = edgevlm::ingest::launch_line(&t.launch());
            let p = gst::parse::launch(&launch).unwrap_or_else(|e| panic!("{}: {e}", t.name));
            let bin = p.downcast::<gst::Bin>().unwrap();
            for name in edgevlm::ingest::REQUIRED_NAMES {
                assert!(bin.by_name(name).is_some(), "{}: no `{name}`", t.name);
            }
            built += 1;
        } else {
            // Hardware templates (NVDEC, Jetson) are checked as text only on this machine.
            assert!(
                !t.decodes_in_software() && t.name != "test",
                "{} misses {missing:?}",
                t.name
            );
        }
    }
    assert!(built >= 4, "software templates must build here");
}

/// A 4 s, 15 fps H.264 file made with GStreamer itself.
fn h264_file() -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("edgevlm-src-{}.mp4", std::process::id()));
    write_h264(&path, 60, 15, "");
    path
}

/// Writes `frames` of 320x240 `videotestsrc pattern=ball` at `fps` through x264 (ultrafast, and
/// `x264` options) to an MP4 file with GStreamer itself.
fn write_h264(path: &std::path::Path, frames: u32, fps: u32, x264: &str) {
    write_to_eos(&format!(
        "videotestsrc num-buffers={frames} pattern=ball \
         ! video/x-raw,width=320,height=240,framerate={fps}/1 \
         ! x264enc speed-preset=ultrafast {x264} ! h264parse ! mp4mux ! filesink location={}",
        path.display()
    ));
}

/// Runs a launch line that writes a file until its end of stream (60 s at most).
fn write_to_eos(launch: &str) {
    gst::init().unwrap();
    let p = gst::parse::launch(launch).unwrap();
    p.set_state(gst::State::Playing).unwrap();
    let msg = p
        .bus()
        .unwrap()
        .timed_pop_filtered(
            gst::ClockTime::from_seconds(60),
            &[gst::MessageType::Eos, gst::MessageType::Error],
        )
        .expect("file written in time");
    assert!(matches!(msg.view(), gst::MessageView::Eos(_)), "{msg:?}");
    p.set_state(gst::State::Null).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_slower_than_the_sample_rate_gives_every_frame_of_its_own() {
    // 6 frames at 1 fps sampled at 2 fps: `videorate drop-only=true` cannot raise the rate, and
    // caps fixed at 2/1 failed to negotiate (the camera never started); now every source frame
    // comes through, one a second, none duplicated.
    let path = std::env::temp_dir().join(format!("edgevlm-src-1fps-{}.mp4", std::process::id()));
    write_h264(&path, 6, 1, "");
    let cfg = Config::parse(
        &format!(
            "[[cameras]]\nid = \"slow\"\nuri = \"file://{}\"\nsample_fps = 2\nwindow_secs = 60\n",
            path.display()
        ),
        None,
    )
    .unwrap();
    let sup = Supervisor::start(&cfg);
    let cam = sup.camera("slow").unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || cam.status().state
            == CameraState::Stopped)
        .await
    );
    assert_eq!(cam.status().reason.as_deref(), Some("end of file"));
    let pts: Vec<f64> = cam
        .window
        .last(100)
        .iter()
        .map(|f| f.pts.as_secs_f64())
        .collect();
    assert_eq!(pts.len(), 6, "{pts:?}");
    for (i, t) in pts.iter().enumerate() {
        assert!((t - i as f64).abs() < 0.07, "{pts:?}");
    }
    sup.shutdown(Duration::from_secs(5)).await;
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_is_sampled_by_timestamp_and_the_camera_stops_at_its_end() {
    let file = h264_file();
    let cfg = Config::parse(
        &format!(
            "[[cameras]]\nid = \"clip\"\nuri = \"file://{}\"\nsample_fps = 2\nwindow_secs = 60\n",
            file.display()
        ),
        None,
    )
    .unwrap();
    let sup = Supervisor::start(&cfg);
    let cam = sup.camera("clip").unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || cam.status().state
            == CameraState::Stopped)
        .await
    );
    assert_eq!(cam.status().reason.as_deref(), Some("end of file"));
    // 60 frames at 15 fps = 4 s of content; sampled at 2 fps by timestamp, not by arrival speed.
    let frames = cam.window.last(100);
    let pts: Vec<f64> = frames.iter().map(|f| f.pts.as_secs_f64()).collect();
    assert_eq!(frames.len(), 8, "{pts:?}");
    for (i, t) in pts.iter().enumerate() {
        assert!((t - 0.5 * i as f64).abs() < 0.07, "{pts:?}");
    }
    let c = cam.shared.counters.snapshot();
    assert_eq!(c.frames_in, 60);
    assert_eq!(c.sampled, 8);
    assert_eq!(c.dropped, 52);
    sup.shutdown(Duration::from_secs(5)).await;
    let _ = std::fs::remove_file(file);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_geometry_from_the_config_is_used_as_is() {
    let cfg = Config::parse(
        "[[cameras]]\nid = \"t\"\nuri = \"test://smpte\"\nsample_fps = 4\nwidth = 224\nheight = 112\n",
        None,
    )
    .unwrap();
    let sup = Supervisor::start(&cfg);
    let cam = sup.camera("t").unwrap();
    assert!(wait_until(Duration::from_secs(10), || cam.window.info().frames >= 2).await);
    let f = cam.window.latest().unwrap();
    assert_eq!((f.width, f.height, f.rgb.len()), (224, 112, 224 * 112 * 3));
    sup.shutdown(Duration::from_secs(5)).await;
}

/// `secs` seconds of a 30 fps H.264 file with a keyframe every `keyint` frames (no B-frames).
fn h264_gop_file(name: &str, secs: u32, keyint: u32) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("edgevlm-gop-{}-{name}.mp4", std::process::id()));
    write_h264(
        &path,
        secs * 30,
        30,
        &format!("key-int-max={keyint} bframes=0"),
    );
    path
}

/// Runs `file` to its end as one camera at 1 fps; its sampled timestamps and counters, and its
/// `decode` status.
async fn run_file(
    file: &std::path::Path,
    decode: &str,
) -> (Vec<f64>, edgevlm::ring::CounterSnapshot, Option<String>) {
    let cfg = Config::parse(
        &format!(
            "[[cameras]]\nid = \"clip\"\nuri = \"file://{}\"\nsample_fps = 1\nwindow_secs = 60\n\
             decode = \"{decode}\"\n",
            file.display()
        ),
        None,
    )
    .unwrap();
    let sup = Supervisor::start(&cfg);
    let cam = sup.camera("clip").unwrap();
    assert!(
        wait_until(Duration::from_secs(60), || cam.status().state
            == CameraState::Stopped)
        .await
    );
    assert_eq!(cam.status().reason.as_deref(), Some("end of file"));
    let pts = cam
        .window
        .last(1000)
        .iter()
        .map(|f| f.pts.as_secs_f64())
        .collect();
    let counters = cam.shared.counters.snapshot();
    let status = cam.shared.decode();
    sup.shutdown(Duration::from_secs(5)).await;
    (pts, counters, status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyframe_decoding_decodes_only_keyframes_on_a_gop_within_the_sample_period() {
    let file = h264_gop_file("1s", 12, 30);
    let (full_pts, full, full_status) = run_file(&file, "full").await;
    let (key_pts, key, key_status) = run_file(&file, "keyframes").await;
    assert_eq!(
        full_status, None,
        "a full-decode camera has no decode status"
    );
    assert_eq!(key_status.as_deref(), Some("keyframes (GOP 1.0 s)"));
    assert_eq!(full.frames_in, 360);
    // The first two GOPs are decoded whole while the interval is measured; then only keyframes.
    assert_eq!(key.frames_in, 2 * 30 + 10, "{key:?}");
    assert_eq!(key.undecoded, 360 - key.frames_in);
    assert_eq!(full.undecoded, 0);
    // The same samples, at the same stream times: the keyframes sit on the 1 s sample grid.
    assert_eq!(key_pts.len(), full_pts.len(), "{key_pts:?} vs {full_pts:?}");
    for (k, f) in key_pts.iter().zip(&full_pts) {
        assert!((k - f).abs() < 0.04, "{key_pts:?} vs {full_pts:?}");
    }
    let _ = std::fs::remove_file(file);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyframe_decoding_falls_back_to_full_decode_when_the_gop_is_over_the_sample_period() {
    let file = h264_gop_file("3s", 10, 90);
    let (pts, key, status) = run_file(&file, "keyframes").await;
    assert_eq!(
        status.as_deref(),
        Some("full: GOP 3.00 s is over the 1.00 s sample period")
    );
    assert_eq!(key.undecoded, 0);
    assert_eq!(key.frames_in, 300);
    assert_eq!(pts.len(), 10, "{pts:?}");
    let _ = std::fs::remove_file(file);
}

/// Writes 60 frames of 320x240 I420 `videotestsrc pattern=ball` at 15 fps through `encode` (an
/// encoder, a parser if any, and a muxer) to `path`, with GStreamer itself.
fn write_clip(path: &std::path::Path, encode: &str) {
    write_to_eos(&format!(
        "videotestsrc num-buffers=60 pattern=ball \
         ! video/x-raw,format=I420,width=320,height=240,framerate=15/1 \
         ! {encode} ! filesink location={}",
        path.display()
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h265_and_mjpeg_files_are_decoded_by_the_file_template() {
    for (name, encode) in [
        (
            "h265.mp4",
            // No B-frames: GStreamer 1.18's avdec_h265 dropped the 2 frames x265's default
            // reordering left at the start of the file (58 of 60 decoded, scripts/debian11.sh).
            "x265enc speed-preset=ultrafast tune=zerolatency ! h265parse ! mp4mux",
        ),
        ("mjpeg.mkv", "jpegenc ! matroskamux"),
    ] {
        let file =
            std::env::temp_dir().join(format!("edgevlm-codec-{}-{name}", std::process::id()));
        write_clip(&file, encode);
        let cfg = Config::parse(
            &format!(
                "[[cameras]]\nid = \"clip\"\nuri = \"file://{}\"\nsample_fps = 2\n",
                file.display()
            ),
            None,
        )
        .unwrap();
        assert_eq!(cfg.cameras[0].pipeline, "file");
        let sup = Supervisor::start(&cfg);
        let cam = sup.camera("clip").unwrap();
        assert!(
            wait_until(Duration::from_secs(60), || cam.status().state
                == CameraState::Stopped)
            .await,
            "{name}: {:?}",
            cam.status()
        );
        assert_eq!(
            cam.status().reason.as_deref(),
            Some("end of file"),
            "{name}"
        );
        // 60 frames at 15 fps, sampled at 2 fps: 8 RGB frames of the reference geometry for
        // 320x240 and the 60 s window's 120 frames.
        let g = edgevlm::ingest::camera_geometry(320, 240, 120, &cfg.vision);
        let frames = cam.window.last(100);
        assert_eq!(frames.len(), 8, "{name}");
        for f in &frames {
            assert_eq!((f.width, f.height), (g.width, g.height), "{name}");
            assert_eq!(f.rgb.len(), (g.width * g.height * 3) as usize, "{name}");
            assert!(
                f.rgb.iter().any(|&b| b != f.rgb[0]),
                "{name}: uniform frame"
            );
        }
        assert_eq!(cam.shared.counters.snapshot().frames_in, 60, "{name}");
        sup.shutdown(Duration::from_secs(5)).await;
        let _ = std::fs::remove_file(file);
    }
}

#[test]
fn probe_runs_a_user_template_file_and_refuses_a_broken_one_with_its_line() {
    let dir = std::env::temp_dir().join(format!("edgevlm-probe-tpl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A test source of its own size: 640x360 instead of the built-in template's 1280x720.
    let good = dir.join("small.pipeline");
    std::fs::write(
        &good,
        "# small: a 640x360 test pattern\n# source: test\n# delivers: video/x-raw,format=RGB\n\
         videotestsrc name=src is-live=true ! video/x-raw,width=640,height=360,framerate=10/1\n\
         ! videorate name=rate drop-only=true ! videoconvert ! videoscale name=scale\n\
         ! capsfilter name=caps ! appsink name=sink\n",
    )
    .unwrap();
    let out = common::edgevlm()
        .args([
            "probe",
            "test://smpte",
            "--frames",
            "2",
            "--sample-fps",
            "2",
            "--json",
        ])
        .arg("--pipeline-file")
        .arg(&good)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 2);
    assert!(stderr.contains("source 640x360 "), "{stderr}");

    let bad = dir.join("bad.pipeline");
    std::fs::write(
        &bad,
        "# source: test\n# delivers: video/x-raw,format=RGB\n\
         videotestsrc name=src ! videorate name=rate ! videoscale name=scale\n\
         ! capsfilter name=caps ! appsink name=out\n",
    )
    .unwrap();
    // `edgevlm probe URI --frames 1 --pipeline-file FILE`: (exit code, stderr).
    let probe_one = |uri: &str, file: &std::path::Path| {
        let out = common::edgevlm()
            .args(["probe", uri, "--frames", "1", "--pipeline-file"])
            .arg(file)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stderr) = probe_one("test://smpte", &bad);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "--pipeline-file: {}: no element named `sink`",
            bad.display()
        )) && stderr.contains(&format!(
            "{}:4: the pipeline ends with `appsink`; it must end with the appsink named `sink`",
            bad.display()
        )),
        "{stderr}"
    );
    // A template for another kind of source than the uri's.
    let (code, stderr) = probe_one("rtsp://127.0.0.1:1/x", &good);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{}:2: `# source: test`, but the camera's uri rtsp://127.0.0.1:1/x is of kind `rtsp`",
            good.display()
        )),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A pipeline that cannot reach Null in time is left behind and the camera goes on. Here the
/// streaming thread sleeps 40 s inside `identity` on the first buffer, holding its stream lock,
/// which is what GStreamer 1.18's rtspsrc does for good when it deadlocks on a stop
/// (docs/ARCHITECTURE.md, "Platform facts"): the first-frame timeout restarts the camera, its stop
/// gives the pipeline up after the 15 s bound and counts it, and the camera starts its next
/// attempt; the shutdown's stop of that one ends at the bound too, instead of holding the camera's
/// task (and a runtime's shutdown) until the sleep ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_that_cannot_stop_in_time_is_left_behind_and_the_camera_goes_on() {
    let dir = common::tempdir::tempdir("stuck-stop");
    let template = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("pipelines/test.pipeline"),
    )
    .unwrap()
    .replace(
        "videotestsrc name=src is-live=true !",
        "videotestsrc name=src is-live=true ! identity sleep-time=40000000 !",
    );
    assert!(template.contains("identity"), "{template}");
    std::fs::write(dir.path().join("stuck.pipeline"), template).unwrap();
    let cfg = Config::parse(
        "[[cameras]]\nid = \"stuck\"\nuri = \"test://ball\"\npipeline_file = \"stuck.pipeline\"\n\
         sample_fps = 1\nconnect_timeout_secs = 1\nretry_initial_secs = 0.2\nretry_max_secs = 0.4\n",
        Some(dir.path()),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let sup = Supervisor::start(&cfg);
    let cam = sup.camera("stuck").unwrap();
    let left = || cam.shared.counters.snapshot().left_behind;
    // The first stop was given up and the next attempt has started its pipeline: the camera's
    // task was not held by the first.
    assert!(
        wait_until(Duration::from_secs(60), || left() == 1
            && cam.status().restarts == 1
            && cam.status().state == CameraState::Starting)
        .await,
        "the camera did not go on: left behind {}, {:?}",
        left(),
        cam.status()
    );
    assert_eq!(cam.window.info().frames, 0);
    // The shutdown stops that second pipeline, stuck the same way once its first buffer is in
    // `identity` (milliseconds after it plays; two seconds are left for a loaded machine): the
    // stop ends at the bound, not at the end of the sleep, and the pipeline is counted.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let shared = cam.shared.clone();
    let t0 = std::time::Instant::now();
    sup.shutdown(Duration::from_secs(40)).await;
    assert_eq!(shared.counters.snapshot().left_behind, 2);
    assert!(t0.elapsed() < Duration::from_secs(25), "{:?}", t0.elapsed());
}
