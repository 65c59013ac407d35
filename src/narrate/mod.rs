//! Narrate: when a camera speaks, and the narration itself
//! (docs/ARCHITECTURE.md, "Memory and live KV cache").
//!
//! Triggers, any combination per camera (`narrate = [...]`):
//! - `model`: after each frame the live cache's logits give the model's choice between
//!   `<|im_start|>` (speak) and `<|stream_start|>` (keep watching), VideoLLaMA3's streaming signal;
//!   it speaks when the speak share of the two exceeds `narrate_speak_threshold`, at most once per
//!   `narrate_cooldown_secs`.
//! - `change`: DiffFP's kept-token ratio above `change_start_ratio` for `change_frames` frames starts
//!   a change event (one narration); below `change_end_ratio` for as many frames ends it. The gap
//!   between the two levels is the hysteresis that keeps one event from narrating twice.
//! - `interval`: every `narrate_interval_secs` of stream time, if DiffFP saw motion (a frame kept
//!   more than `prune_min_tokens`) since the last narration.
//!
//! [`Narrator`] is the pure decision (testable without a model); [`generate_narration`] forks the
//! live cache and generates.

use crate::config::NarrateConfig;
use crate::generate::render::Role;
use crate::generate::{GenerateError, GenerateOptions, Generator, StopReason};
use crate::memory::LiveView;
mod narration;

pub use narration::{
    ChangeEvent, ChangeKind, EventType, Narration, SnapshotRef, Trigger, WatchAnswer,
};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant, SystemTime};

/// What the narrator needs to know about a frame.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FrameSignal {
    /// Stream time.
    pub pts: Duration,
    /// Wall-clock time.
    pub wall: SystemTime,
    /// Tokens DiffFP kept.
    pub kept: usize,
    /// Tokens before pruning.
    pub total: usize,
    /// A key frame (kept whole; says nothing about activity).
    pub key_frame: bool,
}

impl FrameSignal {
    /// Share of tokens kept.
    pub fn ratio(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.kept as f64 / self.total as f64
        }
    }
}

/// What one frame decided.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Observation {
    /// A change event started or ended at this frame.
    pub event: Option<ChangeKind>,
    /// A trigger asks for a narration now.
    pub fire: Option<Trigger>,
}

/// Change detection with hysteresis over DiffFP's kept-token ratio.
#[derive(Debug, Clone)]
pub struct ChangeDetector {
    start: f64,
    end: f64,
    frames: u32,
    active: bool,
    run: u32,
}

impl ChangeDetector {
    /// Starts above `start` for `frames` frames, ends below `end` for `frames` frames.
    pub fn new(start: f64, end: f64, frames: u32) -> ChangeDetector {
        ChangeDetector {
            start,
            end,
            frames: frames.max(1),
            active: false,
            run: 0,
        }
    }

    /// Whether a change is in progress.
    pub fn active(&self) -> bool {
        self.active
    }

    /// Feeds one non-key frame's ratio; returns the event it completes.
    pub fn push(&mut self, ratio: f64) -> Option<ChangeKind> {
        let toward = if self.active {
            ratio < self.end
        } else {
            ratio > self.start
        };
        if !toward {
            self.run = 0;
            return None;
        }
        self.run += 1;
        if self.run < self.frames {
            return None;
        }
        self.run = 0;
        self.active = !self.active;
        Some(if self.active {
            ChangeKind::Start
        } else {
            ChangeKind::End
        })
    }
}

/// A camera's "when to speak" state.
#[derive(Debug, Clone)]
pub struct Narrator {
    cfg: NarrateConfig,
    min_tokens: usize,
    change: ChangeDetector,
    /// Motion since the last narration (for the interval trigger).
    moved: bool,
    /// Stream time the interval counts from.
    interval_mark: Option<Duration>,
    last_spoke: Option<Duration>,
    /// First frame after the last narration: where the next narration's span starts.
    span_start: Option<(Duration, SystemTime)>,
}

