//! Query: questions over a camera's recent footage, answered from its memory
//! (docs/ARCHITECTURE.md, "Memory and live KV cache").
//!
//! ```text
//! question ─► validate once (ValidQuery) ─► admit (concurrency + queue, else `busy`) ─► snapshot
//!    live cache covers the window? ── yes ─► fork (O(1)) + frames newer than the cache
//!                                    no ──► system turn + the window's frames from memory
//!    + user turn + assistant opening ─► prefill ─► decode, streaming deltas ─► answer + timings
//! ```
//!
//! The vision encoder never runs here: every frame comes from memory. A conversation id keeps the
//! answer's cache so a follow-up continues from it, with the footage that arrived since.

mod answer;
mod conversation;
mod validate;

pub use answer::{Answer, ErrorCode, FinishReason, QueryError};
pub use conversation::Conversations;
pub use validate::{
    CameraDirectory, MAX_TOKENS_LIMIT, QueryLimits, Rejection, ValidQuery, recover_id, refuse_cut,
    valid_id, validate,
};

use crate::base::Clock;
use crate::config::QueryConfig;
use crate::generate::render::Role;
use crate::generate::{GenerateError, GenerateOptions, Generation, Generator, KvCache, StopReason};
use crate::memory::{CameraMemory, MemoryFrame, MemorySnapshot, WatchStats};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::memory::live::StreamPrompt;

/// A question from inside the process (tests, benches, the command line), checked into a
/// [`ValidQuery`] by [`QueryService::check`] before anything answers it.
#[derive(Debug, Clone)]
pub struct AskRequest {
    /// Camera id.
    pub camera: String,
    /// The question.
    pub question: String,
    /// Footage to ground the answer on; `None`: the camera's whole window.
    pub window: Option<Duration>,
    /// Most tokens to generate; `None`: `query.max_tokens`.
    pub max_tokens: Option<u32>,
    /// Conversation id for follow-ups.
    pub conversation: Option<String>,
    /// When the question arrived (time to first token counts from here).
    pub received: Instant,
}

impl AskRequest {
    /// A question about a camera's whole window.
    pub fn new(camera: impl Into<String>, question: impl Into<String>) -> AskRequest {
        AskRequest {
            camera: camera.into(),
            question: question.into(),
            window: None,
            max_tokens: None,
            conversation: None,
            received: Instant::now(),
        }
    }
}

/// How a question was answered.
#[derive(Debug, Clone, PartialEq)]
pub struct AnswerReport {
    /// The full text.
    pub text: String,
    /// Why generation stopped.
    pub finish: FinishReason,
    /// Stream time of the first and last frame the model saw.
    pub window: (Duration, Duration),
    /// Frames the model saw.
    pub frames: usize,
    /// Visual tokens the model saw.
    pub visual_tokens: usize,
    /// Prompt positions in all (cache and new).
    pub prompt_tokens: usize,
    /// Generated tokens.
    pub generated_tokens: usize,
    /// From receiving the question to the first token.
    pub first_token: Duration,
    /// From receiving the question to the last token.
    pub total: Duration,
    /// The camera's live cache was forked (instead of prefilling the window from memory).
    pub forked: bool,
    /// Turn number in its conversation (1 for a first question).
    pub turn: u32,
}

impl AnswerReport {
    /// The final MQTT message.
    pub fn to_answer(&self, id: &str, camera: &str) -> Answer {
        Answer {
            id: id.to_string(),
            camera: camera.to_string(),
            text: self.text.clone(),
            finish: self.finish,
            window_start_secs: self.window.0.as_secs_f64(),
            window_end_secs: self.window.1.as_secs_f64(),
            frames: self.frames as u32,
            visual_tokens: self.visual_tokens as u32,
            prompt_tokens: self.prompt_tokens as u32,
            generated_tokens: self.generated_tokens as u32,
            first_token_ms: self.first_token.as_secs_f64() * 1e3,
            total_ms: self.total.as_secs_f64() * 1e3,
        }
    }
}

