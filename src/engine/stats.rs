//! Work done by the three models: runs, items and time spent in ONNX Runtime, per stage.
//!
//! Plain relaxed atomics: the counters are only ever read as a whole for reporting, so a snapshot
//! may mix a run's count with the previous run's time, which no reader can tell apart from a
//! scrape a moment earlier. Recording is a few `fetch_add`s, cheap enough for every decode step.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Counters of one stage.
#[derive(Debug, Default)]
struct Stage {
    runs: AtomicU64,
    items: AtomicU64,
    nanos: AtomicU64,
}

impl Stage {
    fn record(&self, items: usize, elapsed: Duration) {
        self.runs.fetch_add(1, Ordering::Relaxed);
        self.items.fetch_add(items as u64, Ordering::Relaxed);
        // u64 nanoseconds last 584 years of engine time.
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    fn read(&self) -> (u64, u64, f64) {
        (
            self.runs.load(Ordering::Relaxed),
            self.items.load(Ordering::Relaxed),
            self.nanos.load(Ordering::Relaxed) as f64 / 1e9,
        )
    }
}

/// Live counters of engine work, shared by the vision encoder, the embedding and the decoder.
#[derive(Debug, Default)]
pub struct EngineStats {
    vision: Stage,
    embed: Stage,
    prefill: Stage,
    decode: Stage,
}

impl EngineStats {
    /// One successful vision encoder run over `frames` frames.
    pub(crate) fn record_vision(&self, frames: usize, elapsed: Duration) {
        self.vision.record(frames, elapsed);
    }

    /// One successful embedding run over `tokens` ids.
    pub(crate) fn record_embed(&self, tokens: usize, elapsed: Duration) {
        self.embed.record(tokens, elapsed);
    }

    /// One successful decoder run over `positions` new positions.
    pub(crate) fn record_decoder(&self, positions: usize, elapsed: Duration) {
        // A one-position run is what a decode step looks like; a one-token prompt chunk is rare
        // enough that counting it as a step does not skew either stage.
        if positions > 1 {
            self.prefill.record(positions, elapsed);
        } else {
            self.decode.record(positions, elapsed);
        }
    }

    /// The counters now.
    pub fn snapshot(&self) -> EngineStatsSnapshot {
        let (vision_runs, vision_frames, vision_seconds) = self.vision.read();
        let (embed_runs, embed_tokens, embed_seconds) = self.embed.read();
        let (prefill_runs, prefill_tokens, prefill_seconds) = self.prefill.read();
        let (decode_steps, _, decode_seconds) = self.decode.read();
        EngineStatsSnapshot {
            vision_runs,
            vision_frames,
            vision_seconds,
            embed_runs,
            embed_tokens,
            embed_seconds,
            prefill_runs,
            prefill_tokens,
            prefill_seconds,
            decode_steps,
            decode_seconds,
        }
    }
}

/// Engine work since load; counts only runs that succeeded, seconds are time inside ONNX Runtime.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct EngineStatsSnapshot {
    /// Vision encoder runs (one per batch of frames).
    pub vision_runs: u64,
    /// Frames encoded.
    pub vision_frames: u64,
    /// Time in vision encoder runs.
    pub vision_seconds: f64,
    /// Token embedding runs.
    pub embed_runs: u64,
    /// Token ids embedded.
    pub embed_tokens: u64,
    /// Time in embedding runs.
    pub embed_seconds: f64,
    /// Decoder runs over more than one position.
    pub prefill_runs: u64,
    /// Positions run by those.
    pub prefill_tokens: u64,
    /// Time in those.
    pub prefill_seconds: f64,
    /// Decoder runs over one position.
    pub decode_steps: u64,
    /// Time in those.
    pub decode_seconds: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoder_runs_of_one_position_are_steps_and_longer_ones_prefills() {
        let s = EngineStats::default();
        s.record_decoder(12, Duration::from_millis(30));
        s.record_decoder(1, Duration::from_millis(2));
        s.record_decoder(1, Duration::from_millis(3));
        s.record_vision(4, Duration::from_millis(10));
        s.record_vision(1, Duration::from_millis(5));
        s.record_embed(7, Duration::from_micros(500));
        let snap = s.snapshot();
        assert_eq!(
            snap,
            EngineStatsSnapshot {
                vision_runs: 2,
                vision_frames: 5,
                vision_seconds: snap.vision_seconds,
                embed_runs: 1,
                embed_tokens: 7,
                embed_seconds: snap.embed_seconds,
                prefill_runs: 1,
                prefill_tokens: 12,
                prefill_seconds: snap.prefill_seconds,
                decode_steps: 2,
                decode_seconds: snap.decode_seconds,
            }
        );
        assert!((snap.vision_seconds - 0.015).abs() < 1e-12);
        assert!((snap.embed_seconds - 0.0005).abs() < 1e-12);
        assert!((snap.prefill_seconds - 0.030).abs() < 1e-12);
        assert!((snap.decode_seconds - 0.005).abs() < 1e-12);
    }
}
