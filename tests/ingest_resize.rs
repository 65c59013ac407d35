//! The Rust resize against torch's uint8 antialiased bicubic (the VideoLLaMA3 processor's resize)
//! and Lanczos (SmolVLM2's), byte for byte, on fixtures made by
//! engines/videollama3/resize_reference.py.

use std::path::{Path, PathBuf};

use edgevlm::ingest::{Kernel, Resizer};

const GENERATE: &str = ".venv-export/bin/python engines/videollama3/resize_reference.py";

#[derive(serde::Deserialize)]
struct Manifest {
    torch: String,
    cpu_capability: String,
    cases: Vec<Case>,
}

#[derive(serde::Deserialize)]
struct Case {
    source: String,
    src_w: u32,
    src_h: u32,
    dst_w: u32,
    dst_h: u32,
    output: String,
    /// `"bicubic"` or `"lanczos"`.
    kernel: String,
}

fn fixtures() -> (PathBuf, Manifest) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/resize-reference");
    let text = std::fs::read_to_string(dir.join("manifest.json")).unwrap_or_else(|e| {
        panic!(
            "resize fixtures missing ({}: {e}); generate them with `{GENERATE}` \
             (needs the export venv: scripts/setup-export.sh, and gst-launch-1.0)",
            dir.display()
        )
    });
    let manifest: Manifest = serde_json::from_str(&text).expect("manifest.json");
    (dir, manifest)
}

fn read(dir: &Path, name: &str, len: usize) -> Vec<u8> {
    let data =
        std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}; run `{GENERATE}`"));
    assert_eq!(
        data.len(),
        len,
        "{name}: size; regenerate with `{GENERATE} --force`"
    );
    data
}

/// Max and count of differing bytes.
fn diff(a: &[u8], b: &[u8]) -> (u8, usize) {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| x.abs_diff(y))
        .filter(|&d| d > 0)
        .fold((0, 0), |(m, n), d| (m.max(d), n + 1))
}

/// Resizes one case with both builds of the kernels; `Err` describes a mismatch.
fn check(dir: &Path, case: &Case) -> Result<(), String> {
    let (sw, sh) = (case.src_w as usize, case.src_h as usize);
    let src = read(dir, &case.source, sw * sh * 3);
    let want = read(
        dir,
        &case.output,
        case.dst_w as usize * case.dst_h as usize * 3,
    );
    let kernel = match case.kernel.as_str() {
        "bicubic" => Kernel::Bicubic,
        "lanczos" => Kernel::Lanczos,
        other => return Err(format!("{}: unknown kernel {other:?}", case.output)),
    };
    let fast =
        Resizer::with_kernel(case.src_w, case.src_h, case.dst_w, case.dst_h, kernel).unwrap();
    // The portable build too where AVX2 is used, on the smaller sources (an unoptimised test
    // build is slow; the unit tests compare the builds on more shapes).
    let small = sw * sh <= 640 * 480;
    let builds = if fast.uses_avx2() && small {
        vec![fast.clone(), fast.portable()]
    } else {
        vec![fast]
    };
    for mut r in builds {
        let what = format!(
            "{} {sw}x{sh} -> {}x{} {} ({} kernels)",
            case.source,
            case.dst_w,
            case.dst_h,
            case.kernel,
            if r.uses_avx2() { "AVX2" } else { "portable" }
        );
        let mut got = vec![0u8; r.dst_len()];
        r.resize(&src, sw * 3, &mut got).unwrap();
        let (max, n) = diff(&got, &want);
        if n > 0 {
            return Err(format!(
                "{what}: {n} of {} bytes differ, max |diff| {max}",
                want.len()
            ));
        }
        // Small sources again with padded rows (GStreamer pads RGB rows to 4 bytes, decoders to
        // more), through the same resizer: its buffers are reused. (Large ones only cost time in
        // a debug build; the stride handling does not depend on the size.)
        if small {
            let stride = (sw * 3).next_multiple_of(64) + 4;
            let mut padded = vec![0x5Au8; stride * sh];
            for (row, src_row) in padded
                .chunks_exact_mut(stride)
                .zip(src.chunks_exact(sw * 3))
            {
                row[..sw * 3].copy_from_slice(src_row);
            }
            let mut again = vec![0u8; r.dst_len()];
            r.resize(&padded[..stride * (sh - 1) + sw * 3], stride, &mut again)
                .unwrap();
            if again != got {
                return Err(format!("{what}: padded rows change the result"));
            }
        }
    }
    Ok(())
}

#[test]
fn matches_torch_bit_exactly() {
    let (dir, manifest) = fixtures();
    assert!(!manifest.cases.is_empty());
    // Cases split over the cores (the test runs unoptimised).
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let failures: Vec<String> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (dir, cases) = (&dir, &manifest.cases);
                s.spawn(move || {
                    cases
                        .iter()
                        .skip(t)
                        .step_by(threads)
                        .filter_map(|c| check(dir, c).err())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("worker"))
            .collect()
    });
    assert!(
        failures.is_empty(),
        "resize differs from torch {} ({}) in {} of {} cases:\n{}",
        manifest.torch,
        manifest.cpu_capability,
        failures.len(),
        manifest.cases.len(),
        failures.join("\n")
    );
}
