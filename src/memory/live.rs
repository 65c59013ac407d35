//! The live KV cache of a camera: the system turn, then one streaming item per frame
//! (`<|stream_start|>stream\n` + kept tokens + `\n<|stream_end|>\n`), extended by incremental
//! prefill as frames arrive and rebuilt from memory with slack.
//!
//! Policy (docs/ARCHITECTURE.md, "Memory and live KV cache"): appending a frame costs one prefill
//! of that frame's item only. Frames evicted from memory stay in the cache until they amount to
//! `rebuild_slack` of the window; the cache must also leave `reserve_tokens` of the context free.
//! When either limit is crossed, the cache is rebuilt from memory in one prefill, keeping only as
//! many of the newest frames as fit in `(1 - rebuild_slack)` of the budget, so the next rebuild is
//! at least a slack's worth of frames away.
//!
//! Under `cache_policy = "sink_recent"` the cache is never rebuilt after it is first built: the
//! system turn stays (the attention sinks of StreamingLLM/StreamingVLM), and the same two limits
//! evict the oldest frame items from the cache itself, the positions after them renumbered down
//! by turning their keys back (RoPE: [`crate::engine::Rope`]), so the positions stay contiguous
//! and below the budget whatever the stream's length, and nothing is recomputed.

use super::MemoryFrame;
use crate::config::CachePolicy;
use crate::generate::render::{self, Rendered};
use crate::generate::{GenerateError, Generator, KvCache};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// Why the live cache was rebuilt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RebuildReason {
    /// The first build, or after an error.
    Initial,
    /// Frames evicted from memory exceeded the slack.
    Slid,
    /// The next frame would not fit in the context budget.
    Budget,
}

/// One frame the cache holds.
#[derive(Debug, Clone)]
struct Covered {
    seq: u64,
    pts: Duration,
    wall: SystemTime,
    visual: usize,
    /// Positions of its streaming item (template text and kept tokens).
    positions: usize,
    /// Where in the frame (raster token index) each of its visual tokens in the cache is from.
    spatial: Arc<[u32]>,
}

impl Covered {
    fn of(f: &MemoryFrame, positions: usize) -> Covered {
        let spatial: Arc<[u32]> = match &f.keep {
            Some(keep) => keep
                .iter()
                .enumerate()
                .filter(|(_, k)| **k)
                .map(|(i, _)| i as u32)
                .collect(),
            None => (0..f.total as u32).collect(),
        };
        Covered {
            seq: f.seq,
            pts: f.pts,
            wall: f.wall,
            visual: f.kept(),
            positions,
            spatial,
        }
    }

    /// Where its visual tokens start, for an item at `start` whose text after them is `tail`
    /// positions long.
    fn visual_start(&self, start: usize, tail: usize) -> usize {
        start + self.positions - self.visual - tail
    }
}

/// A read-only view of the live cache, as published after each update (cheap to clone: the
/// tensors are shared).
#[derive(Debug, Clone)]
pub struct LiveView {
    /// The cache (system turn and frame items).
    pub cache: KvCache,
    /// Sequence number of the last frame in it, if any.
    pub last_seq: Option<u64>,
    /// Stream time of the first and last frame in it.
    pub span: Option<(Duration, Duration)>,
    /// Wall-clock times of the first and last frame in it.
    pub wall_span: Option<(SystemTime, SystemTime)>,
    /// Frames in it.
    pub frames: usize,
    /// Visual tokens in it.
    pub visual_tokens: usize,
    /// Logits after its last position (the model's next-token choice after the last frame).
    pub logits: Arc<[f32]>,
}

/// Settings of a live cache.
#[derive(Debug, Clone)]
pub struct LiveOptions {
    /// System message (`None`: none).
    pub system: Option<String>,
    /// Most positions the cache may hold (the model's context minus the reserve).
    pub budget: usize,
    /// Share of the window (frames) or budget allowed to go stale before a rebuild.
    pub slack: f64,
    /// Frames the camera's window holds.
    pub window_frames: usize,
    /// How the cache stays within the budget.
    pub policy: CachePolicy,
}

/// A camera's live cache and its bookkeeping.
#[derive(Debug)]
pub struct LiveCache {
    opts: LiveOptions,
    cache: KvCache,
    logits: Arc<[f32]>,
    covered: VecDeque<Covered>,
    /// Positions of the system turn.
    prefix: usize,
    /// Positions of one frame item's template text.
    template: usize,
    /// Positions of the text after a frame item's visual tokens (`\n<|stream_end|>\n`).
    tail: usize,
    rebuilds: u64,
    last_rebuild: Option<(RebuildReason, Duration)>,
    evictions: Evictions,
    told_too_small: bool,
}

