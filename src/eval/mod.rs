//! `edgevlm eval`: a question set with known answers, asked over clips through the runtime, scored
//! under Apollo's three conditions (docs/EVAL.md).
//!
//! ```text
//! clips.jsonl + questions.jsonl ─► each clip a file camera of one runtime (ingest, fps sampling,
//!   DiffFP, vision encoder, memory, live cache) ─► every frame encoded ─► each question asked
//!   through the question service: with the video (the window), with the centre frame only (of a
//!   twin camera that does not prune), with no frame ─► answers compared with the truth
//! ```
//!
//! Clips run in batches of `parallel` cameras; a clip that cannot be decoded is reported and
//! skipped, and counted. Answers are compared after [`normalise`]: lower case, whitespace collapsed,
//! a final full stop dropped. Answers of several sentences (a narration, a list of what moves) are
//! also scored sentence by sentence ([`SentenceScore`]), so a narration with one wrong sentence of
//! four shows as such and not only as wrong.

use crate::config::{Config, PruneMode};
use crate::query::{AskRequest, Footage, QueryService};
use crate::runtime::{ModelStatus, Runtime, RuntimeOptions};
use crate::supervisor::CameraState;
use crate::telemetry::control;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Apollo's conditions (docs/EVAL.md): what the model may see when it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Condition {
    /// The clip's frames in the camera's window, as a question over MQTT sees them.
    Video,
    /// Only the middle frame of the window, whole (not pruned).
    Centre,
    /// No frame at all: the question alone.
    Text,
}

impl Condition {
    /// All three, in report order.
    pub const ALL: [Condition; 3] = [Condition::Video, Condition::Centre, Condition::Text];

    /// The name used on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            Condition::Video => "video",
            Condition::Centre => "centre",
            Condition::Text => "text",
        }
    }

    /// Parses a command-line name.
    pub fn parse(s: &str) -> Option<Condition> {
        Condition::ALL.into_iter().find(|c| c.name() == s)
    }
}

/// One clip of a question set.
#[derive(Debug, Clone)]
pub struct Clip {
    /// Its name (questions refer to it).
    pub name: String,
    /// The video file.
    pub file: PathBuf,
}

/// One question with its known answer.
#[derive(Debug, Clone)]
pub struct Item {
    /// Line in the question file (1-based).
    pub line: usize,
    /// The clip it is about.
    pub clip: String,
    /// Question kind (report rows); "all" when the file gives none.
    pub kind: String,
    /// The question.
    pub question: String,
    /// Accepted answers (any one is right).
    pub answers: Vec<String>,
}

/// A question set: clips and questions, checked.
#[derive(Debug, Clone)]
pub struct QuestionSet {
    /// Clips in file order.
    pub clips: Vec<Clip>,
    /// Questions in file order.
    pub items: Vec<Item>,
}

#[derive(Deserialize)]
struct ClipLine {
    clip: String,
    file: PathBuf,
    // The rest of a line (the scene's truth, engines/scenes/scenes.py) is not needed to score
    // and is ignored.
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ItemLine {
    clip: String,
    question: String,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    answer: Option<String>,
    #[serde(default)]
    answers: Option<Vec<String>>,
}

fn read_lines(path: &Path) -> Result<Vec<(usize, String)>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let lines: Vec<(usize, String)> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| (i + 1, l.to_string()))
        .collect();
    if lines.is_empty() {
        return Err(format!(
            "{}: no lines (expected JSON lines)",
            path.display()
        ));
    }
    Ok(lines)
}

