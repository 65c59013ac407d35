//! Watching: each camera's narration keys, `[memory]` (the visual-token memory and live KV cache)
//! and `[query]` (questions over recent footage).

use super::decode::{Fields, Sink};
use super::{check_range, ranged, secs};
use std::time::Duration;

/// Which triggers make a camera speak (any combination; none: the camera never narrates).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NarrateTriggers {
    /// The model's own choice between speaking and watching (streaming format).
    pub model: bool,
    /// A change event from DiffFP activity, one narration per event.
    pub change: bool,
    /// Every `narrate_interval_secs`, if DiffFP saw motion since the last narration.
    pub interval: bool,
}

impl NarrateTriggers {
    /// Whether any trigger is on.
    pub fn any(&self) -> bool {
        self.model || self.change || self.interval
    }
}

/// A camera's narration settings.
#[derive(Debug, Clone, PartialEq)]
pub struct NarrateConfig {
    /// The triggers (`narrate = ["change", "interval", "model"]`).
    pub triggers: NarrateTriggers,
    /// Period of the interval trigger, in stream time.
    pub interval: Duration,
    /// The model speaks when P(`<|im_start|>`) / (P(`<|im_start|>`) + P(`<|stream_start|>`))
    /// exceeds this.
    pub speak_threshold: f64,
    /// Least stream time between two narrations of the model trigger.
    pub cooldown: Duration,
    /// Kept-token ratio above which frames count as activity (change starts).
    pub change_start_ratio: f64,
    /// Kept-token ratio below which frames count as quiet (change ends); below the start ratio.
    pub change_end_ratio: f64,
    /// Consecutive frames needed to start or end a change.
    pub change_frames: u32,
    /// Most tokens a narration may have.
    pub max_tokens: u32,
    /// The instruction for change and interval narrations (the model trigger needs none).
    pub prompt: String,
    /// What the camera watches for (`watch_for = "a person at the door"`): after each
    /// narration the model is asked whether the footage shows it, yes or no and why.
    pub watch_for: Option<String>,
}

/// Longest `watch_for`, in characters: it is put in a question after every narration, and a short
/// description is what a small model answers best.
pub const WATCH_FOR_MAX_CHARS: usize = 200;

impl Default for NarrateConfig {
    fn default() -> Self {
        NarrateConfig {
            triggers: NarrateTriggers {
                change: true,
                ..NarrateTriggers::default()
            },
            interval: Duration::from_secs(30),
            speak_threshold: 0.5,
            cooldown: Duration::from_secs(5),
            change_start_ratio: 0.25,
            change_end_ratio: 0.1,
            change_frames: 2,
            max_tokens: 64,
            prompt: "Describe what just happened in the video.".into(),
            watch_for: None,
        }
    }
}

/// `[memory]`: how each camera keeps its encoded footage and its live KV cache.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryConfig {
    /// Context positions kept free after the live cache for a question and its answer.
    pub reserve_tokens: u32,
    /// Share of the window that may be evicted (or of the budget exceeded) before the live cache
    /// is rebuilt from memory.
    pub rebuild_slack: f64,
    /// System message of every camera's stream; `None`: the model's default.
    pub system_prompt: Option<String>,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            reserve_tokens: 1024,
            rebuild_slack: 0.25,
            system_prompt: None,
        }
    }
}

/// How a camera's live KV cache stays within its position budget (`cache_policy`;
/// docs/ARCHITECTURE.md, "Cache policies").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CachePolicy {
    /// Frames that left the window or no longer fit stay until they amount to
    /// `memory.rebuild_slack`; then the cache is rebuilt from memory in one prefill.
    #[default]
    Window,
    /// The system turn stays (the attention sinks); the oldest frame items are evicted from the
    /// cache itself, the kept positions renumbered by rotary (never recomputed).
    SinkRecent,
    /// InfiniPot-V's compression: over the budget, the visual tokens of older frames are
    /// dropped from the cache itself, the most temporally redundant and lowest value-norm first,
    /// so old footage thins out instead of disappearing (positions renumbered by rotary).
    Compress,
}

