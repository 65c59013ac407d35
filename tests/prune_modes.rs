//! Adaptive and off modes (ours), mode parsing, backend choice and the batch API.

mod common;

use common::{Frame, Rng};
use edgevlm::prune::{Backend, BackendKind, NOISE_MARGIN_LEVELS, PruneMode, PruneParams, Pruner};

const W: usize = 336;
const H: usize = 196;

fn params(mode: PruneMode) -> PruneParams {
    PruneParams {
        mode,
        ..PruneParams::default()
    }
}

/// `base` plus independent uniform noise of ±2 grey levels per value.
fn noisy(base: &Frame, rng: &mut Rng) -> Frame {
    let mut f = base.clone();
    for v in &mut f.data {
        *v = (i16::from(*v) + rng.below(5) as i16 - 2).clamp(0, 255) as u8;
    }
    f
}

/// Smooth static scene away from the clipping ends, so noise stays symmetric.
fn scene() -> Frame {
    let mut f = Frame::grey(W, H, 0);
    for y in 0..H {
        for x in 0..W {
            for c in 0..3 {
                f.set(x, y, c, (40 + (x + 2 * y + 30 * c) % 170) as u8);
            }
        }
    }
    f
}

#[test]
fn noisy_static_frames_are_mostly_pruned_in_adaptive_mode_but_kept_in_reference_mode() {
    let mut rng = Rng(2024);
    let base = scene();
    let mut reference = Pruner::new(W, H, params(PruneMode::Reference)).unwrap();
    let mut adaptive = Pruner::new(W, H, params(PruneMode::Adaptive)).unwrap();
    let (mut ref_kept, mut ada_kept, mut frames) = (0, 0, 0);
    for t in 0..30 {
        let f = noisy(&base, &mut rng);
        let r = reference.push(&f.data, f.stride).unwrap().kept();
        let a = adaptive.push(&f.data, f.stride).unwrap();
        if t > 0 {
            ref_kept += r;
            ada_kept += a.kept();
            frames += 1;
            assert!(
                a.threshold_used() > 0.1,
                "adaptive must report its raised threshold"
            );
        }
    }
    let total = frames * 84;
    assert!(
        ref_kept * 100 >= total * 99,
        "reference keeps noise: {ref_kept}/{total}"
    );
    assert!(
        ada_kept * 10 <= total,
        "adaptive prunes noise: {ada_kept}/{total}"
    );
    // ±2 noise: E|n1 - n2| = 1.6 grey levels.
    let floor = adaptive.noise_floor().unwrap();
    assert!((1.4..1.7).contains(&floor), "noise floor {floor}");
}

#[test]
fn moving_bright_square_on_noise_is_always_kept_in_adaptive_mode() {
    let mut rng = Rng(7);
    let base = scene();
    let mut p = Pruner::new(W, H, params(PruneMode::Adaptive)).unwrap();
    let square = |f: &mut Frame, bx: usize| {
        for y in 56..112 {
            for x in bx * 28..bx * 28 + 56 {
                for c in 0..3 {
                    f.set(x, y, c, 250);
                }
            }
        }
    };
    let mut prev_bx = None;
    for t in 0..24 {
        // A 2x2-token square moving one token right per frame (bouncing).
        let bx = if (t / 10) % 2 == 0 {
            t % 10
        } else {
            10 - t % 10
        };
        let mut f = noisy(&base, &mut rng);
        square(&mut f, bx);
        let d = p.push(&f.data, f.stride).unwrap();
        if let Some(pb) = prev_bx {
            // Tokens the square entered or left (rows 2 and 3).
            for col in [pb, pb + 1, bx, bx + 1] {
                let inside_both = (bx..bx + 2).contains(&col) && (pb..pb + 2).contains(&col);
                if !inside_both {
                    for row in [2, 3] {
                        assert!(d.keep()[row * 12 + col], "frame {t}: token ({row}, {col})");
                    }
                }
            }
            assert!(d.kept() <= 12, "frame {t}: noise kept {} tokens", d.kept());
        }
        prev_bx = Some(bx);
    }
}

#[test]
fn block_brightened_by_two_levels_on_noise_is_kept_in_adaptive_mode() {
    // The noise floor is 1.6 levels; a uniform +2 brightening gives a block mean |Δu| of about
    // 2.3, above the threshold (1.25 * 1.6 = 2.0) and within the guaranteed margin.
    let mut rng = Rng(8);
    let base = scene();
    let mut p = Pruner::new(W, H, params(PruneMode::Adaptive)).unwrap();
    for _ in 0..10 {
        let f = noisy(&base, &mut rng);
        p.push(&f.data, f.stride).unwrap();
    }
    let floor = p.noise_floor().unwrap();
    assert!(
        2.0 * (floor + NOISE_MARGIN_LEVELS)
            > p.push(&noisy(&base, &mut rng).data, W * 3)
                .unwrap()
                .threshold_used()
    );
    let mut f = noisy(&base, &mut rng);
    for i in f.block_indices(28, 30) {
        f.data[i] += 2;
    }
    let d = p.push(&f.data, f.stride).unwrap();
    assert!(
        d.keep()[30],
        "score {} vs threshold {}",
        d.scores()[30],
        d.threshold_used()
    );
}