impl QuestionSet {
    /// Reads `clips` (JSON lines `{"clip": NAME, "file": PATH, …}`, files relative to it) and
    /// `questions` (JSON lines `{"clip", "question", "answer" or "answers", "kind"?}`). Every
    /// problem names the file and line.
    pub fn load(clips: &Path, questions: &Path) -> Result<QuestionSet, String> {
        let base = clips.parent().unwrap_or(Path::new("."));
        let mut out = QuestionSet {
            clips: Vec::new(),
            items: Vec::new(),
        };
        for (n, line) in read_lines(clips)? {
            let c: ClipLine =
                serde_json::from_str(&line).map_err(|e| format!("{}:{n}: {e}", clips.display()))?;
            if c.clip.trim().is_empty() {
                return Err(format!("{}:{n}: `clip` is empty", clips.display()));
            }
            if out.clips.iter().any(|k| k.name == c.clip) {
                return Err(format!(
                    "{}:{n}: clip `{}` is listed twice",
                    clips.display(),
                    c.clip
                ));
            }
            let file = if c.file.is_absolute() {
                c.file
            } else {
                base.join(c.file)
            };
            // Cameras take absolute file URLs.
            let file = std::path::absolute(&file).unwrap_or(file);
            out.clips.push(Clip { name: c.clip, file });
        }
        for (n, line) in read_lines(questions)? {
            let q: ItemLine = serde_json::from_str(&line)
                .map_err(|e| format!("{}:{n}: {e}", questions.display()))?;
            if !out.clips.iter().any(|c| c.name == q.clip) {
                return Err(format!(
                    "{}:{n}: unknown clip `{}` (not in {})",
                    questions.display(),
                    q.clip.chars().take(64).collect::<String>(),
                    clips.display()
                ));
            }
            let answers: Vec<String> = q.answers.into_iter().flatten().chain(q.answer).collect();
            if answers.is_empty() || answers.iter().any(|a| normalise(a).is_empty()) {
                return Err(format!(
                    "{}:{n}: needs a non-empty `answer` (or `answers`)",
                    questions.display()
                ));
            }
            if q.question.trim().is_empty() {
                return Err(format!("{}:{n}: `question` is empty", questions.display()));
            }
            out.items.push(Item {
                line: n,
                clip: q.clip,
                kind: q.kind.unwrap_or_else(|| "all".into()),
                question: q.question,
                answers,
            });
        }
        Ok(out)
    }
}

/// How answers are compared: lower case, whitespace collapsed, a final `.` dropped.
pub fn normalise(s: &str) -> String {
    let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    s.trim_end_matches('.').trim().to_lowercase()
}

/// An answer's sentences, each [`normalise`]d: split after a `.` that ends a word (followed by a
/// space or the end), so "It left at 3.0s." is one sentence.
pub fn sentences(s: &str) -> Vec<String> {
    normalise(s)
        .split(". ")
        .map(|p| p.trim().trim_end_matches('.').trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

/// Sentences of answers against the truth's: `matched` counts each sentence of the truth found in
/// the answer at most as often as the truth has it (in any order).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SentenceScore {
    /// Sentences of the truth.
    pub expected: usize,
    /// Sentences of the answer.
    pub answered: usize,
    /// Sentences in both.
    pub matched: usize,
}

impl SentenceScore {
    /// The answer `answer` against the accepted answers `expected` (the best-matching one).
    pub fn of(answer: &str, expected: &[String]) -> SentenceScore {
        let said = sentences(answer);
        expected
            .iter()
            .map(|e| {
                let mut truth = sentences(e);
                let expected = truth.len();
                let matched = said
                    .iter()
                    .filter(|s| {
                        let found = truth.iter().position(|t| t == *s);
                        found.map(|i| truth.swap_remove(i)).is_some()
                    })
                    .count();
                SentenceScore {
                    expected,
                    answered: said.len(),
                    matched,
                }
            })
            .max_by_key(|s| (s.matched, std::cmp::Reverse(s.expected)))
            .unwrap_or_default()
    }

    /// Share of the truth's sentences the answers said (0 when there were none).
    pub fn found(&self) -> f64 {
        ratio(self.matched, self.expected)
    }

    /// Share of the answers' sentences that are in the truth (0 when there were none).
    pub fn right(&self) -> f64 {
        ratio(self.matched, self.answered)
    }

    fn add(&mut self, o: &SentenceScore) {
        self.expected += o.expected;
        self.answered += o.answered;
        self.matched += o.matched;
    }
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// Settings of one evaluation.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// The model directory.
    pub model_dir: PathBuf,
    /// Sampling rate of every clip camera.
    pub sample_fps: f64,
    /// Each clip camera's window.
    pub window_secs: f64,
    /// Each clip camera's live-cache policy and budget.
    pub cache: crate::config::CacheConfig,
    /// DiffFP mode of the video condition.
    pub prune: PruneMode,
    /// Conditions to score.
    pub conditions: Vec<Condition>,
    /// Clips decoded at once.
    pub parallel: usize,
    /// Most tokens per answer.
    pub max_tokens: u32,
    /// Engine threads.
    pub threads: usize,
    /// Longest wait for one batch of clips to be decoded and encoded.
    pub clip_timeout: Duration,
}

/// One question's outcome under one condition.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// The condition.
    pub condition: Condition,
    /// The model's answer (or the error).
    pub answer: String,
    /// It matched a known answer.
    pub right: bool,
    /// Its sentences against the known answer's.
    pub sentences: SentenceScore,
}