impl Narrator {
    /// A narrator for a camera whose DiffFP keeps at least `min_tokens` per frame.
    pub fn new(cfg: NarrateConfig, min_tokens: usize) -> Narrator {
        Narrator {
            change: ChangeDetector::new(
                cfg.change_start_ratio,
                cfg.change_end_ratio,
                cfg.change_frames,
            ),
            cfg,
            min_tokens,
            moved: false,
            interval_mark: None,
            last_spoke: None,
            span_start: None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &NarrateConfig {
        &self.cfg
    }

    /// Feeds one frame; `speak` is the model's speak probability after it (model trigger only).
    pub fn observe(&mut self, f: &FrameSignal, speak: Option<f64>) -> Observation {
        let mut obs = Observation::default();
        if self.span_start.is_none() {
            self.span_start = Some((f.pts, f.wall));
        }
        let mark = *self.interval_mark.get_or_insert(f.pts);
        if !f.key_frame {
            if f.kept > self.min_tokens {
                self.moved = true;
            }
            obs.event = self.change.push(f.ratio());
        }
        let t = &self.cfg.triggers;
        let cooled = self
            .last_spoke
            .is_none_or(|last| f.pts.saturating_sub(last) >= self.cfg.cooldown);
        if t.model && cooled && speak.is_some_and(|p| p > self.cfg.speak_threshold) {
            obs.fire = Some(Trigger::Model);
        } else if t.change && obs.event == Some(ChangeKind::Start) {
            obs.fire = Some(Trigger::Change);
        } else if t.interval && f.pts.saturating_sub(mark) >= self.cfg.interval {
            self.interval_mark = Some(f.pts);
            if self.moved {
                obs.fire = Some(Trigger::Interval);
            }
        }
        obs
    }

    /// Records that a narration covering up to `pts` was produced (or skipped: its span is
    /// consumed either way, so the next one does not repeat it).
    pub fn spoke(&mut self, pts: Duration) {
        self.last_spoke = Some(pts);
        self.moved = false;
        self.span_start = None;
        self.interval_mark = Some(pts);
    }

    /// Where the next narration's span starts (the first frame since the last one).
    pub fn span_start(&self) -> Option<(Duration, SystemTime)> {
        self.span_start
    }
}

/// P(speak) from logits: the share of `<|im_start|>` among `<|im_start|>` and `<|stream_start|>`.
pub fn speak_probability(logits: &[f32], im_start: u32, stream_start: u32) -> Option<f64> {
    let a = f64::from(*logits.get(im_start as usize)?);
    let b = f64::from(*logits.get(stream_start as usize)?);
    let p = 1.0 / (1.0 + (b - a).exp());
    p.is_finite().then_some(p)
}

/// A finished narration's text and measurements.
#[derive(Debug, Clone)]
pub struct Generated {
    /// The text.
    pub text: String,
    /// Prompt positions (cache and narration prompt).
    pub prompt_tokens: usize,
    /// Generated tokens.
    pub generated_tokens: usize,
    /// From the start to the first token.
    pub first_token: Duration,
    /// From the start to the last token.
    pub total: Duration,
    /// Why generation stopped.
    pub stop: StopReason,
    /// `cancel` ended it before the model stopped (shutdown): the text is partial.
    pub cut: bool,
}

/// Generates a narration on a fork of the live cache, calling `on_delta` with each piece of text;
/// `cancel` ends it early (shutdown). The live cache itself is not changed: narrations are not fed
/// back into the stream, so the cache stays a function of the memory alone.
pub fn generate_narration(
    generator: &Generator,
    live: &LiveView,
    trigger: Trigger,
    cfg: &NarrateConfig,
    cancel: &AtomicBool,
    mut on_delta: impl FnMut(&str),
) -> Result<Generated, GenerateError> {
    let started = Instant::now();
    let format = crate::memory::stream_format(generator)?;
    let rendered = match trigger {
        // The model asked to speak: open its turn as it would have.
        Trigger::Model => format.speak(),
        Trigger::Change | Trigger::Interval => format.ask(Role::User, &cfg.prompt),
    };
    let hidden = generator.engines().decoder().hidden();
    let prompt = rendered.prompt(&[], hidden).map_err(|e| {
        GenerateError::Engine(crate::engine::EngineError::input("prompt", e.to_string()))
    })?;
    let opts = GenerateOptions {
        max_new_tokens: cfg.max_tokens as usize,
        ..GenerateOptions::default()
    };
    let d = generator.start(&live.cache, &prompt, &opts)?;
    let streamed = d.run(cancel, &mut on_delta)?;
    let (g, cut) = (streamed.generation, streamed.cut);
    let total = started.elapsed();
    Ok(Generated {
        text: g.text,
        prompt_tokens: live.cache.len() + g.prompt_tokens,
        generated_tokens: g.tokens.len(),
        first_token: g.first_token_time.unwrap_or(total),
        total,
        stop: g.stop,
        cut,
    })
}

/// Tokens the model may use for its `watch_for` answer.
pub const WATCH_MAX_TOKENS: u32 = 40;

/// Asks the model, on the same fork of the live cache as a narration, whether the footage shows
/// what the camera watches for; reads a yes or no and the reason.
pub fn answer_watch(
    generator: &Generator,
    live: &LiveView,
    watch_for: &str,
    cancel: &AtomicBool,
) -> Result<WatchAnswer, GenerateError> {
    let cfg = NarrateConfig {
        prompt: format!(
            "Does the video show {watch_for}? Answer yes or no, then say why in one sentence."
        ),
        max_tokens: WATCH_MAX_TOKENS,
        ..NarrateConfig::default()
    };
    let g = generate_narration(generator, live, Trigger::Change, &cfg, cancel, |_| {})?;
    Ok(WatchAnswer::parse(watch_for, &g.text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::NarrateTriggers;

    #[test]
    fn a_watch_answer_is_a_leading_yes_or_no_then_the_reason() {
        let a = WatchAnswer::parse("a person", " Yes, a man in a red coat stands at the door.");
        assert_eq!(a.answer, Some(true));
        assert_eq!(a.reason, "a man in a red coat stands at the door.");
        assert_eq!(a.watch_for, "a person");
        let b = WatchAnswer::parse("a person", "no. Only a cat crosses the yard");
        assert_eq!(
            (b.answer, b.reason.as_str()),
            (Some(false), "Only a cat crosses the yard")
        );
        // "Nobody" and "yesterday" are not answers; neither is nothing.
        for text in ["Nobody is there.", "Yesterday a van came.", ""] {
            let c = WatchAnswer::parse("a person", text);
            assert_eq!(c.answer, None, "{text}");
            assert_eq!(c.reason, text.trim());
        }
    }

    fn sig(t: u64, kept: usize) -> FrameSignal {
        FrameSignal {
            pts: Duration::from_secs(t),
            wall: SystemTime::UNIX_EPOCH,
            kept,
            total: 100,
            key_frame: false,
        }
    }

    fn cfg(model: bool, change: bool, interval: bool) -> NarrateConfig {
        NarrateConfig {
            triggers: NarrateTriggers {
                model,
                change,
                interval,
            },
            interval: Duration::from_secs(10),
            cooldown: Duration::from_secs(5),
            ..NarrateConfig::default()
        }
    }

    #[test]
    fn one_change_event_gives_one_narration_despite_flicker() {
        let mut n = Narrator::new(cfg(false, true, false), 1);
        // Quiet, then activity that flickers around the start level, then quiet again.
        let ratios = [1, 2, 40, 40, 20, 40, 15, 40, 12, 5, 30, 3, 2, 2, 1, 40, 50];
        let mut fired = Vec::new();
        let mut events = Vec::new();
        for (t, r) in ratios.iter().enumerate() {
            let o = n.observe(&sig(t as u64, *r), None);
            if let Some(f) = o.fire {
                fired.push((t, f));
                n.spoke(Duration::from_secs(t as u64));
            }
            if let Some(e) = o.event {
                events.push((t, e));
            }
        }
        // Start after two frames above 25 %; the dips to 20/15/12 % stay above the 10 % end level.
        assert_eq!(
            events,
            [
                (3, ChangeKind::Start),
                (12, ChangeKind::End),
                (16, ChangeKind::Start)
            ]
        );
        assert_eq!(fired, [(3, Trigger::Change), (16, Trigger::Change)]);
    }

    #[test]
    fn key_frames_are_not_activity() {
        let mut n = Narrator::new(cfg(false, true, true), 1);
        for t in 0..30 {
            let mut s = sig(t, 100);
            s.key_frame = true;
            assert_eq!(n.observe(&s, None), Observation::default());
        }
    }

    #[test]
    fn interval_fires_only_after_motion() {
        let mut n = Narrator::new(cfg(false, false, true), 1);
        let mut fired = Vec::new();
        for t in 0..60u64 {
            // Still for 25 s, then a little motion at 25 s, then still.
            let kept = if t == 25 { 3 } else { 1 };
            if n.observe(&sig(t, kept), None).fire.is_some() {
                fired.push(t);
                n.spoke(Duration::from_secs(t));
            }
        }
        assert_eq!(fired, [30]);
    }

    #[test]
    fn model_trigger_respects_threshold_and_cooldown() {
        let mut n = Narrator::new(cfg(true, false, false), 1);
        let p = [0.2, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.4, 0.8];
        let mut fired = Vec::new();
        for (t, p) in p.iter().enumerate() {
            if n.observe(&sig(t as u64, 1), Some(*p)).fire == Some(Trigger::Model) {
                fired.push(t);
                n.spoke(Duration::from_secs(t as u64));
            }
        }
        assert_eq!(fired, [1, 6]);
    }

    #[test]
    fn speak_probability_is_the_two_way_softmax() {
        let logits = [0.0f32, 2.0, 0.0];
        let p = speak_probability(&logits, 1, 2).unwrap();
        assert!((p - 1.0 / (1.0 + (-2.0f64).exp())).abs() < 1e-12);
        assert_eq!(speak_probability(&logits, 1, 7), None);
    }
}