#[test]
fn quiet_camera_makes_adaptive_mode_equal_to_reference_mode() {
    // Synthetic content (no noise): most blocks are bit-identical, the floor is 0 and the
    // adaptive threshold stays at the reference 0.1, so masks are identical.
    let mut rng = Rng(9);
    let mut f = scene();
    let mut reference = Pruner::new(W, H, params(PruneMode::Reference)).unwrap();
    let mut adaptive = Pruner::new(W, H, params(PruneMode::Adaptive)).unwrap();
    for t in 0..15 {
        for _ in 0..3 {
            let n = rng.below(84) as usize;
            let count = 100 + rng.below(40) as usize;
            for i in f.block_indices(28, n).into_iter().take(count) {
                f.data[i] ^= 1;
            }
        }
        let r = reference.push(&f.data, f.stride).unwrap().clone();
        let a = adaptive.push(&f.data, f.stride).unwrap();
        assert_eq!(r.keep(), a.keep(), "frame {t}");
        assert_eq!(a.threshold_used(), 0.1);
    }
}

#[test]
fn off_mode_keeps_everything_and_still_flags_identical_frames() {
    let f = scene();
    let mut p = Pruner::new(W, H, params(PruneMode::Off)).unwrap();
    p.push(&f.data, f.stride).unwrap();
    let d = p.push(&f.data, f.stride).unwrap();
    assert_eq!(d.kept(), 84);
    assert!(d.identical());
    assert_eq!(d.threshold_used(), f32::NEG_INFINITY);
    assert_eq!(p.stats().kept_ratio(), 1.0);
}

#[test]
fn modes_parse_and_print_by_name() {
    for m in [PruneMode::Reference, PruneMode::Adaptive, PruneMode::Off] {
        assert_eq!(m.to_string().parse::<PruneMode>().unwrap(), m);
    }
    assert_eq!(
        "Adaptive".parse::<PruneMode>().unwrap(),
        PruneMode::Adaptive
    );
    let e = "fast".parse::<PruneMode>().unwrap_err();
    assert_eq!(
        e.to_string(),
        "unknown prune mode \"fast\": expected reference, adaptive or off"
    );
    assert_eq!(PruneParams::default().mode, PruneMode::Reference);
}

#[test]
fn backend_choice_explains_itself_in_one_line() {
    let (b, choice) = Backend::select(false);
    assert_eq!(b.kind(), BackendKind::Cpu);
    assert_eq!(
        choice.to_string(),
        "DiffFP SAD backend: cpu (GPU not requested)"
    );
    let (b, choice) = Backend::select(true);
    assert_eq!(b.kind(), choice.kind);
    assert!(!choice.to_string().contains('\n'));
}

#[test]
fn batches_give_the_same_decisions_as_single_pushes() {
    let mut rng = Rng(10);
    let frames: Vec<Frame> = (0..5)
        .map(|_| noisy(&scene(), &mut rng).padded(4, 0))
        .collect();
    let mut single = Pruner::new(W, H, PruneParams::default()).unwrap();
    let expected: Vec<_> = frames
        .iter()
        .map(|f| single.push(&f.data, f.stride).unwrap().clone())
        .collect();
    let mut batch = Pruner::with_backend(W, H, PruneParams::default(), &Backend::cpu(), 2).unwrap();
    let refs: Vec<&[u8]> = frames.iter().map(|f| f.data.as_slice()).collect();
    let mut got = Vec::new();
    batch
        .push_batch(&refs, frames[0].stride, |i, d| got.push((i, d.clone())))
        .unwrap();
    assert_eq!(got.len(), 5);
    for (i, d) in got {
        assert_eq!(d, expected[i]);
    }
    assert_eq!(batch.stats(), single.stats());
}

#[test]
fn a_bad_frame_in_a_batch_rejects_the_whole_batch() {
    let f = scene();
    let short = &f.data[..100];
    let mut p = Pruner::new(W, H, PruneParams::default()).unwrap();
    let mut calls = 0;
    let r = p.push_batch(&[&f.data, short], f.stride, |_, _| calls += 1);
    assert!(r.is_err());
    assert_eq!((calls, p.stats().frames), (0, 0));
}

#[test]
fn pruner_can_move_to_a_camera_thread() {
    fn assert_send<T: Send>() {}
    assert_send::<Pruner>();
    assert_send::<Backend>();
}
