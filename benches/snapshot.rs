//! Snapshot cost (src/evidence/picture.rs): one sampled frame at a model geometry made into a JPEG
//! at quality 80, as the `snapshots` thread does for every narration and event; with the DiffFP
//! overlay, and scaled down to a smaller `max_width`. Throughput is the frame's RGB bytes.
//!
//! Run: `cargo bench --bench snapshot -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use edgevlm::evidence::picture;
use edgevlm::ring::{Frame, TokenMask};

/// Model geometries of common cameras (docs/CONFIG.md, `[vision]`): 1080p and 720p sources.
const CASES: [(u32, u32); 2] = [(336, 196), (616, 336)];

fn frame(width: u32, height: u32) -> Arc<Frame> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let rgb: Vec<u8> = (0..width as usize * height as usize * 3)
        .map(|i| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // Smooth ramps with sensor-like noise.
            ((i / 3 % width as usize) as u64 * 255 / u64::from(width) + (state & 15)) as u8
        })
        .collect();
    let tokens = (width / 28 * (height / 28)) as usize;
    let keep: Box<[bool]> = (0..tokens).map(|i| i % 3 == 0).collect();
    Arc::new(Frame {
        camera: "bench".into(),
        seq: 1,
        pts: Duration::from_secs(1),
        wall_time: SystemTime::now(),
        width,
        height,
        rgb: rgb.into(),
        tokens: Some(TokenMask {
            kept: keep.iter().filter(|k| **k).count(),
            keep,
            key_frame: false,
            identical: false,
            threshold: 0.1,
        }),
    })
}

fn snapshot(c: &mut Criterion) {
    for (w, h) in CASES {
        let f = frame(w, h);
        let mut group = c.benchmark_group(format!("snapshot/{w}x{h}"));
        group.throughput(Throughput::Bytes(f.rgb.len() as u64));
        group.bench_function("jpeg", |b| {
            b.iter(|| black_box(picture::encode(black_box(&f), 3840, 80, false).unwrap()))
        });
        group.bench_function("jpeg+overlay", |b| {
            b.iter(|| black_box(picture::encode(black_box(&f), 3840, 80, true).unwrap()))
        });
        group.bench_function("jpeg@160w", |b| {
            b.iter(|| black_box(picture::encode(black_box(&f), 160, 80, false).unwrap()))
        });
        let (jpeg, _, _) = picture::encode(&f, 3840, 80, false).unwrap();
        eprintln!("snapshot/{w}x{h}: {} bytes at quality 80", jpeg.len());
        group.finish();
    }
}

criterion_group!(benches, snapshot);
criterion_main!(benches);