/// Frame items evicted from the cache in place (`sink_recent`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Evictions {
    /// Evictions so far.
    pub count: u64,
    /// Frames evicted so far.
    pub frames: u64,
    /// Positions evicted so far.
    pub positions: u64,
    /// Visual tokens dropped from frames that stay (`compress`).
    pub tokens: u64,
    /// How long the last one took (the copy of the kept positions).
    pub last: Option<Duration>,
}

/// The system turn of a stream, as a cache (and the logits after it, if it has positions).
fn prefix_cache(
    generator: &Generator,
    system: Option<&str>,
) -> Result<(KvCache, Arc<[f32]>), GenerateError> {
    let empty = generator.empty_cache()?;
    let prefix = stream_format(generator)?.prefix(system);
    if prefix.segments().is_empty() {
        return Ok((empty, Arc::from(Vec::new())));
    }
    let hidden = generator.engines().decoder().hidden();
    let prompt = prefix.prompt(&[], hidden).map_err(render_bug)?;
    let p = generator.prefill(&empty, &prompt)?;
    Ok((p.cache, p.logits.into()))
}

/// The model family's streaming format (`family`), or an engine input error naming why it has
/// none (the runtime refuses such a model before any camera starts).
pub(crate) fn stream_format(
    generator: &Generator,
) -> Result<&'static dyn crate::family::StreamFormat, GenerateError> {
    crate::family::stream(generator.engines().manifest().family)
        .map_err(|why| GenerateError::Engine(crate::engine::EngineError::input("prompt", why)))
}

fn render_bug(e: render::RenderError) -> GenerateError {
    // Memory frames always keep >= 1 token and are in time order, so a render cannot fail; if it
    // does, say so as an engine input error rather than panic.
    GenerateError::Engine(crate::engine::EngineError::input(
        "prompt",
        format!("cannot render the stream: {e}"),
    ))
}

/// Token ids, template text, frames as streaming items and more text, in that order: a prompt to
/// prefill after a cache (a question, a follow-up, a rebuild).
#[derive(Debug, Default)]
pub(crate) struct StreamPrompt {
    /// Token ids first (a conversation's unfed tokens).
    pub tokens: Vec<u32>,
    /// Renders before the frames (system turn, the end of the previous turn).
    pub head: Vec<Rendered>,
    /// The frames.
    pub frames: Vec<Arc<MemoryFrame>>,
    /// Renders after the frames (the question and the assistant's turn opening).
    pub tail: Vec<Rendered>,
}

impl StreamPrompt {
    /// The prompt for `generator`'s model, borrowing the frames' features.
    pub fn prompt(
        &self,
        generator: &Generator,
    ) -> Result<crate::generate::Prompt<'_>, GenerateError> {
        let hidden = generator.engines().decoder().hidden();
        let timestamps = stream_timestamps(generator);
        let format = stream_format(generator)?;
        let mut prompt = crate::generate::Prompt::new();
        if !self.tokens.is_empty() {
            prompt.tokens(&self.tokens[..]);
        }
        for r in &self.head {
            prompt.extend(r.prompt(&[], hidden).map_err(render_bug)?);
        }
        for f in &self.frames {
            // The item renders borrow nothing from the frame but its features.
            let time = timestamps.then(|| (f.pts.as_secs_f64(), f.end.as_secs_f64()));
            let item = format.item(f.kept(), time).map_err(render_bug)?;
            let p = item.prompt(&[&f.tokens[..]], hidden).map_err(render_bug)?;
            for piece in p.pieces() {
                prompt.push(match piece {
                    crate::generate::Piece::Text(t, m) => {
                        crate::generate::Piece::Text(std::borrow::Cow::Owned(t.to_string()), *m)
                    }
                    crate::generate::Piece::Tokens(t) => {
                        crate::generate::Piece::Tokens(std::borrow::Cow::Owned(t.to_vec()))
                    }
                    crate::generate::Piece::Visual(_) => crate::generate::Piece::Visual(&f.tokens),
                });
            }
        }
        for r in &self.tail {
            prompt.extend(r.prompt(&[], hidden).map_err(render_bug)?);
        }
        Ok(prompt)
    }
}