/// What footage an answer may see. Questions over MQTT always see their window; the other two
/// are Apollo's controls for judging a question set (`edgevlm eval`, docs/EVAL.md): a good video
/// question is answered right with the video and not from one frame or from the text alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Footage {
    /// The question's window (the live cache, or the window's frames from memory).
    Window,
    /// Only the middle frame of the question's window, after the system turn (whole if the
    /// camera does not prune).
    Centre,
    /// No frame: the system turn and the question.
    Nothing,
}

/// Receives an answer's text as it is generated.
pub trait Deltas: Send + 'static {
    /// A new piece of text (never empty, never half a character).
    fn delta(&mut self, text: &str);
}

impl<F: FnMut(&str) + Send + 'static> Deltas for F {
    fn delta(&mut self, text: &str) {
        self(text)
    }
}

/// A place among the questions being answered or waiting; dropping it frees the place.
#[derive(Debug)]
pub struct Admission {
    _slot: OwnedSemaphorePermit,
}

/// Limits a question must respect (besides the camera's window).
#[derive(Debug, Clone, Copy)]
pub struct AskLimits {
    /// Longest question in characters.
    pub question_max_chars: usize,
    /// Most tokens a question may ask for.
    pub max_tokens: u32,
    /// Questions waiting beyond those being answered.
    pub queue: usize,
}

impl Default for AskLimits {
    fn default() -> Self {
        AskLimits {
            question_max_chars: 2000,
            max_tokens: MAX_TOKENS_LIMIT,
            queue: 16,
        }
    }
}

/// Answers questions for every camera; cheap to clone.
#[derive(Debug, Clone)]
pub struct QueryService {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    model: Result<Generator, String>,
    cameras: RwLock<BTreeMap<String, Arc<CameraMemory>>>,
    admission: Arc<Semaphore>,
    running: Arc<Semaphore>,
    conversations: Mutex<Conversations>,
    cfg: QueryConfig,
    limits: AskLimits,
    system: Option<String>,
    slack: f64,
    budget: usize,
    cancel: AtomicBool,
}

fn err(code: ErrorCode, message: impl Into<String>) -> QueryError {
    QueryError::new(code, message)
}

impl QueryService {
    /// A service on loaded engines (`Err(reason)`: no model, every question gets `no_model`).
    /// `system` and `budget`/`slack` must match the watch workers' (the live cache layout).
    pub fn new(
        model: Result<Generator, String>,
        cfg: QueryConfig,
        limits: AskLimits,
        system: Option<String>,
        budget: usize,
        slack: f64,
    ) -> QueryService {
        QueryService::new_with_clock(model, cfg, limits, system, budget, slack, Clock::system())
    }

    /// [`QueryService::new`] with conversations that age on `clock`.
    pub fn new_with_clock(
        model: Result<Generator, String>,
        cfg: QueryConfig,
        limits: AskLimits,
        system: Option<String>,
        budget: usize,
        slack: f64,
        clock: Clock,
    ) -> QueryService {
        let concurrency = cfg.concurrency.max(1) as usize;
        QueryService {
            inner: Arc::new(Inner {
                model,
                cameras: RwLock::new(BTreeMap::new()),
                admission: Arc::new(Semaphore::new(concurrency + limits.queue)),
                running: Arc::new(Semaphore::new(concurrency)),
                conversations: Mutex::new(Conversations::new(
                    cfg.conversations as usize,
                    cfg.conversation_ttl,
                    clock,
                )),
                cfg,
                limits,
                system,
                slack,
                budget,
                cancel: AtomicBool::new(false),
            }),
        }
    }

    /// Makes a camera's memory answerable (replacing an earlier one of the same id).
    pub fn set_camera(&self, memory: Arc<CameraMemory>) {
        let mut cams = self
            .inner
            .cameras
            .write()
            .unwrap_or_else(|p| p.into_inner());
        cams.insert(memory.camera.clone(), memory);
    }

    /// Forgets a camera (and its conversations).
    pub fn remove_camera(&self, id: &str) {
        let mut cams = self
            .inner
            .cameras
            .write()
            .unwrap_or_else(|p| p.into_inner());
        cams.remove(id);
        self.conversations().remove_camera(id);
    }