/// One question's outcomes.
#[derive(Debug, Clone, Serialize)]
pub struct ItemResult {
    /// Line in the question file.
    pub line: usize,
    /// Clip.
    pub clip: String,
    /// Kind.
    pub kind: String,
    /// Question.
    pub question: String,
    /// Known answers.
    pub expected: Vec<String>,
    /// Per condition.
    pub outcomes: Vec<Outcome>,
}

/// Right and total answers of one kind under one condition.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Score {
    /// Answers that matched.
    pub right: usize,
    /// Questions asked.
    pub total: usize,
}

impl Score {
    /// right / total (0 when nothing was asked).
    pub fn accuracy(&self) -> f64 {
        ratio(self.right, self.total)
    }
}

/// A clip that was skipped, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    /// Clip name.
    pub clip: String,
    /// Why.
    pub reason: String,
}

/// The result of an evaluation.
#[derive(Debug, Clone, Serialize)]
pub struct EvalReport {
    /// The model directory.
    pub model: String,
    /// DiffFP mode.
    pub prune: String,
    /// Window in seconds.
    pub window_secs: f64,
    /// Live-cache policy (`window`, `sink_recent`).
    pub cache_policy: String,
    /// Live-cache budget in positions (`None`: the model's context less the reserve).
    pub cache_budget: Option<u32>,
    /// Positions of the largest clip camera's live cache at the end of its clip (video condition).
    pub cache_positions_max: u64,
    /// Clips evaluated.
    pub clips: usize,
    /// Clips skipped (not decodable, no frame).
    pub skipped: Vec<Skipped>,
    /// Share of visual tokens DiffFP kept over the evaluated clips' sampled frames.
    pub kept_ratio: f64,
    /// Frames sampled from the evaluated clips.
    pub frames: u64,
    /// kind -> condition -> score; the kind `all` sums every kind.
    pub scores: BTreeMap<String, BTreeMap<String, Score>>,
    /// kind -> condition -> the answers' sentences against the truth's, for the kinds whose known
    /// answers hold several sentences.
    pub sentences: BTreeMap<String, BTreeMap<String, SentenceScore>>,
    /// Questions right with the video and wrong from the text alone (ApolloBench's filter keeps
    /// such items), out of those asked under both.
    pub needs_video: Score,
    /// Every question.
    pub items: Vec<ItemResult>,
    /// Wall time of the evaluation in seconds.
    pub seconds: f64,
}

impl EvalReport {
    /// The table printed by `edgevlm eval`.
    pub fn table(&self) -> String {
        let conditions: Vec<String> = {
            let mut c: Vec<String> = self
                .scores
                .values()
                .flat_map(|m| m.keys().cloned())
                .collect();
            c.sort_by_key(|n| Condition::parse(n).map_or(9, |c| c as usize));
            c.dedup();
            c
        };
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} clips ({} skipped), {} frames, prune {} (kept {:.1}% of visual tokens), window {} s, \
             cache {}{} (largest {} positions)",
            self.clips,
            self.skipped.len(),
            self.frames,
            self.prune,
            self.kept_ratio * 100.0,
            self.window_secs,
            self.cache_policy,
            self.cache_budget
                .map_or(String::new(), |b| format!(" budget {b}")),
            self.cache_positions_max
        );
        let _ = write!(out, "{:<12}", "kind");
        for c in &conditions {
            let _ = write!(out, " {c:>16}");
        }
        out.push('\n');
        let mut kinds: Vec<&str> = self
            .scores
            .keys()
            .map(String::as_str)
            .filter(|k| *k != "all")
            .collect();
        kinds.push("all");
        for kind in kinds {
            let Some(row) = self.scores.get(kind) else {
                continue;
            };
            let _ = write!(out, "{kind:<12}");
            for c in &conditions {
                let s = row.get(c).copied().unwrap_or_default();
                let cell = format!("{:.1}% ({}/{})", s.accuracy() * 100.0, s.right, s.total);
                let _ = write!(out, " {cell:>16}");
            }
            out.push('\n');
        }
        if !self.sentences.is_empty() {
            let _ = writeln!(
                out,
                "sentence by sentence (found: of the truth's sentences, in the answer; right: of \
                 the answer's, in the truth):"
            );
            for (kind, row) in &self.sentences {
                let _ = write!(out, "{kind:<12}");
                for c in &conditions {
                    let s = row.get(c).copied().unwrap_or_default();
                    let cell = format!("{:.1}% / {:.1}%", s.found() * 100.0, s.right() * 100.0);
                    let _ = write!(out, " {cell:>16}");
                }
                out.push('\n');
            }
        }
        if self.needs_video.total > 0 {
            let _ = writeln!(
                out,
                "needs the video (right with it, wrong from the text alone): {}/{}",
                self.needs_video.right, self.needs_video.total
            );
        }
        for s in &self.skipped {
            let _ = writeln!(out, "skipped {}: {}", s.clip, s.reason);
        }
        out
    }
}