/// Appends `frames` as streaming items to `cache` in one prefill; returns the longer cache, the
/// logits after it and the positions of each frame's item.
pub(crate) fn append_frames(
    generator: &Generator,
    cache: &KvCache,
    frames: &[Arc<MemoryFrame>],
) -> Result<(KvCache, Vec<f32>, Vec<usize>), GenerateError> {
    // Each item embedded on its own (text is tokenised piece by piece either way, so the ids are
    // those of one prompt), to know where each item's positions are; one decoder prefill.
    let mut embeds = Vec::new();
    let mut lengths = Vec::with_capacity(frames.len());
    for f in frames {
        let sp = StreamPrompt {
            frames: vec![f.clone()],
            ..StreamPrompt::default()
        };
        let (e, n) = generator.embed_prompt(&sp.prompt(generator)?)?;
        embeds.extend_from_slice(&e);
        lengths.push(n);
    }
    let (cache, logits) = generator.prefill_embeds(cache, &embeds, lengths.iter().sum())?;
    Ok((cache, logits, lengths))
}

impl LiveCache {
    /// A cache holding only the system turn.
    pub fn new(generator: &Generator, opts: LiveOptions) -> Result<LiveCache, GenerateError> {
        let (cache, logits) = prefix_cache(generator, opts.system.as_deref())?;
        Ok(LiveCache {
            prefix: cache.len(),
            template: template_positions(generator),
            tail: tail_positions(generator),
            opts,
            cache,
            logits,
            covered: VecDeque::new(),
            rebuilds: 0,
            last_rebuild: None,
            evictions: Evictions::default(),
            told_too_small: false,
        })
    }

    /// Appends new frames (oldest first, all newer than what the cache holds) by incremental
    /// prefill, rebuilding from `memory` (the memory's frames, oldest first, new ones included)
    /// instead when the policy says so. Returns the rebuild done, if any.
    ///
    /// `memory` is a snapshot, not the locked memory: questions must not wait for a prefill.
    pub fn append(
        &mut self,
        generator: &Generator,
        memory: &[Arc<MemoryFrame>],
        frames: &[Arc<MemoryFrame>],
    ) -> Result<Option<RebuildReason>, GenerateError> {
        let frames: Vec<Arc<MemoryFrame>> = frames
            .iter()
            .filter(|f| self.last_seq().is_none_or(|s| f.seq > s))
            .cloned()
            .collect();
        if frames.is_empty() {
            return Ok(None);
        }
        let template = self.template;
        let new: usize = frames.iter().map(|f| f.kept() + template).sum();
        let oldest_kept = memory.first().map(|f| f.seq);
        let stale = self
            .covered
            .iter()
            .take_while(|c| oldest_kept.is_some_and(|o| c.seq < o))
            .count();
        let slack_frames = (self.opts.slack * self.opts.window_frames as f64).floor() as usize;
        if matches!(
            self.opts.policy,
            CachePolicy::SinkRecent | CachePolicy::Compress
        ) {
            let over = self.cache.len() + new > self.opts.budget;
            let done = |me: &mut Self| match me.opts.policy {
                CachePolicy::Compress => me.compress(generator, stale, over, new),
                _ => me.evict(generator, stale, over, new),
            };
            if (over || stale > slack_frames) && !done(self) {
                let reason = if over {
                    RebuildReason::Budget
                } else {
                    RebuildReason::Slid
                };
                self.rebuild(generator, memory, reason)?;
                return Ok(Some(reason));
            }
        }
        let reason = if self.opts.policy != CachePolicy::Window {
            None
        } else if self.cache.len() + new > self.opts.budget {
            Some(RebuildReason::Budget)
        } else if stale > slack_frames {
            Some(RebuildReason::Slid)
        } else {
            None
        };
        if let Some(reason) = reason {
            // The memory already holds the new frames: the rebuild covers them.
            self.rebuild(generator, memory, reason)?;
            return Ok(Some(reason));
        }
        let (cache, logits, lengths) = append_frames(generator, &self.cache, &frames)?;
        self.cache = cache;
        self.logits = logits.into();
        for (f, positions) in frames.iter().zip(lengths) {
            self.covered.push_back(Covered::of(f, positions));
        }
        Ok(None)
    }

