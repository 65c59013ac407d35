//! Ingest cost: CPU time to take one 1080p30 H.264 stream to the model geometry at 1 fps.
//!
//! `cargo bench --bench ingest` (needs gst-launch-1.0; ffmpeg is optional: `apt-get install ffmpeg`).
//! Compares `edgevlm probe` with the same decode/scale done by `gst-launch-1.0` (rate before and
//! after scaling) and by `ffmpeg -vf fps=1,scale=…` (what the reference loaders run). Each command
//! decodes the same file as fast as it can; the figure is CPU seconds (user + system, all threads)
//! per second of video, the median of several runs. A documented harness rather than criterion:
//! what is measured is whole processes, not a function.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

const SECONDS: u32 = 20;
const RUNS: usize = 3;
const GEOMETRY: (u32, u32) = (336, 196); // 1080p with a 180-frame window (docs/REFERENCE.md §1b)

fn main() {
    // `cargo bench` passes harness flags such as `--bench`; `--keyframes` selects that table.
    if std::env::args().any(|a| a == "--keyframes") {
        keyframes();
        return;
    }
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-data");
    std::fs::create_dir_all(&data).expect("bench data dir");
    let video = data.join(format!("1080p30-{SECONDS}s.mp4"));
    if !video.exists() {
        make_video(&video);
    }
    let v = video.to_str().expect("utf-8 path");
    let (w, h) = GEOMETRY;

    let mut rows: Vec<(&str, String, Option<f64>)> = Vec::new();
    let edgevlm = env!("CARGO_BIN_EXE_edgevlm");
    rows.push((
        "edgevlm probe (rate -> convert+scale -> appsink, copy by stride)",
        format!("{edgevlm} probe {v} --sample-fps 1 --frames 100000 --width {w} --height {h}"),
        None,
    ));
    rows.push((
        "gst-launch, same pipeline (rate before scale)",
        format!(
            "gst-launch-1.0 -q filesrc location={v} ! decodebin ! videorate drop-only=true \
             ! videoconvertscale add-borders=false ! video/x-raw,format=RGB,width={w},height={h},framerate=1/1 ! fakesink"
        ),
        None,
    ));
    rows.push((
        "gst-launch, scale before rate (naive order)",
        format!(
            "gst-launch-1.0 -q filesrc location={v} ! decodebin ! videoconvertscale add-borders=false \
             ! video/x-raw,format=RGB,width={w},height={h} ! videorate drop-only=true ! video/x-raw,framerate=1/1 ! fakesink"
        ),
        None,
    ));
    rows.push((
        "gst-launch, decode only (the floor)",
        format!("gst-launch-1.0 -q filesrc location={v} ! decodebin ! fakesink"),
        None,
    ));
    if which("ffmpeg") {
        rows.push((
            "ffmpeg -vf fps=1:round=down,scale (reference loader)",
            format!(
                "ffmpeg -v error -nostdin -i {v} -vf fps=1:round=down,scale={w}:{h} -f rawvideo -pix_fmt rgb24 -y /dev/null"
            ),
            None,
        ));
    } else {
        eprintln!("ffmpeg not installed: its row is skipped (apt-get install ffmpeg)");
    }

    for row in &mut rows {
        let mut samples: Vec<f64> = (0..RUNS).map(|_| cpu_seconds(&row.1)).collect();
        samples.sort_by(f64::total_cmp);
        row.2 = Some(samples[RUNS / 2]);
    }
    let base = rows[0].2.unwrap_or(f64::NAN);
    println!(
        "\nIngest: {SECONDS} s of 1080p30 H.264 -> {w}x{h} RGB at 1 fps, CPU time (median of {RUNS})"
    );
    println!(
        "{:<66} {:>10} {:>12} {:>9}",
        "pipeline", "CPU s", "CPU s/video s", "vs edgevlm"
    );
    for (name, _, cpu) in &rows {
        let cpu = cpu.unwrap_or(f64::NAN);
        println!(
            "{name:<66} {cpu:>10.3} {:>12.4} {:>9.2}x",
            cpu / f64::from(SECONDS),
            cpu / base
        );
    }
}

/// CPU seconds (user + system) a command used, children included.
fn cpu_seconds(cmd: &str) -> f64 {
    let before = children_cpu();
    let started = Instant::now();
    let status = Command::new("sh")
        .args(["-c", cmd])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .status()
        .expect("run command");
    assert!(status.success(), "failed: {cmd}");
    let cpu = children_cpu() - before;
    eprintln!(
        "  {:.2} s wall, {cpu:.3} s CPU: {}",
        started.elapsed().as_secs_f64(),
        short(cmd)
    );
    cpu
}

