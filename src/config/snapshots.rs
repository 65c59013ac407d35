//! `[snapshots]`: the picture published with each narration and change event.

use super::check_range;
use super::decode::{Fields, Sink};

/// Widest snapshot accepted (`max_width`).
pub const SNAPSHOT_MAX_WIDTH: u32 = 3840;
/// Narrowest snapshot accepted (`max_width`).
pub const SNAPSHOT_MIN_WIDTH: u32 = 32;

/// `[snapshots]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotConfig {
    /// Whether narrations and events carry a snapshot.
    pub enabled: bool,
    /// Snapshots wider than this are scaled down to it (never up: a snapshot is the sampled
    /// frame, at most its own size).
    pub max_width: u32,
    /// JPEG quality, 1–100.
    pub quality: u8,
    /// Draw DiffFP's decision on the snapshot (dropped tokens dimmed), for debugging.
    pub overlay: bool,
    /// Snapshots waiting to be encoded, at most; one more is dropped and counted.
    pub queue: usize,
}

impl Default for SnapshotConfig {
    fn default() -> Self {
        SnapshotConfig {
            enabled: true,
            max_width: 640,
            quality: 80,
            overlay: false,
            queue: 16,
        }
    }
}

pub(super) fn decode_snapshots(t: &toml::Table, sink: &mut Sink) -> SnapshotConfig {
    let d = SnapshotConfig::default();
    let mut f = Fields::new("snapshots", "snapshots", t);
    let enabled = f.get("enabled", d.enabled, sink);
    let max_width: u32 = f.get("max_width", d.max_width, sink);
    check_range(
        &f,
        "max_width",
        f64::from(max_width),
        f64::from(SNAPSHOT_MIN_WIDTH),
        f64::from(SNAPSHOT_MAX_WIDTH),
        sink,
    );
    let quality: u8 = f.get("quality", d.quality, sink);
    check_range(&f, "quality", f64::from(quality), 1.0, 100.0, sink);
    let overlay = f.get("overlay", d.overlay, sink);
    let queue: u32 = f.get("queue", d.queue as u32, sink);
    check_range(&f, "queue", f64::from(queue), 1.0, 1024.0, sink);
    f.finish(sink);
    SnapshotConfig {
        enabled,
        max_width,
        quality,
        overlay,
        queue: queue as usize,
    }
}