    /// `sink_recent`: evicts the `stale` oldest frames (they left the memory) and, when `over`
    /// the budget, more of the oldest until `new` positions fit in `(1 - slack)` of it, from the
    /// cache in place. `false`: it cannot be done in place (a cache in device memory, a model
    /// without rotary settings, or not even the newest frames would fit), so the caller rebuilds.
    fn evict(&mut self, generator: &Generator, stale: usize, over: bool, new: usize) -> bool {
        let Some(rope) = generator.engines().decoder().rope() else {
            return false;
        };
        let target = ((1.0 - self.opts.slack) * self.opts.budget as f64) as usize;
        let mut n = stale.min(self.covered.len());
        let mut len = self.cache.len()
            - self
                .covered
                .iter()
                .take(n)
                .map(|c| c.positions)
                .sum::<usize>();
        if over {
            while n < self.covered.len() && len + new > target {
                len -= self.covered[n].positions;
                n += 1;
            }
        }
        if len + new > self.opts.budget {
            return false;
        }
        if n == 0 {
            return true;
        }
        let t0 = Instant::now();
        let positions = self.cache.len() - len;
        let dropped = self.prefix..self.prefix + positions;
        match self.cache.evict(std::slice::from_ref(&dropped), rope) {
            Ok(cache) => {
                self.cache = cache;
                self.covered.drain(..n);
                let e = &mut self.evictions;
                e.count += 1;
                e.frames += n as u64;
                e.positions += positions as u64;
                e.last = Some(t0.elapsed());
                true
            }
            Err(e) => {
                tracing::debug!(error = %e, "Cannot evict from the live cache in place; rebuilding");
                false
            }
        }
    }