fn children_cpu() -> f64 {
    // SAFETY: getrusage fills the struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// `--keyframes`: `decode = "keyframes"` against a full decode, through `edgevlm probe`, on
/// 60 s of 1080p30 H.264 at 4 Mb/s with a fixed GOP of 1 s, 2 s and 25 frames (keyframes off the
/// 1 s sample grid): CPU per second of video, frames decoded,
/// the decode state, and how far each sampled frame's time is from the sample grid (the frame's
/// own timestamp is kept, so the model's time text stays true; what moves is which instant is
/// sampled).
fn keyframes() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-data");
    std::fs::create_dir_all(&data).expect("bench data dir");
    let edgevlm = env!("CARGO_BIN_EXE_edgevlm");
    let (w, h) = GEOMETRY;
    const SECONDS: u32 = 60;
    println!(
        "\nKeyframe decoding: {SECONDS} s of 1080p30 H.264 at 4 Mb/s -> {w}x{h} RGB, CPU time (median of {RUNS})"
    );
    println!(
        "{:<8} {:>6} {:<10} {:>10} {:>13} {:>8} {:>8} {:>10} {:>10}  decode state",
        "GOP",
        "fps",
        "decode",
        "CPU s",
        "CPU s/video s",
        "vs full",
        "decoded",
        "samples",
        "grid err"
    );
    for (keyint, fps) in [(30u32, 1.0f64), (60, 1.0), (60, 0.5), (25, 1.0)] {
        let video = data.join(format!("1080p30-{SECONDS}s-keyint{keyint}.mp4"));
        if !video.exists() {
            make_gop_video(&video, keyint, SECONDS);
        }
        let v = video.to_str().expect("utf-8 path");
        let mut full_cpu = f64::NAN;
        for decode in ["full", "keyframes"] {
            let cmd = format!(
                "{edgevlm} probe {v} --sample-fps {fps} --frames 100000 --width {w} --height {h} \
                 --decode {decode} --json"
            );
            let mut runs: Vec<(f64, String, String)> =
                (0..RUNS).map(|_| cpu_output(&cmd)).collect();
            runs.sort_by(|a, b| a.0.total_cmp(&b.0));
            let (cpu, out, err) = runs.swap_remove(RUNS / 2);
            if decode == "full" {
                full_cpu = cpu;
            }
            let pts: Vec<f64> = out
                .lines()
                .filter_map(|l| {
                    let i = l.find("\"pts_secs\":")? + 11;
                    l[i..].split([',', '}']).next()?.parse().ok()
                })
                .collect();
            let worst = pts
                .iter()
                .map(|t| (t * fps - (t * fps).round()).abs() / fps)
                .fold(0.0f64, f64::max);
            let decoded = err
                .split(" frames decoded")
                .next()
                .and_then(|s| s.rsplit(' ').next())
                .unwrap_or("?")
                .to_string();
            let state = err
                .split("; decode ")
                .nth(1)
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|| "every frame".into());
            println!(
                "{:<8} {fps:>6} {decode:<10} {cpu:>10.3} {:>13.4} {:>7.2}x {decoded:>8} {:>10} {:>8.0} ms  {state}",
                format!("{:.2} s", f64::from(keyint) / 30.0),
                cpu / f64::from(SECONDS),
                cpu / full_cpu,
                pts.len(),
                worst * 1e3,
            );
        }
    }
}

/// CPU seconds of a command (children included), its stdout and its stderr.
fn cpu_output(cmd: &str) -> (f64, String, String) {
    let before = children_cpu();
    let out = Command::new("sh")
        .args(["-c", cmd])
        .output()
        .expect("run command");
    assert!(
        out.status.success(),
        "failed: {cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cpu = children_cpu() - before;
    eprintln!("  {cpu:.3} s CPU: {}", short(cmd));
    (
        cpu,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Like [`make_video`], `seconds` long with a fixed GOP of `keyint` frames (no scene-cut
/// keyframes, no B-frames).
fn make_gop_video(path: &Path, keyint: u32, seconds: u32) {
    let keyint = format!("key-int-max={keyint}");
    encode_video(
        path,
        seconds,
        &[&keyint, "bframes=0", "option-string=scenecut=0"],
    );
}

fn make_video(path: &Path) {
    encode_video(path, SECONDS, &["key-int-max=60"]);
}

/// `seconds` of 1080p30 `videotestsrc pattern=ball` through x264 (veryfast, 4 Mb/s, and
/// `options`) into an MP4 file.
fn encode_video(path: &Path, seconds: u32, options: &[&str]) {
    eprintln!("Generating {} …", path.display());
    let status = Command::new("gst-launch-1.0")
        .args([
            "-q",
            "videotestsrc",
            &format!("num-buffers={}", seconds * 30),
            "pattern=ball",
        ])
        .args(["!", "video/x-raw,width=1920,height=1080,framerate=30/1"])
        .args(["!", "x264enc", "speed-preset=veryfast", "bitrate=4000"])
        .args(options)
        .args(["!", "h264parse", "!", "mp4mux", "!", "filesink"])
        .arg(format!("location={}", path.display()))
        .status()
        .expect("gst-launch-1.0 (apt-get install gstreamer1.0-tools)");
    assert!(status.success(), "could not generate the bench video");
}

fn which(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn short(cmd: &str) -> String {
    cmd.split_whitespace().take(6).collect::<Vec<_>>().join(" ")
}
