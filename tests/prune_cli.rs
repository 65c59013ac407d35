//! `edgevlm prune`: masks of a raw clip equal the float32 reference formula; bad input fails clearly.

mod common;

use common::{Frame, Rng, edgevlm};
use edgevlm::prune::PruneParams;
use edgevlm::prune::oracle::{FloatPruner, Normalise};

fn write_raw(frames: &[Frame], tail: usize) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!(
        "edgevlm-prune-{}-{}.rgb",
        std::process::id(),
        frames.len() * 1000 + tail
    ));
    let mut bytes: Vec<u8> = frames.iter().flat_map(|f| f.data.iter().copied()).collect();
    bytes.extend(std::iter::repeat_n(7u8, tail));
    std::fs::write(&path, bytes).unwrap();
    path
}

/// A clip where most blocks are static, some change a little (around the 117/118 bound) and some a
/// lot, so the masks are neither all ones nor all zeros.
fn clip(rng: &mut Rng, w: usize, h: usize, n: usize) -> Vec<Frame> {
    let mut frames = vec![Frame::random(w, h, rng)];
    for _ in 1..n {
        let mut f = frames.last().unwrap().clone();
        for block in 0..(w / 28) * (h / 28) {
            let (bx, by) = ((block % (w / 28)) * 28, (block / (w / 28)) * 28);
            let changes = match rng.below(4) {
                0 => 0,
                1 => 117,
                2 => 118,
                _ => 2352,
            };
            for k in 0..changes {
                let (x, y, c) = (bx + (k / 3) % 28, by + (k / 3) / 28, k % 3);
                let v = f.get(x, y, c);
                f.set(x, y, c, if v == 255 { 254 } else { v + 1 });
            }
        }
        frames.push(f);
    }
    frames
}

#[test]
fn raw_clip_masks_equal_the_float32_reference() {
    let (w, h) = (336, 196);
    let frames = clip(&mut Rng(0x5eed), w, h, 8);
    let path = write_raw(&frames, 0);
    let out = edgevlm()
        .args([
            "prune",
            "--raw",
            path.to_str().unwrap(),
            "--width",
            "336",
            "--height",
            "196",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 8);

    let mut oracle = FloatPruner::new(w, h, &PruneParams::default(), Normalise::Rescale).unwrap();
    let mut total_kept = 0;
    for (i, (line, frame)) in lines.iter().zip(&frames).enumerate() {
        let expected: String = oracle
            .push(&frame.data, frame.stride)
            .unwrap()
            .iter()
            .map(|&k| if k { '1' } else { '0' })
            .collect();
        assert_eq!(line["frame"], i);
        assert_eq!(line["grid"], serde_json::json!([7, 12]));
        assert_eq!(line["keep"].as_str().unwrap(), expected, "frame {i}");
        let kept = expected.matches('1').count();
        assert_eq!(line["kept"], kept);
        total_kept += kept;
    }
    assert!(
        total_kept > 84 && total_kept < 8 * 84,
        "a clip that exercises both outcomes"
    );
    let _ = std::fs::remove_file(path);
}

#[test]
fn a_truncated_last_frame_is_an_error_after_the_whole_frames() {
    let frames = clip(&mut Rng(1), 56, 56, 2);
    let path = write_raw(&frames, 100);
    let out = edgevlm()
        .args([
            "prune",
            "--raw",
            path.to_str().unwrap(),
            "--width",
            "56",
            "--height",
            "56",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 2);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("2 whole frame(s), then 100 bytes"), "{err}");
    let _ = std::fs::remove_file(path);
}

#[test]
fn bad_sizes_missing_files_and_bad_modes_are_refused() {
    let frames = clip(&mut Rng(2), 56, 56, 1);
    let path = write_raw(&frames, 0);
    let p = path.to_str().unwrap();
    let run = |args: &[&str]| edgevlm().arg("prune").args(args).output().unwrap();

    let out = run(&["--raw", p, "--width", "50", "--height", "56"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a multiple of the 28-pixel token block")
    );

    let out = run(&[
        "--raw",
        "/nonexistent.rgb",
        "--width",
        "56",
        "--height",
        "56",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read /nonexistent.rgb"));

    let out = run(&[
        "--raw", p, "--width", "56", "--height", "56", "--mode", "fast",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected reference, adaptive or off"));

    let out = run(&["--raw", p]);
    assert_eq!(out.status.code(), Some(2));
    let _ = std::fs::remove_file(path);
}

#[test]
fn a_live_source_is_pruned_at_the_requested_geometry() {
    let out = edgevlm()
        .args([
            "prune",
            "--uri",
            "test://ball",
            "--width",
            "112",
            "--height",
            "56",
        ])
        .args(["--sample-fps", "5", "--frames", "4", "--mode", "adaptive"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[0]["keep"], "11111111");
    assert_eq!(lines[0]["key_frame"], true);
    for l in &lines {
        assert_eq!(l["grid"], serde_json::json!([2, 4]));
        assert!(l["threshold"].as_f64().unwrap() >= 0.1);
    }
}