    fn conversations(&self) -> std::sync::MutexGuard<'_, Conversations> {
        self.inner
            .conversations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Conversations remembered now.
    pub fn conversation_count(&self) -> usize {
        self.conversations().len()
    }

    /// Ends generation in progress at the next token and refuses new questions (shutdown).
    pub fn cancel_all(&self) {
        self.inner.cancel.store(true, Ordering::Relaxed);
        self.inner.admission.close();
    }

    /// Waits until camera `id` has encoded frames (or is unknown), at most `timeout`.
    pub async fn wait_for_footage(&self, id: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            match self.camera(id) {
                Ok(cam) if cam.size().0 == 0 => {}
                _ => return,
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Takes a place among the questions being answered or waiting, or says `busy`.
    pub fn admit(&self) -> Result<Admission, QueryError> {
        let total = self.inner.cfg.concurrency as usize + self.inner.limits.queue;
        self.inner
            .admission
            .clone()
            .try_acquire_owned()
            .map(|slot| Admission { _slot: slot })
            .map_err(|_| {
                err(
                    ErrorCode::Busy,
                    format!(
                        "{total} questions are being answered or waiting (query.concurrency = {}, mqtt.query_queue = {}); ask again later",
                        self.inner.cfg.concurrency, self.inner.limits.queue
                    ),
                )
            })
    }

    /// Checks an in-process question into a [`ValidQuery`], with the rules and codes MQTT
    /// questions get (the cameras are those with a memory here).
    pub fn check(&self, req: &AskRequest) -> Result<ValidQuery, QueryError> {
        let cameras = {
            let cams = self.inner.cameras.read().unwrap_or_else(|p| p.into_inner());
            CameraDirectory::new(cams.values().map(|m| (m.camera.clone(), m.window)))
        };
        let limits = QueryLimits {
            max_bytes: usize::MAX,
            question_max_chars: self.inner.limits.question_max_chars,
            max_tokens: self.inner.limits.max_tokens,
        };
        ValidQuery::check(
            &req.camera,
            &req.question,
            req.window,
            req.max_tokens,
            req.conversation.clone(),
            req.received,
            &limits,
            &cameras,
        )
    }

    /// Checks and answers an admitted in-process question (see [`QueryService::ask_valid`]).
    pub async fn ask<D: Deltas>(
        &self,
        admission: Admission,
        request: AskRequest,
        out: D,
    ) -> (D, Result<AnswerReport, QueryError>) {
        match self.check(&request) {
            Ok(q) => self.ask_valid(admission, q, out).await,
            Err(e) => (out, Err(e)),
        }
    }

    /// Answers an admitted question: waits for a generation slot, then generates on a blocking
    /// thread, passing text to `out` as it comes. Returns `out` with the outcome.
    pub async fn ask_valid<D: Deltas>(
        &self,
        admission: Admission,
        query: ValidQuery,
        mut out: D,
    ) -> (D, Result<AnswerReport, QueryError>) {
        let running = match self.inner.running.clone().acquire_owned().await {
            Ok(p) => p,
            Err(_) => {
                let e = err(ErrorCode::Internal, "the runtime is shutting down");
                return (out, Err(e));
            }
        };
        let service = self.clone();
        let job = tokio::task::spawn_blocking(move || {
            let _held = (admission, running);
            let r = service.answer_valid(&query, &mut |d: &str| out.delta(d));
            (out, r)
        });
        match job.await {
            Ok(done) => done,
            Err(e) => {
                tracing::error!(error = %e, "Question crashed");
                // The output went down with the task; nothing more can be sent through it.
                std::panic::resume_unwind(e.into_panic())
            }
        }
    }

    /// Checks and answers a question on the calling thread (blocking), without admission control.
    pub fn answer(
        &self,
        req: &AskRequest,
        on_delta: &mut dyn FnMut(&str),
    ) -> Result<AnswerReport, QueryError> {
        let query = self.check(req)?;
        self.answer_valid(&query, on_delta)
    }

    /// Answers a valid question on the calling thread (blocking), without admission control.
    pub fn answer_valid(
        &self,
        query: &ValidQuery,
        on_delta: &mut dyn FnMut(&str),
    ) -> Result<AnswerReport, QueryError> {
        self.answer_seeing(query, Footage::Window, on_delta)
    }

    /// [`QueryService::answer_valid`] over the given footage only (a conversation is neither
    /// continued nor kept unless `footage` is the window).
    pub fn answer_seeing(
        &self,
        query: &ValidQuery,
        footage: Footage,
        on_delta: &mut dyn FnMut(&str),
    ) -> Result<AnswerReport, QueryError> {
        let cam = self.camera(query.camera())?;
        let result = self.answer_on(&cam, query, footage, on_delta);
        let stats = &cam.stats;
        match &result {
            Ok(r) => {
                WatchStats::bump(&stats.answers);
                stats.answer_first_token.observe(r.first_token);
                stats.answer_total.observe(r.total);
            }
            Err(e) if e.code == ErrorCode::Internal => WatchStats::bump(&stats.answer_errors),
            Err(_) => {}
        }
        result
    }

    fn camera(&self, id: &str) -> Result<Arc<CameraMemory>, QueryError> {
        let cams = self.inner.cameras.read().unwrap_or_else(|p| p.into_inner());
        cams.get(id).cloned().ok_or_else(|| {
            let known: Vec<&str> = cams.keys().map(String::as_str).collect();
            err(
                ErrorCode::UnknownCamera,
                format!(
                    "no camera `{}` with a memory (cameras: {})",
                    id.chars().take(64).collect::<String>(),
                    if known.is_empty() {
                        "none".into()
                    } else {
                        known.join(", ")
                    }
                ),
            )
        })
    }

    fn answer_on(
        &self,
        cam: &CameraMemory,
        req: &ValidQuery,
        footage: Footage,
        on_delta: &mut dyn FnMut(&str),
    ) -> Result<AnswerReport, QueryError> {
        let inner = &self.inner;
        let generator = match &inner.model {
            Ok(g) => g,
            Err(reason) => {
                return Err(err(
                    ErrorCode::NoModel,
                    format!("no model is loaded: {reason}"),
                ));
            }
        };
        let format = crate::family::stream(generator.engines().manifest().family)
            .map_err(|why| err(ErrorCode::NoModel, why))?;
        let conversation = req.conversation().filter(|_| footage == Footage::Window);
        let previous = self.take_conversation(cam, conversation)?;
        let snap = cam.snapshot();
        let Some(newest) = snap.frames.last().cloned() else {
            if let (Some(c), Some(id)) = (previous, conversation) {
                self.conversations().put(id.to_string(), c);
            }
            return Err(err(
                ErrorCode::NoFrames,
                format!(
                    "camera `{}` has no encoded frames yet (stopped, or just started)",
                    cam.camera
                ),
            ));
        };
        let window = req.window().min(cam.window);
        let mut start = match footage {
            Footage::Window => {
                self.start(generator, format, &snap, previous.as_ref(), &newest, window)?
            }
            Footage::Centre | Footage::Nothing => {
                let mut prompt = StreamPrompt::default();
                prompt
                    .head
                    .push(format.prefix(self.inner.system.as_deref()));
                if footage == Footage::Centre {
                    let in_window: Vec<&Arc<MemoryFrame>> = snap
                        .frames
                        .iter()
                        .filter(|f| newest.pts.saturating_sub(f.pts) < window)
                        .collect();
                    let centre = in_window
                        .get(in_window.len() / 2)
                        .copied()
                        .unwrap_or(&newest);
                    prompt.frames.push(centre.clone());
                }
                Start::fresh(prompt, generator)?
            }
        };
        start
            .prompt
            .tail
            .push(format.ask(Role::User, req.question()));
        let sp = &start.prompt;
        let first = start
            .first
            .or(sp.frames.first().map(|f| f.pts))
            .unwrap_or(newest.pts);
        let last = sp.frames.last().map_or(newest.pts, |f| f.pts).max(first);
        let frames = start.frames_before + sp.frames.len();
        let visual_tokens = start.visual_before + sp.frames.iter().map(|f| f.kept()).sum::<usize>();
        let last_seq = sp
            .frames
            .last()
            .map(|f| f.seq)
            .or(previous.as_ref().map(|c| c.last_seq))
            .or(snap.live.as_ref().and_then(|l| l.last_seq))
            .unwrap_or(newest.seq);
        let max_tokens = req.max_tokens().unwrap_or(inner.cfg.max_tokens);
        let (g, first_token) = self.generate(generator, &start, max_tokens, req, on_delta)?;
        let total = req.received().elapsed();
        let report = AnswerReport {
            text: g.text.clone(),
            finish: match g.stop {
                StopReason::EndOfTurn(_) => FinishReason::Stop,
                StopReason::TokenLimit | StopReason::ContextFull => FinishReason::MaxTokens,
            },
            window: (first, last),
            frames,
            visual_tokens,
            prompt_tokens: start.base.len() + g.prompt_tokens,
            generated_tokens: g.tokens.len(),
            first_token: first_token.unwrap_or(total),
            total,
            forked: start.forked,
            turn: start.turn,
        };
        if let Some(id) = conversation {
            let now = self.conversations().now();
            self.conversations().put(
                id.to_string(),
                conversation::Conversation {
                    camera: cam.camera.clone(),
                    ended: matches!(g.stop, StopReason::EndOfTurn(_)),
                    cache: g.cache,
                    unfed: g.unfed,
                    last_seq,
                    first_pts: first,
                    frames,
                    visual_tokens,
                    turns: start.turn,
                    last_used: now,
                },
            );
        }
        Ok(report)
    }

    /// The conversation a question continues, if it names a live one of this camera.
    fn take_conversation(
        &self,
        cam: &CameraMemory,
        id: Option<&str>,
    ) -> Result<Option<conversation::Conversation>, QueryError> {
        let Some(id) = id else { return Ok(None) };
        // The lock is released before the match: putting it back takes it again.
        let taken = self.conversations().take(id);
        match taken {
            Some(c) if c.camera != cam.camera => {
                let camera = c.camera.clone();
                // Put it back: the conversation is still valid for its own camera.
                self.conversations().put(id.to_string(), c);
                Err(err(
                    ErrorCode::InvalidField,
                    format!(
                        "conversation `{id}` belongs to camera `{camera}`, not `{}`",
                        cam.camera
                    ),
                ))
            }
            other => Ok(other),
        }
    }

    /// Where the prompt starts: a conversation, the live cache, or nothing (system turn), and
    /// the frames to add after it.
    fn start(
        &self,
        generator: &Generator,
        format: &dyn crate::family::StreamFormat,
        snap: &MemorySnapshot,
        previous: Option<&conversation::Conversation>,
        newest: &MemoryFrame,
        window: Duration,
    ) -> Result<Start, QueryError> {
        let mut prompt = StreamPrompt::default();
        if let Some(conv) = previous {
            prompt.tokens = conv.unfed.clone();
            prompt.head.push(conv.turn_close(format));
            prompt.frames = snap
                .frames
                .iter()
                .filter(|f| f.seq > conv.last_seq)
                .cloned()
                .collect();
            return Ok(Start {
                prompt,
                base: conv.cache.fork(),
                forked: false,
                first: Some(conv.first_pts),
                frames_before: conv.frames,
                visual_before: conv.visual_tokens,
                turn: conv.turns + 1,
            });
        }
        // Older footage in the cache is tolerated up to the slack's share of what was asked: a
        // short window is built from memory instead of forking a long cache.
        let t_start = newest.pts.saturating_sub(window);
        let slack = Duration::from_secs_f64(self.inner.slack * window.as_secs_f64());
        let live = snap
            .live
            .as_ref()
            .filter(|l| l.span.is_some_and(|(start, _)| start + slack >= t_start));
        if let Some(l) = live {
            prompt.frames = snap
                .frames
                .iter()
                .filter(|f| l.last_seq.is_none_or(|s| f.seq > s))
                .cloned()
                .collect();
            return Ok(Start {
                prompt,
                base: l.cache.fork(),
                forked: true,
                first: l.span.map(|s| s.0),
                frames_before: l.frames,
                visual_before: l.visual_tokens,
                turn: 1,
            });
        }
        prompt
            .head
            .push(format.prefix(self.inner.system.as_deref()));
        let in_window = |f: &MemoryFrame| newest.pts.saturating_sub(f.pts) < window;
        prompt.frames = fit_budget(
            snap.frames
                .iter()
                .filter(|f| in_window(f))
                .cloned()
                .collect(),
            self.inner.budget,
            crate::memory::live::template_positions(generator),
        );
        Start::fresh(prompt, generator)
    }

    /// Prefills the prompt on its base and decodes the answer, streaming it to `on_delta`;
    /// returns the generation and the time to its first token.
    fn generate(
        &self,
        generator: &Generator,
        start: &Start,
        max_tokens: u32,
        req: &ValidQuery,
        on_delta: &mut dyn FnMut(&str),
    ) -> Result<(Generation, Option<Duration>), QueryError> {
        let prompt = start.prompt.prompt(generator).map_err(internal)?;
        let opts = GenerateOptions {
            max_new_tokens: max_tokens as usize,
            ..GenerateOptions::default()
        };
        let d = match generator.start(&start.base, &prompt, &opts) {
            Ok(d) => d,
            Err(GenerateError::ContextFull { cached, new, max }) => {
                return Err(err(
                    ErrorCode::ContextFull,
                    format!(
                        "the conversation holds {cached} positions and this turn needs {new} more; the model's context is {max}: start a new conversation"
                    ),
                ));
            }
            Err(e) => return Err(internal(e)),
        };
        let run = d.run(&self.inner.cancel, on_delta).map_err(internal)?;
        if run.cut {
            // Cut by shutdown: a partial text must not pass for a finished answer.
            return Err(err(
                ErrorCode::Internal,
                format!(
                    "the runtime is shutting down; the answer was cut after {} tokens",
                    run.generation.tokens.len()
                ),
            ));
        }
        let first_token = run
            .first_token_at
            .map(|t| t.saturating_duration_since(req.received()));
        Ok((run.generation, first_token))
    }
}

/// Where an answer's prompt starts and what it adds.
struct Start {
    /// Frames and text after `base`.
    prompt: StreamPrompt,
    /// The cache it continues (a fork: the source is not changed).
    base: KvCache,
    /// `base` is the camera's live cache.
    forked: bool,
    /// Stream time of the first frame in `base`, if it has frames.
    first: Option<Duration>,
    /// Frames in `base`.
    frames_before: usize,
    /// Visual tokens in `base`.
    visual_before: usize,
    /// Turn number in its conversation.
    turn: u32,
}

impl Start {
    /// A first turn prefilled from nothing (no live cache, no conversation).
    fn fresh(prompt: StreamPrompt, generator: &Generator) -> Result<Start, QueryError> {
        Ok(Start {
            prompt,
            base: generator.empty_cache().map_err(internal)?,
            forked: false,
            first: None,
            frames_before: 0,
            visual_before: 0,
            turn: 1,
        })
    }
}

/// The newest frames that fit in `budget` positions (visual tokens plus `template` positions
/// per item).
fn fit_budget(
    mut frames: Vec<Arc<MemoryFrame>>,
    budget: usize,
    template: usize,
) -> Vec<Arc<MemoryFrame>> {
    let mut room = budget;
    let mut start = frames.len();
    for f in frames.iter().rev() {
        let need = f.kept() + template;
        if need > room {
            break;
        }
        room -= need;
        start -= 1;
    }
    frames.drain(..start);
    frames
}

fn internal(e: GenerateError) -> QueryError {
    tracing::error!(error = %e, "Answer failed");
    err(ErrorCode::Internal, format!("generation failed: {e}"))
}