impl CachePolicy {
    /// The name in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            CachePolicy::Window => "window",
            CachePolicy::SinkRecent => "sink_recent",
            CachePolicy::Compress => "compress",
        }
    }
}

/// A camera's live cache (`cache_policy`, `cache_budget`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheConfig {
    /// How the cache stays within its budget.
    pub policy: CachePolicy,
    /// Most positions the camera's cache may hold; `None`: the model's context less
    /// `memory.reserve_tokens` (the most it can be), and never more than that.
    pub budget: Option<u32>,
}

/// Fewest positions a `cache_budget` may give (a system turn and one small frame); whether one
/// frame of the camera fits is checked when the model is loaded.
pub const MIN_CACHE_BUDGET: u32 = 64;

/// Decodes a camera's cache keys.
pub(super) fn decode_cache(f: &mut Fields<'_>, sink: &mut Sink) -> CacheConfig {
    let policy = f.choice(
        "cache_policy",
        &[
            ("window", CachePolicy::Window),
            ("sink_recent", CachePolicy::SinkRecent),
            ("compress", CachePolicy::Compress),
        ],
        CachePolicy::Window,
        sink,
    );
    let budget: Option<u32> = f.opt("cache_budget", sink);
    if let Some(b) = budget
        && b < MIN_CACHE_BUDGET
    {
        sink.error(
            f.path_of("cache_budget"),
            format!("must be at least {MIN_CACHE_BUDGET} positions, got {b}"),
        );
    }
    CacheConfig { policy, budget }
}

/// `[query]`: questions over recent footage.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryConfig {
    /// Questions generated at the same time; more wait (up to `mqtt.query_queue`) or get `busy`.
    pub concurrency: u32,
    /// Tokens of an answer when the question does not say.
    pub max_tokens: u32,
    /// Conversations remembered for follow-ups (least recently used forgotten first).
    pub conversations: u32,
    /// A conversation unused this long is forgotten.
    pub conversation_ttl: Duration,
}

impl Default for QueryConfig {
    fn default() -> Self {
        QueryConfig {
            concurrency: 1,
            max_tokens: 256,
            conversations: 16,
            conversation_ttl: Duration::from_secs(600),
        }
    }
}

/// Decodes a camera's narration keys.
pub(super) fn decode_narrate(f: &mut Fields<'_>, sink: &mut Sink) -> NarrateConfig {
    let d = NarrateConfig::default();
    let triggers = decode_triggers(f, d.triggers, sink);
    let interval = ranged(
        f,
        "narrate_interval_secs",
        d.interval.as_secs_f64(),
        1.0,
        86_400.0,
        sink,
    );
    let speak_threshold = ranged(
        f,
        "narrate_speak_threshold",
        d.speak_threshold,
        0.0,
        1.0,
        sink,
    );
    let cooldown = ranged(
        f,
        "narrate_cooldown_secs",
        d.cooldown.as_secs_f64(),
        0.0,
        86_400.0,
        sink,
    );
    let change = decode_change(f, &d, sink);
    let max_tokens: u32 = f.get("narrate_max_tokens", d.max_tokens, sink);
    check_range(
        f,
        "narrate_max_tokens",
        f64::from(max_tokens),
        1.0,
        4096.0,
        sink,
    );
    let prompt: String = f.get("narrate_prompt", d.prompt.clone(), sink);
    if prompt.trim().is_empty() {
        sink.error(f.path_of("narrate_prompt"), "must not be empty");
    }
    let watch_for = f
        .opt::<String>("watch_for", sink)
        .map(|w| w.trim().to_string());
    if let Some(w) = &watch_for {
        let n = w.chars().count();
        if n == 0 || n > WATCH_FOR_MAX_CHARS || w.chars().any(char::is_control) {
            sink.error(
                f.path_of("watch_for"),
                format!(
                    "must be 1-{WATCH_FOR_MAX_CHARS} characters without control characters (a short description such as \"a person at the door\"), got {n}"
                ),
            );
        }
    }
    NarrateConfig {
        triggers,
        interval: secs(interval, d.interval),
        speak_threshold,
        cooldown: secs(cooldown, d.cooldown),
        change_start_ratio: change.start_ratio,
        change_end_ratio: change.end_ratio,
        change_frames: change.frames,
        max_tokens: max_tokens.max(1),
        prompt,
        watch_for,
    }
}