    /// `compress` (InfiniPot-V's TaR and VaN, docs/ARCHITECTURE.md, "Cache policies"): drops the
    /// `stale` oldest frames whole (they left the memory) and, when `over` the budget, visual
    /// tokens of every frame but the newest until `new` positions fit in `(1 - slack)` of it. What
    /// stays is the union of the least temporally redundant (the lowest key similarity, RoPE
    /// taken off, to the same token of the previous frame held; a token with no earlier
    /// counterpart counts as new) and the highest value norms: each token ranks by its better
    /// place in the two orders, the worst go first. A frame left without visual tokens goes
    /// whole. The kept positions are renumbered by rotary as under `sink_recent`. `false`: not
    /// possible in place (the caller rebuilds).
    fn compress(&mut self, generator: &Generator, stale: usize, over: bool, new: usize) -> bool {
        let Some(rope) = generator.engines().decoder().rope() else {
            return false;
        };
        let t0 = Instant::now();
        let target = ((1.0 - self.opts.slack) * self.opts.budget as f64) as usize;
        let n_stale = stale.min(self.covered.len());
        let mut starts = Vec::with_capacity(self.covered.len());
        let mut at = self.prefix;
        for c in &self.covered {
            starts.push(at);
            at += c.positions;
        }
        let stale_positions: usize = self.covered.iter().take(n_stale).map(|c| c.positions).sum();
        let len = self.cache.len() - stale_positions;
        let need = if over {
            (len + new).saturating_sub(target)
        } else {
            0
        };
        // Candidates: (frame, index among its visual tokens, position), newest frame excluded.
        let last = self.covered.len().saturating_sub(1);
        let mut cands: Vec<(usize, usize, usize)> = Vec::new();
        let mut pairs: Vec<(usize, usize)> = Vec::new();
        let mut has_pair: Vec<bool> = Vec::new();
        if need > 0 {
            let mut held: std::collections::HashMap<u32, usize> = std::collections::HashMap::new();
            for (i, (c, &start)) in self.covered.iter().zip(&starts).enumerate().skip(n_stale) {
                let first = c.visual_start(start, self.tail);
                for (k, &sp) in c.spatial.iter().enumerate() {
                    let pos = first + k;
                    if i < last {
                        cands.push((i, k, pos));
                        match held.get(&sp) {
                            Some(&prev) => {
                                pairs.push((pos, prev));
                                has_pair.push(true);
                            }
                            None => has_pair.push(false),
                        }
                    }
                    held.insert(sp, pos);
                }
            }
        }
        let positions: Vec<usize> = cands.iter().map(|c| c.2).collect();
        let (sims, norms) = if cands.is_empty() {
            (Vec::new(), Vec::new())
        } else {
            match self.cache.scores(&pairs, &positions, rope) {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(error = %e, "Cannot score the live cache in place; rebuilding");
                    return false;
                }
            }
        };
        // Temporal redundancy per candidate (-1: nothing earlier to repeat).
        let mut tar = Vec::with_capacity(cands.len());
        let mut next = sims.iter();
        for &h in &has_pair {
            tar.push(if h {
                *next.next().unwrap_or(&0.0)
            } else {
                -1.0
            });
        }
        // InfiniPot-V keeps the union of the least redundant and the highest value norms: a
        // token's rank is its better place in the two orders, and the worst-ranked go first,
        // until the positions freed (a token, and its frame's text when it was the frame's last
        // token) cover what is needed.
        let mut rank = vec![usize::MAX; cands.len()];
        let mut by_tar: Vec<usize> = (0..cands.len()).collect();
        by_tar.sort_by(|&a, &b| tar[a].total_cmp(&tar[b]));
        let mut by_van: Vec<usize> = (0..cands.len()).collect();
        by_van.sort_by(|&a, &b| norms[b].total_cmp(&norms[a]));
        for (r, (&a, &b)) in by_tar.iter().zip(&by_van).enumerate() {
            rank[a] = rank[a].min(r);
            rank[b] = rank[b].min(r);
        }
        let mut order: Vec<usize> = (0..cands.len()).collect();
        order.sort_by(|&a, &b| rank[b].cmp(&rank[a]));
        let mut left: Vec<usize> = self.covered.iter().map(|c| c.visual).collect();
        let mut lost: Vec<Vec<usize>> = vec![Vec::new(); self.covered.len()];
        let mut freed = 0;
        for &c in &order {
            if freed >= need {
                break;
            }
            let (i, k, _) = cands[c];
            lost[i].push(k);
            left[i] -= 1;
            freed += if left[i] == 0 {
                1 + self.covered[i].positions - self.covered[i].visual
            } else {
                1
            };
        }
        for l in &mut lost {
            l.sort_unstable();
        }
        let mut drops: Vec<std::ops::Range<usize>> = Vec::new();
        let mut push = |r: std::ops::Range<usize>| match drops.last_mut() {
            Some(l) if l.end == r.start => l.end = r.end,
            _ => drops.push(r),
        };
        if n_stale > 0 {
            push(self.prefix..starts[n_stale]);
        }
        // A frame that lost every visual token goes whole.
        let gone = |i: usize| lost[i].len() == self.covered[i].visual;
        for (i, ks) in lost.iter().enumerate().skip(n_stale) {
            let c = &self.covered[i];
            if gone(i) {
                push(starts[i]..starts[i] + c.positions);
            } else {
                let first = c.visual_start(starts[i], self.tail);
                for &k in ks {
                    push(first + k..first + k + 1);
                }
            }
        }
        let dropped: usize = drops.iter().map(|r| r.len()).sum();
        if self.cache.len() - dropped + new > self.opts.budget {
            return false;
        }
        if dropped == 0 {
            return true;
        }
        let cache = match self.cache.evict(&drops, rope) {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(error = %e, "Cannot compress the live cache in place; rebuilding");
                return false;
            }
        };
        self.cache = cache;
        let frames_gone = (n_stale..self.covered.len()).filter(|&i| gone(i)).count() + n_stale;
        let mut tokens = 0u64;
        let mut kept = VecDeque::with_capacity(self.covered.len());
        for (i, mut c) in std::mem::take(&mut self.covered).into_iter().enumerate() {
            if i < n_stale || lost[i].len() == c.visual {
                continue;
            }
            if !lost[i].is_empty() {
                let ks = &lost[i];
                tokens += ks.len() as u64;
                c.spatial = c
                    .spatial
                    .iter()
                    .enumerate()
                    .filter(|(k, _)| !ks.contains(k))
                    .map(|(_, s)| *s)
                    .collect();
                c.visual -= ks.len();
                c.positions -= ks.len();
            }
            kept.push_back(c);
        }
        self.covered = kept;
        let e = &mut self.evictions;
        e.count += 1;
        e.frames += frames_gone as u64;
        e.tokens += tokens;
        e.positions += dropped as u64;
        e.last = Some(t0.elapsed());
        true
    }

    /// Rebuilds the cache from memory: the system turn and the newest frames that fit in
    /// `(1 - slack)` of the budget, in one prefill.
    pub fn rebuild(
        &mut self,
        generator: &Generator,
        memory: &[Arc<MemoryFrame>],
        reason: RebuildReason,
    ) -> Result<(), GenerateError> {
        let t0 = Instant::now();
        let template = self.template;
        let target = ((1.0 - self.opts.slack) * self.opts.budget as f64) as usize;
        let mut room = target.saturating_sub(self.prefix);
        let mut start = memory.len();
        for f in memory.iter().rev() {
            let need = f.kept() + template;
            if need > room {
                break;
            }
            room -= need;
            start -= 1;
        }
        let frames = &memory[start..];
        if frames.is_empty()
            && !self.told_too_small
            && let Some(newest) = memory.last()
        {
            // Said once: every rebuild would say it again.
            self.told_too_small = true;
            tracing::warn!(
                budget = self.opts.budget,
                prefix = self.prefix,
                frame = newest.kept() + template,
                "The live cache's budget cannot hold the system turn and one frame: the model sees no footage (raise cache_budget, or lower memory.reserve_tokens)"
            );
        }
        let (prefix, prefix_logits) = prefix_cache(generator, self.opts.system.as_deref())?;
        self.prefix = prefix.len();
        let (cache, logits, lengths) = if frames.is_empty() {
            (prefix, prefix_logits, Vec::new())
        } else {
            let (c, l, lengths) = append_frames(generator, &prefix, frames)?;
            (c, l.into(), lengths)
        };
        self.cache = cache;
        self.logits = logits;
        self.covered = frames
            .iter()
            .zip(lengths)
            .map(|(f, positions)| Covered::of(f, positions))
            .collect();
        self.rebuilds += 1;
        self.last_rebuild = Some((reason, t0.elapsed()));
        Ok(())
    }

    /// The sequence number of the newest frame held.
    pub fn last_seq(&self) -> Option<u64> {
        self.covered.back().map(|c| c.seq)
    }

    /// The cache.
    pub fn cache(&self) -> &KvCache {
        &self.cache
    }

    /// Logits after the last position.
    pub fn logits(&self) -> &[f32] {
        &self.logits
    }

    /// Frames held.
    pub fn frames(&self) -> usize {
        self.covered.len()
    }

    /// Rebuilds so far and the last one's reason and duration.
    pub fn rebuilds(&self) -> (u64, Option<(RebuildReason, Duration)>) {
        (self.rebuilds, self.last_rebuild)
    }

    /// Frame items evicted in place so far (`sink_recent`).
    pub fn evictions(&self) -> Evictions {
        self.evictions
    }

    /// Positions of the system turn (the part no policy evicts).
    pub fn prefix_positions(&self) -> usize {
        self.prefix
    }

    /// A shareable view of the current state.
    pub fn view(&self) -> LiveView {
        LiveView {
            cache: self.cache.fork(),
            last_seq: self.last_seq(),
            span: self
                .covered
                .front()
                .zip(self.covered.back())
                .map(|(a, b)| (a.pts, b.pts)),
            wall_span: self
                .covered
                .front()
                .zip(self.covered.back())
                .map(|(a, b)| (a.wall, b.wall)),
            frames: self.covered.len(),
            visual_tokens: self.covered.iter().map(|c| c.visual).sum(),
            logits: self.logits.clone(),
        }
    }
}