/// The camera ids of clip `index`: the one the video condition asks, and its twin that does not
/// prune (the centre condition's whole frame). Clip names stay out of ids (any text may name a clip).
fn camera_ids(index: usize) -> (String, String) {
    (format!("clip{index:05}"), format!("clip{index:05}-whole"))
}

fn camera_block(id: &str, file: &Path, opts: &EvalOptions, prune: PruneMode) -> String {
    // TOML basic strings take JSON's escapes.
    let uri = serde_json::to_string(&format!("file://{}", file.display())).unwrap_or_default();
    format!(
        "[[cameras]]\nid = \"{id}\"\nuri = {uri}\nsample_fps = {}\nwindow_secs = {}\n\
         prune_mode = \"{prune}\"\nnarrate = []\nretry_initial_secs = 3600\nretry_max_secs = 3600\n\
         connect_timeout_secs = 120\nstall_secs = 120\ncache_policy = \"{}\"\n{}",
        opts.sample_fps,
        opts.window_secs,
        opts.cache.policy.name(),
        opts.cache
            .budget
            .map_or(String::new(), |b| format!("cache_budget = {b}\n"))
    )
}

fn batch_config(
    clips: &[(usize, &Clip)],
    opts: &EvalOptions,
    state: &Path,
) -> Result<Config, String> {
    let model = serde_json::to_string(&opts.model_dir.display().to_string()).unwrap_or_default();
    let state = serde_json::to_string(&state.display().to_string()).unwrap_or_default();
    let mut text = format!(
        "[runtime]\nstatus_interval_secs = 0.2\nstate_dir = {state}\n\
         [engine]\nmodel_dir = {model}\nthreads = {}\n[mqtt]\nenabled = false\n\
         [query]\nconcurrency = 1\nconversations = 0\n",
        opts.threads.max(1)
    );
    let centre = opts.conditions.contains(&Condition::Centre);
    for (index, c) in clips {
        let (id, whole) = camera_ids(*index);
        text.push_str(&camera_block(&id, &c.file, opts, opts.prune));
        if centre {
            text.push_str(&camera_block(&whole, &c.file, opts, PruneMode::Off));
        }
    }
    Config::parse(&text, None).map_err(|e| format!("the evaluation's configuration: {e}"))
}

/// Whether camera `id` has ended its file and every sampled frame reached the memory.
fn settled(s: &control::Snapshot, id: &str) -> Option<Result<u64, String>> {
    let c = s.cameras.iter().find(|c| c.camera == id)?;
    // A file camera that failed is not retried (its retry delay is an hour): report why.
    if c.state == CameraState::Retrying {
        return Some(Err(c
            .reason
            .clone()
            .unwrap_or_else(|| "the camera failed".into())));
    }
    if c.state != CameraState::Stopped {
        return None;
    }
    let sampled = c.counters.sampled;
    if sampled == 0 {
        return Some(Err(c
            .reason
            .clone()
            .unwrap_or_else(|| "no frame could be decoded".into())));
    }
    let m = c.memory?;
    // Every sampled frame encoded, reused or counted missed; or, when frames went by before the
    // watch first looked (they are in no count), the camera stopped a while ago: its watch had
    // two seconds for the last few frames it paces.
    let all = m.frames_encoded + m.frames_reused + m.frames_missed >= sampled;
    (all || c.state_secs >= 2.0).then_some(Ok(sampled))
}