/// `narrate`: any of "model", "change", "interval"; absent gives `default`.
fn decode_triggers(
    f: &mut Fields<'_>,
    default: NarrateTriggers,
    sink: &mut Sink,
) -> NarrateTriggers {
    let Some(list) = f.opt::<Vec<String>>("narrate", sink) else {
        return default;
    };
    let mut t = NarrateTriggers::default();
    for name in &list {
        match name.as_str() {
            "model" => t.model = true,
            "change" => t.change = true,
            "interval" => t.interval = true,
            other => sink.error(
                f.path_of("narrate"),
                format!(
                    "unknown trigger `{other}`; expected any of \"model\", \"change\", \"interval\" (or [] for none)"
                ),
            ),
        }
    }
    t
}

/// When DiffFP activity counts as a change: the start and end ratios (end below start) and the
/// frames that confirm either.
struct ChangeDetection {
    start_ratio: f64,
    end_ratio: f64,
    frames: u32,
}

fn decode_change(f: &mut Fields<'_>, d: &NarrateConfig, sink: &mut Sink) -> ChangeDetection {
    let start = ranged(
        f,
        "change_start_ratio",
        d.change_start_ratio,
        0.0,
        1.0,
        sink,
    );
    let end = ranged(f, "change_end_ratio", d.change_end_ratio, 0.0, 1.0, sink);
    if end.is_finite() && start.is_finite() && end >= start {
        sink.error(
            f.path_of("change_end_ratio"),
            format!(
                "must be below change_start_ratio ({start}) so one change gives one narration, got {end}"
            ),
        );
    }
    let frames: u32 = f.get("change_frames", d.change_frames, sink);
    check_range(f, "change_frames", f64::from(frames), 1.0, 100.0, sink);
    ChangeDetection {
        start_ratio: start,
        end_ratio: end,
        frames: frames.max(1),
    }
}

/// Decodes `[memory]`.
pub(super) fn decode_memory(t: &toml::Table, sink: &mut Sink) -> MemoryConfig {
    let d = MemoryConfig::default();
    let mut f = Fields::new("memory", "memory", t);
    let reserve_tokens: u32 = f.get("reserve_tokens", d.reserve_tokens, sink);
    check_range(
        &f,
        "reserve_tokens",
        f64::from(reserve_tokens),
        16.0,
        1e6,
        sink,
    );
    let rebuild_slack: f64 = f.get("rebuild_slack", d.rebuild_slack, sink);
    check_range(&f, "rebuild_slack", rebuild_slack, 0.0, 1.0, sink);
    let system_prompt: Option<String> = f.opt("system_prompt", sink);
    f.finish(sink);
    MemoryConfig {
        reserve_tokens,
        rebuild_slack,
        system_prompt,
    }
}

