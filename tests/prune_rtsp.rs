//! DiffFP end to end: an RTSP camera (x264) with a static background and a moving ball.

mod common;

use common::{CameraSpec, RtspServer, wait_until};
use edgevlm::config::Config;
use edgevlm::ring::Frame;
use edgevlm::supervisor::Supervisor;
use std::time::Duration;

/// Brightest channel value of token block `b` (28x28) of a frame.
fn block_max(f: &Frame, b: usize) -> u8 {
    let cols = f.width as usize / 28;
    let (bx, by) = ((b % cols) * 28, (b / cols) * 28);
    let row = f.width as usize * 3;
    (by..by + 28)
        .flat_map(|y| {
            f.rgb[y * row + bx * 3..y * row + (bx + 28) * 3]
                .iter()
                .copied()
        })
        .max()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_background_is_pruned_and_the_moving_ball_is_kept() {
    let server = RtspServer::start(CameraSpec {
        pattern: "ball".into(),
        ..CameraSpec::default()
    });
    let cfg = Config::parse(
        &format!(
            "[[cameras]]\nid = \"ball\"\nuri = \"{}\"\nsample_fps = 3\nwidth = 308\nheight = 224\n",
            server.url()
        ),
        None,
    )
    .unwrap();
    let sup = Supervisor::start(&cfg);
    let cam = sup.camera("ball").unwrap();
    assert!(wait_until(Duration::from_secs(30), || cam.window.info().frames >= 10).await);
    let frames = cam.window.last(10);

    let (mut dark, mut dark_pruned, mut moved, mut moved_kept) = (0, 0, 0, 0);
    for pair in frames.windows(2) {
        let (prev, cur) = (&pair[0], &pair[1]);
        let mask = cur.tokens.as_ref().expect("every frame carries a mask");
        assert_eq!(mask.keep.len(), 11 * 8);
        assert!(!mask.key_frame);
        assert_eq!(mask.kept, mask.keep.iter().filter(|&&k| k).count());
        for b in 0..mask.keep.len() {
            let (was, is) = (block_max(prev, b), block_max(cur, b));
            if was < 40 && is < 40 && b != 0 {
                // Black in both frames: H.264 skip blocks decode to identical pixels.
                dark += 1;
                dark_pruned += usize::from(!mask.keep[b]);
            }
            if (was > 160) != (is > 160) {
                // The ball entered or left this block.
                moved += 1;
                moved_kept += usize::from(mask.keep[b]);
            }
        }
    }
    assert!(
        dark > 100,
        "the pattern has a static background ({dark} blocks)"
    );
    assert!(moved > 0, "the ball moved between samples");
    assert_eq!(
        moved_kept, moved,
        "every block the ball entered or left is kept"
    );
    assert!(
        dark_pruned * 100 >= dark * 95,
        "only {dark_pruned} of {dark} static blocks pruned"
    );
    let c = cam.shared.counters.snapshot();
    assert!(c.kept_ratio() < 0.5, "kept ratio {}", c.kept_ratio());
    assert_eq!(cam.shared.counters.prune_threshold(), Some(0.1));
    sup.shutdown(Duration::from_secs(10)).await;
}