/// Runs the question set through the runtime and scores it.
pub async fn run(set: &QuestionSet, opts: &EvalOptions) -> Result<EvalReport, String> {
    let started = Instant::now();
    check_model(&opts.model_dir)?;
    let state = std::env::temp_dir().join(format!("edgevlm-eval-{}", std::process::id()));
    let mut report = EvalReport {
        model: opts.model_dir.display().to_string(),
        prune: opts.prune.to_string(),
        window_secs: opts.window_secs,
        cache_policy: opts.cache.policy.name().to_string(),
        cache_budget: opts.cache.budget,
        cache_positions_max: 0,
        clips: 0,
        skipped: Vec::new(),
        kept_ratio: 0.0,
        frames: 0,
        scores: BTreeMap::new(),
        sentences: BTreeMap::new(),
        needs_video: Score::default(),
        items: Vec::new(),
        seconds: 0.0,
    };
    let (mut kept, mut total) = (0u64, 0u64);
    let mut clips: Vec<(usize, &Clip)> = Vec::new();
    for (index, c) in set.clips.iter().enumerate() {
        if set.items.iter().any(|i| i.clip == c.name) {
            if c.file.is_file() {
                clips.push((index, c));
            } else {
                report.skipped.push(Skipped {
                    clip: c.name.clone(),
                    reason: format!("{}: no such file", c.file.display()),
                });
            }
        }
    }
    for batch in clips.chunks(opts.parallel.max(1)) {
        let config = batch_config(batch, opts, &state)?;
        let rt = Runtime::start(config, RuntimeOptions::default())
            .await
            .map_err(|e| format!("{e:#}"))?;
        let outcome = run_batch(&rt, batch, set, opts, &mut report).await;
        let snap = rt.reports().borrow().clone();
        rt.shutdown().await;
        let done: Vec<String> = outcome?.into_iter().map(|i| camera_ids(i).0).collect();
        for c in snap.cameras.iter().filter(|c| done.contains(&c.camera)) {
            kept += c.counters.tokens_kept;
            total += c.counters.tokens_total;
            report.frames += c.counters.sampled;
            if let Some(m) = &c.memory {
                report.cache_positions_max = report.cache_positions_max.max(m.cache_positions);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&state);
    report.kept_ratio = if total == 0 {
        0.0
    } else {
        kept as f64 / total as f64
    };
    let several: std::collections::BTreeSet<&str> = report
        .items
        .iter()
        .filter(|i| i.expected.iter().any(|e| sentences(e).len() > 1))
        .map(|i| i.kind.as_str())
        .collect();
    for item in &report.items {
        for o in &item.outcomes {
            if several.contains(item.kind.as_str()) {
                report
                    .sentences
                    .entry(item.kind.clone())
                    .or_default()
                    .entry(o.condition.name().to_string())
                    .or_default()
                    .add(&o.sentences);
            }
            for kind in [item.kind.as_str(), "all"] {
                let s = report
                    .scores
                    .entry(kind.to_string())
                    .or_default()
                    .entry(o.condition.name().to_string())
                    .or_default();
                s.total += 1;
                s.right += usize::from(o.right);
            }
        }
        let video = item
            .outcomes
            .iter()
            .find(|o| o.condition == Condition::Video);
        let text = item
            .outcomes
            .iter()
            .find(|o| o.condition == Condition::Text);
        if let (Some(v), Some(t)) = (video, text) {
            report.needs_video.total += 1;
            report.needs_video.right += usize::from(v.right && !t.right);
        }
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// The model must speak VideoLLaMA3's stream format (memory and questions use it).
fn check_model(dir: &Path) -> Result<(), String> {
    let path = dir.join("manifest.toml");
    let m = crate::engine::Manifest::load(dir).map_err(|e| e.to_string())?;
    crate::family::stream(m.family).map(|_| ()).map_err(|why| {
        format!(
            "{}: {why}; eval asks through a live streaming format",
            path.display()
        )
    })
}

/// Waits for a batch's cameras, asks their questions; returns the indices of the clips that were
/// evaluated.
async fn run_batch(
    rt: &crate::runtime::Running,
    batch: &[(usize, &Clip)],
    set: &QuestionSet,
    opts: &EvalOptions,
    report: &mut EvalReport,
) -> Result<Vec<usize>, String> {
    let mut model = rt.model();
    let status = tokio::time::timeout(
        opts.clip_timeout,
        model.wait_for(|m| *m != ModelStatus::Loading),
    )
    .await
    .map_err(|_| format!("the model did not load within {:?}", opts.clip_timeout))?
    .map_err(|_| "the runtime stopped".to_string())?
    .clone();
    if let ModelStatus::Unavailable(why) = status {
        return Err(format!("the model cannot be used: {why}"));
    }
    let service: QueryService = {
        let mut q = rt.questions();
        let s = tokio::time::timeout(opts.clip_timeout, q.wait_for(|s| s.is_some()))
            .await
            .map_err(|_| "the question service did not start".to_string())?
            .map_err(|_| "the runtime stopped".to_string())?
            .clone();
        s.ok_or("the question service did not start")?
    };
    let centre = opts.conditions.contains(&Condition::Centre);
    let cameras_of = |index: usize| {
        let (id, whole) = camera_ids(index);
        std::iter::once(id).chain(centre.then_some(whole))
    };
    let ids: Vec<String> = batch.iter().flat_map(|(i, _)| cameras_of(*i)).collect();
    let mut reports = rt.reports();
    let all_settled = |s: &control::Snapshot| ids.iter().all(|id| settled(s, id).is_some());
    let timed_out = tokio::time::timeout(opts.clip_timeout, reports.wait_for(all_settled))
        .await
        .is_err();
    let snap = reports.borrow().clone();
    let mut done = Vec::new();
    for &(index, clip) in batch {
        let failed = cameras_of(index).find_map(|id| match settled(&snap, &id) {
            Some(Ok(_)) => None,
            Some(Err(why)) => Some(why),
            None if timed_out => Some(format!(
                "not decoded and encoded within {:?}",
                opts.clip_timeout
            )),
            None => Some("did not finish".into()),
        });
        if let Some(reason) = failed {
            report.skipped.push(Skipped {
                clip: clip.name.clone(),
                reason,
            });
            continue;
        }
        done.push(index);
        report.clips += 1;
        let (id, whole) = camera_ids(index);
        for item in set.items.iter().filter(|i| i.clip == clip.name) {
            let mut outcomes = Vec::new();
            for &condition in &opts.conditions {
                let (camera, footage) = match condition {
                    Condition::Video => (&id, Footage::Window),
                    Condition::Centre => (&whole, Footage::Centre),
                    Condition::Text => (&id, Footage::Nothing),
                };
                let answer = ask(&service, camera, &item.question, footage, opts.max_tokens).await;
                let right = answer
                    .as_ref()
                    .is_ok_and(|a| item.answers.iter().any(|e| normalise(e) == normalise(a)));
                let sentences = SentenceScore::of(answer.as_deref().unwrap_or(""), &item.answers);
                outcomes.push(Outcome {
                    condition,
                    answer: answer.unwrap_or_else(|e| format!("error: {e}")),
                    right,
                    sentences,
                });
            }
            report.items.push(ItemResult {
                line: item.line,
                clip: item.clip.clone(),
                kind: item.kind.clone(),
                question: item.question.clone(),
                expected: item.answers.clone(),
                outcomes,
            });
        }
    }
    Ok(done)
}

async fn ask(
    service: &QueryService,
    camera: &str,
    question: &str,
    footage: Footage,
    max_tokens: u32,
) -> Result<String, String> {
    let mut req = AskRequest::new(camera, question);
    req.max_tokens = Some(max_tokens);
    let service = service.clone();
    tokio::task::spawn_blocking(move || {
        let q = service.check(&req).map_err(|e| e.to_string())?;
        service
            .answer_seeing(&q, footage, &mut |_| {})
            .map(|r| r.text)
            .map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| format!("the question crashed: {e}"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    fn tmp(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("edgevlm-eval-test-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn answers_compare_without_case_spacing_or_final_stop() {
        assert_eq!(normalise("  The ball is  RED. "), "the ball is red");
        assert_eq!(normalise("It left at 9.0s."), "it left at 9.0s");
        assert_ne!(normalise("The ball is red"), normalise("The ball is blue"));
    }

    #[test]
    fn several_sentences_score_one_by_one_in_any_order_each_once() {
        assert_eq!(
            sentences("The red ball left at 3.0s. A  blue square is still.\n"),
            ["the red ball left at 3.0s", "a blue square is still"]
        );
        let truth =
            ["A red ball is moving up. The red ball left at 3.0s. Nothing else.".to_string()];
        // One sentence wrong, one said twice, two missing: each truth sentence counts once.
        let s = SentenceScore::of(
            "The red ball left at 3.0s. A red ball is moving down. The red ball left at 3.0s.",
            &truth,
        );
        assert_eq!(
            s,
            SentenceScore {
                expected: 3,
                answered: 3,
                matched: 1
            }
        );
        // The same sentences in another order all match; the best of several truths is taken.
        let s = SentenceScore::of(
            "Nothing else. The red ball left at 3.0s. A red ball is moving up.",
            &["It is not moving.".to_string(), truth[0].clone()],
        );
        assert_eq!((s.matched, s.expected, s.answered), (3, 3, 3));
        assert_eq!((s.found(), s.right()), (1.0, 1.0));
        assert_eq!(SentenceScore::of("", &truth).matched, 0);
    }

    #[test]
    fn a_question_set_loads_with_files_relative_to_the_clip_list() {
        let d = tmp("ok");
        let clips = write(
            &d,
            "clips.jsonl",
            "{\"clip\":\"a\",\"file\":\"a.mkv\",\"frames\":8}\n",
        );
        let qs = write(
            &d,
            "q.jsonl",
            "{\"clip\":\"a\",\"kind\":\"colour\",\"question\":\"What colour?\",\"answer\":\"Red.\"}\n\n\
             {\"clip\":\"a\",\"question\":\"Which?\",\"answers\":[\"x\",\"y\"]}\n",
        );
        let set = QuestionSet::load(&clips, &qs).unwrap();
        assert_eq!(
            set.clips[0].file,
            std::path::absolute(d.join("a.mkv")).unwrap()
        );
        assert_eq!(set.items.len(), 2);
        assert_eq!((set.items[0].line, set.items[1].line), (1, 3));
        assert_eq!(set.items[1].kind, "all");
        assert_eq!(set.items[1].answers, vec!["x", "y"]);
    }

    #[test]
    fn a_bad_question_file_is_named_with_its_line() {
        let d = tmp("bad");
        let clips = write(&d, "clips.jsonl", "{\"clip\":\"a\",\"file\":\"a.mkv\"}\n");
        let cases = [
            (
                "{\"clip\":\"a\",\"question\":\"q\",\"answer\":\"x\"}\n{nope\n",
                ":2: ",
            ),
            (
                "{\"clip\":\"b\",\"question\":\"q\",\"answer\":\"x\"}\n",
                ":1: unknown clip `b`",
            ),
            (
                "{\"clip\":\"a\",\"question\":\"q\"}\n",
                ":1: needs a non-empty `answer`",
            ),
            (
                "{\"clip\":\"a\",\"question\":\"q\",\"answer\":\"x\",\"extra\":1}\n",
                ":1: unknown field `extra`",
            ),
            ("\n\n", "no lines"),
        ];
        for (text, want) in cases {
            let qs = write(&d, "q.jsonl", text);
            let e = QuestionSet::load(&clips, &qs).unwrap_err();
            assert!(e.contains("q.jsonl") && e.contains(want), "{text:?}: {e}");
        }
        let missing = QuestionSet::load(&clips, &d.join("absent.jsonl")).unwrap_err();
        assert!(missing.contains("absent.jsonl"), "{missing}");
        let dup = write(
            &d,
            "dup.jsonl",
            "{\"clip\":\"a\",\"file\":\"a\"}\n{\"clip\":\"a\",\"file\":\"b\"}\n",
        );
        let qs = write(
            &d,
            "q.jsonl",
            "{\"clip\":\"a\",\"question\":\"q\",\"answer\":\"x\"}\n",
        );
        let e = QuestionSet::load(&dup, &qs).unwrap_err();
        assert!(e.contains("dup.jsonl:2: clip `a` is listed twice"), "{e}");
    }
}