/// Decodes `[query]`.
pub(super) fn decode_query(t: &toml::Table, sink: &mut Sink) -> QueryConfig {
    let d = QueryConfig::default();
    let mut f = Fields::new("query", "query", t);
    let concurrency: u32 = f.get("concurrency", d.concurrency, sink);
    check_range(&f, "concurrency", f64::from(concurrency), 1.0, 64.0, sink);
    let max_tokens: u32 = f.get("max_tokens", d.max_tokens, sink);
    check_range(&f, "max_tokens", f64::from(max_tokens), 1.0, 4096.0, sink);
    let conversations: u32 = f.get("conversations", d.conversations, sink);
    check_range(
        &f,
        "conversations",
        f64::from(conversations),
        0.0,
        4096.0,
        sink,
    );
    let ttl: f64 = f.get(
        "conversation_ttl_secs",
        d.conversation_ttl.as_secs_f64(),
        sink,
    );
    check_range(&f, "conversation_ttl_secs", ttl, 1.0, 86_400.0, sink);
    f.finish(sink);
    QueryConfig {
        concurrency: concurrency.max(1),
        max_tokens: max_tokens.max(1),
        conversations,
        conversation_ttl: Duration::try_from_secs_f64(ttl).unwrap_or(d.conversation_ttl),
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{CacheConfig, CachePolicy, Config, errors};
    use std::time::Duration;

    const CAM: &str = "[[cameras]]\nid = \"a\"\nuri = \"test://ball\"\n";

    #[test]
    fn narration_keys_decode_and_default_to_change_only() {
        let c = Config::parse(CAM, None).unwrap();
        let n = &c.cameras[0].narrate;
        assert!(n.triggers.change && !n.triggers.model && !n.triggers.interval);
        let c = Config::parse(
            &format!("{CAM}narrate = [\"model\", \"interval\"]\nnarrate_interval_secs = 12\n"),
            None,
        )
        .unwrap();
        let n = &c.cameras[0].narrate;
        assert!(n.triggers.model && n.triggers.interval && !n.triggers.change);
        assert_eq!(n.interval, Duration::from_secs(12));
        let c = Config::parse(&format!("{CAM}narrate = []\n"), None).unwrap();
        assert!(!c.cameras[0].narrate.triggers.any());
    }

    #[test]
    fn watching_problems_are_reported_with_their_paths() {
        let errs = errors(&format!(
            "[memory]\nrebuild_slack = 2\n[query]\nconcurrency = 0\nmax_token = 3\n{CAM}\
             narrate = [\"speech\"]\nchange_start_ratio = 0.1\nchange_end_ratio = 0.3\n\
             narrate_prompt = \" \"\n"
        ));
        for e in [
            "memory.rebuild_slack: must be between 0 and 1, got 2",
            "query.concurrency: must be between 1 and 64, got 0",
            "query.max_token: unknown key; did you mean `max_tokens`?",
            "cameras[0].narrate: unknown trigger `speech`",
            "cameras[0].change_end_ratio: must be below change_start_ratio (0.1)",
            "cameras[0].narrate_prompt: must not be empty",
        ] {
            assert!(
                errs.iter().any(|x| x.starts_with(e)),
                "missing {e:?} in {errs:#?}"
            );
        }
    }

    #[test]
    fn a_camera_chooses_its_cache_policy_and_budget() {
        let c = Config::parse(CAM, None).unwrap();
        assert_eq!(c.cameras[0].cache, CacheConfig::default());
        let c = Config::parse(
            &format!("{CAM}cache_policy = \"sink_recent\"\ncache_budget = 2000\n"),
            None,
        )
        .unwrap();
        assert_eq!(
            c.cameras[0].cache,
            CacheConfig {
                policy: CachePolicy::SinkRecent,
                budget: Some(2000)
            }
        );
    }

    #[test]
    fn cache_problems_are_reported_with_their_paths() {
        let errs = errors(&format!(
            "{CAM}cache_policy = \"lru\"\ncache_budget = 10\n\
             [[cameras]]\nid = \"b\"\nuri = \"test://ball\"\nwidth = 448\nheight = 252\ncache_budget = 100\n"
        ));
        for e in [
            "cameras[0].cache_policy: ",
            "cameras[0].cache_budget: must be at least 64 positions, got 10",
            "cameras[1].cache_budget: 100 positions cannot hold one 448x252 frame (144 visual tokens) \
             and the prompt around it: give at least 208",
        ] {
            assert!(
                errs.iter().any(|x| x.starts_with(e)),
                "missing {e:?} in {errs:#?}"
            );
        }
        assert!(
            errs.iter()
                .any(|x| x.contains("lru") && x.contains("sink_recent")),
            "{errs:#?}"
        );
    }
}