/// Whether the model's stream items carry their frame's time (manifest `stream_timestamps`).
pub(crate) fn stream_timestamps(generator: &Generator) -> bool {
    generator
        .engines()
        .manifest()
        .chat_template
        .stream_timestamps
}

/// Positions of the text after a frame item's visual tokens (the same for every item).
pub(crate) fn tail_positions(generator: &Generator) -> usize {
    let item = stream_format(generator)
        .ok()
        .and_then(|f| f.frame(1, None).ok())
        .map(|r| r.segments().to_vec());
    let tok = generator.engines().tokenizer();
    let mut ids = Vec::new();
    let segments = item.unwrap_or_default();
    let after = segments
        .iter()
        .position(|s| matches!(s, render::Segment::Visual { .. }))
        .map_or(segments.len(), |i| i + 1);
    for s in &segments[after..] {
        if let render::Segment::Text(text, mode) = s {
            tok.encode_into(text, *mode, &mut ids);
        }
    }
    ids.len()
}

/// Positions of one frame item's template text (measured on the tokenizer once; with time text,
/// for a time of 99,999 s: a bound for a camera's first 27 hours, a position or two short after).
pub(crate) fn template_positions(generator: &Generator) -> usize {
    let time = stream_timestamps(generator).then_some(99_999.0);
    let item = stream_format(generator)
        .ok()
        .and_then(|f| f.frame(1, time).ok())
        .map(|r| r.segments().to_vec());
    let tok = generator.engines().tokenizer();
    let mut ids = Vec::new();
    for s in item.unwrap_or_default() {
        if let render::Segment::Text(text, mode) = s {
            tok.encode_into(&text, mode, &mut ids);
        }
    }
    ids.len()
}
