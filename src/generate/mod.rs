//! Generate: prefill (text and visual tokens interleaved), incremental prefill onto an existing
//! cache, and the decode loop with sampling, stop conditions and streamed text
//! (docs/ENGINES.md, "KV cache and generation").
//!
//! ```text
//! camera cache ──fork──► query cache ──prefill(question)──► decode ─► token, delta, token, delta …
//!      │                                                         stop: <|im_end|> / limit / context
//!      └─ untouched: forks share tensors and never write to them
//! ```

#![warn(missing_docs)]

mod cache;
mod detokenize;
mod prompt;
pub mod render;
mod sampling;

pub use cache::KvCache;
pub use detokenize::TextStream;
pub use prompt::{Piece, Prompt};
pub use sampling::{Sampler, Sampling, SamplingError, Temperature, TopK, TopP, Truncation, argmax};

use crate::engine::{EngineError, Engines, LogitRows};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What can go wrong while generating.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// An engine failed (see [`EngineError::kind`] for retry vs fatal).
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The prompt does not fit in the model's context after the cache.
    #[error("context full: {cached} cached + {new} new positions exceed max_context {max}")]
    ContextFull {
        /// Positions already cached.
        cached: usize,
        /// Positions the prompt adds.
        new: usize,
        /// The model's limit.
        max: usize,
    },
    /// The prompt has no tokens.
    #[error("the prompt is empty")]
    EmptyPrompt,
    /// A visual piece is not a whole number of tokens.
    #[error("a visual piece has {len} floats, not a multiple of the hidden size {hidden}")]
    BadVisual {
        /// Floats given.
        len: usize,
        /// Width of one token.
        hidden: usize,
    },
    /// No logit was a number (a broken model or cache).
    #[error("the decoder produced no usable logit (all NaN or no valid token id)")]
    NoToken,
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// A stop token (`<|im_end|>`, `<|endoftext|>`) was sampled; it is not in the text.
    EndOfTurn(u32),
    /// `max_new_tokens` were generated.
    TokenLimit,
    /// The cache reached the model's `max_context`.
    ContextFull,
}

/// Options of one generation.
#[derive(Debug, Clone)]
pub struct GenerateOptions {
    /// Most tokens to generate.
    pub max_new_tokens: usize,
    /// Greedy by default.
    pub sampling: Sampling,
    /// Tokens that end the answer; `None`: the manifest's `<|im_end|>` and `<|endoftext|>`.
    pub stop_tokens: Option<Vec<u32>>,
    /// Leave special tokens out of the text.
    pub skip_special: bool,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_new_tokens: 256,
            sampling: Sampling::Greedy,
            stop_tokens: None,
            skip_special: true,
        }
    }
}

/// The result of a prefill.
#[derive(Debug)]
pub struct Prefill {
    /// The cache extended by the prompt.
    pub cache: KvCache,
    /// Logits after the prompt's last position (`vocab` floats).
    pub logits: Vec<f32>,
    /// Positions the prompt added.
    pub tokens: usize,
    /// Time spent (embedding and decoder).
    pub elapsed: Duration,
}

/// A finished generation.
#[derive(Debug)]
pub struct Generation {
    /// The generated text (special tokens left out if asked).
    pub text: String,
    /// Every sampled token except a final stop token.
    pub tokens: Vec<u32>,
    /// Why it stopped.
    pub stop: StopReason,
    /// The cache: the prompt and the generated tokens that were fed back.
    pub cache: KvCache,
    /// Sampled tokens not in `cache` (the last token, or the stop token); prefill them to continue.
    pub unfed: Vec<u32>,
    /// Positions the prompt added.
    pub prompt_tokens: usize,
    /// Time to prefill the prompt.
    pub prefill_time: Duration,
    /// Time from the start to the first generated token.
    pub first_token_time: Option<Duration>,
    /// Time spent decoding after the prefill.
    pub decode_time: Duration,
}

/// A generation run by [`Decoding::run`].
#[derive(Debug)]
pub struct Streamed {
    /// What was generated.
    pub generation: Generation,
    /// When the first token came (a stop token counts), if one did.
    pub first_token_at: Option<Instant>,
    /// `cancel` ended it before the model stopped (the text is partial).
    pub cut: bool,
}

/// One generated token and the text it completed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenEvent {
    /// The token id.
    pub id: u32,
    /// Text that became complete with it (empty inside a multi-byte character or for a special
    /// token).
    pub delta: String,
}

/// Runs prompts and decode loops on shared [`Engines`].
#[derive(Debug, Clone)]
pub struct Generator {
    engines: Arc<Engines>,
}

impl Generator {
    /// A generator on loaded engines.
    pub fn new(engines: Arc<Engines>) -> Generator {
        Generator { engines }
    }

    /// The engines.
    pub fn engines(&self) -> &Engines {
        &self.engines
    }

    /// A cache with no positions.
    pub fn empty_cache(&self) -> Result<KvCache, GenerateError> {
        Ok(KvCache::new(self.engines.decoder().empty_cache()?, 0))
    }

    /// The prompt as decoder input: `(embeddings, positions)`, text tokenised piece by piece and
    /// embedded in one run.
    pub fn embed_prompt(&self, prompt: &Prompt<'_>) -> Result<(Vec<f32>, usize), GenerateError> {
        let hidden = self.engines.decoder().hidden();
        let tok = self.engines.tokenizer();
        // Token ids of all text pieces, then one embedding run, then interleave with visuals.
        let mut ids = Vec::new();
        let mut runs = Vec::with_capacity(prompt.pieces().len());
        for piece in prompt.pieces() {
            let start = ids.len();
            match piece {
                Piece::Text(text, special) => tok.encode_into(text, *special, &mut ids),
                Piece::Tokens(t) => ids.extend_from_slice(t),
                Piece::Visual(rows) => {
                    if rows.len() % hidden != 0 {
                        return Err(GenerateError::BadVisual {
                            len: rows.len(),
                            hidden,
                        });
                    }
                }
            }
            runs.push(start..ids.len());
        }
        let text_embeds = self.engines.embedder().embed(&ids)?;
        let visual: usize = prompt
            .pieces()
            .iter()
            .map(|p| match p {
                Piece::Visual(rows) => rows.len() / hidden,
                _ => 0,
            })
            .sum();
        let total = ids.len() + visual;
        let mut embeds = Vec::with_capacity(total * hidden);
        for (piece, run) in prompt.pieces().iter().zip(runs) {
            match piece {
                Piece::Visual(rows) => embeds.extend_from_slice(rows),
                _ => embeds.extend_from_slice(&text_embeds[run.start * hidden..run.end * hidden]),
            }
        }
        Ok((embeds, total))
    }

    /// Appends `prompt` to `cache` (which is left as it is) and returns the longer cache with the
    /// logits after its last position. Long prompts run in chunks of `prefill_chunk_tokens`.
    pub fn prefill(&self, cache: &KvCache, prompt: &Prompt<'_>) -> Result<Prefill, GenerateError> {
        let t0 = Instant::now();
        let (embeds, n) = self.embed_prompt(prompt)?;
        let (cache, logits) = self.prefill_embeds(cache, &embeds, n)?;
        Ok(Prefill {
            cache,
            logits,
            tokens: n,
            elapsed: t0.elapsed(),
        })
    }

    /// Like [`Generator::prefill`] from ready embeddings (`n * hidden` floats).
    pub fn prefill_embeds(
        &self,
        cache: &KvCache,
        embeds: &[f32],
        n: usize,
    ) -> Result<(KvCache, Vec<f32>), GenerateError> {
        let decoder = self.engines.decoder();
        let hidden = decoder.hidden();
        if n == 0 {
            return Err(GenerateError::EmptyPrompt);
        }
        if cache.len() + n > decoder.max_context() {
            return Err(GenerateError::ContextFull {
                cached: cache.len(),
                new: n,
                max: decoder.max_context(),
            });
        }
        let chunk = self.engines.prefill_chunk_tokens();
        let mut current = cache.clone();
        let mut logits = Vec::new();
        let mut done = 0;
        while done < n {
            let s = chunk.min(n - done);
            let start = current.next_position();
            let positions: Vec<i64> = (start..start + s as i64).collect();
            let out = decoder.forward(
                current.past(),
                &embeds[done * hidden..(done + s) * hidden],
                &positions,
                LogitRows::Last,
            )?;
            current = KvCache::new(out.present, start + s as i64);
            logits = out.logits;
            done += s;
        }
        Ok((current, logits))
    }

    /// Prefills `prompt` after `cache` and returns a decode loop to pull tokens from.
    pub fn start(
        &self,
        cache: &KvCache,
        prompt: &Prompt<'_>,
        options: &GenerateOptions,
    ) -> Result<Decoding<'_>, GenerateError> {
        let started = Instant::now();
        let prefill = self.prefill(cache, prompt)?;
        let m = self.engines.manifest();
        let stop_tokens = options
            .stop_tokens
            .clone()
            .unwrap_or_else(|| m.family.stop_tokens(&m.special_tokens));
        Ok(Decoding {
            generator: self,
            cache: prefill.cache,
            logits: prefill.logits,
            pending: None,
            sampler: Sampler::new(options.sampling),
            stream: TextStream::new(options.skip_special),
            text: String::new(),
            tokens: Vec::new(),
            stop_tokens,
            max_new_tokens: options.max_new_tokens,
            stop: None,
            unfed: Vec::new(),
            prompt_tokens: prefill.tokens,
            prefill_time: prefill.elapsed,
            started,
            first_token_time: None,
            embed_buf: Vec::new(),
        })
    }

    /// Generates to the end, calling `on_delta` with each non-empty piece of text.
    pub fn generate(
        &self,
        cache: &KvCache,
        prompt: &Prompt<'_>,
        options: &GenerateOptions,
        mut on_delta: impl FnMut(&str),
    ) -> Result<Generation, GenerateError> {
        let mut d = self.start(cache, prompt, options)?;
        while let Some(event) = d.next_token()? {
            if !event.delta.is_empty() {
                on_delta(&event.delta);
            }
        }
        let tail = d.flush();
        if !tail.is_empty() {
            on_delta(&tail);
        }
        Ok(d.finish())
    }
}

/// A decode loop in progress; pull tokens with [`Decoding::next_token`].
///
/// A sampled token is fed to the decoder on the next call, not before it is returned, so each
/// token's text reaches the caller one decoder step earlier.
pub struct Decoding<'g> {
    generator: &'g Generator,
    cache: KvCache,
    logits: Vec<f32>,
    pending: Option<u32>,
    sampler: Sampler,
    stream: TextStream,
    text: String,
    tokens: Vec<u32>,
    stop_tokens: Vec<u32>,
    max_new_tokens: usize,
    stop: Option<StopReason>,
    unfed: Vec<u32>,
    prompt_tokens: usize,
    prefill_time: Duration,
    started: Instant,
    first_token_time: Option<Duration>,
    embed_buf: Vec<f32>,
}

impl std::fmt::Debug for Decoding<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoding")
            .field("cache", &self.cache)
            .field("tokens", &self.tokens.len())
            .field("stop", &self.stop)
            .finish_non_exhaustive()
    }
}

impl Decoding<'_> {
    /// The next token, or `None` once stopped (see [`Decoding::stop_reason`]).
    pub fn next_token(&mut self) -> Result<Option<TokenEvent>, GenerateError> {
        if self.stop.is_some() {
            return Ok(None);
        }
        if let Some(id) = self.pending.take() {
            let decoder = self.generator.engines.decoder();
            if self.cache.len() + 1 > decoder.max_context() {
                self.unfed.push(id);
                self.stop = Some(StopReason::ContextFull);
                return Ok(None);
            }
            self.embed_buf.clear();
            self.generator
                .engines
                .embedder()
                .embed_into(&[id], &mut self.embed_buf)?;
            let pos = self.cache.next_position();
            let out =
                decoder.forward(self.cache.past(), &self.embed_buf, &[pos], LogitRows::Last)?;
            self.cache = KvCache::new(out.present, pos + 1);
            self.logits = out.logits;
        }
        if self.tokens.len() >= self.max_new_tokens {
            self.stop = Some(StopReason::TokenLimit);
            return Ok(None);
        }
        let tok = self.generator.engines.tokenizer();
        let id = self
            .sampler
            .sample(&self.logits, |id| tok.has_id(id))
            .ok_or(GenerateError::NoToken)?;
        if self.first_token_time.is_none() {
            self.first_token_time = Some(self.started.elapsed());
        }
        if self.stop_tokens.contains(&id) {
            self.unfed.push(id);
            self.stop = Some(StopReason::EndOfTurn(id));
            return Ok(None);
        }
        self.tokens.push(id);
        let delta = self.stream.push(tok, id);
        self.text.push_str(&delta);
        if self.tokens.len() >= self.max_new_tokens {
            // Nothing more will be sampled, so the token need not be fed.
            self.unfed.push(id);
            self.stop = Some(StopReason::TokenLimit);
        } else {
            self.pending = Some(id);
        }
        Ok(Some(TokenEvent { id, delta }))
    }

    /// The logits the next token will be chosen from (after the prompt, then after each token
    /// fed back).
    pub fn logits(&self) -> &[f32] {
        &self.logits
    }

    /// Why it stopped, once it has.
    pub fn stop_reason(&self) -> Option<StopReason> {
        self.stop
    }

    /// The cache so far.
    pub fn cache(&self) -> &KvCache {
        &self.cache
    }

    /// Tokens generated so far.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Ends the text stream: an unfinished character at the end becomes U+FFFD. Returns that last
    /// piece of text (usually empty); [`Decoding::finish`] does this too.
    pub fn flush(&mut self) -> String {
        let tail = self.stream.finish();
        self.text.push_str(&tail);
        tail
    }

    /// The decode loop narration and questions share: pulls tokens until the model stops or
    /// `cancel` is set, passing each non-empty piece of text (and the flushed tail) to `on_delta`.
    /// `cut` in the result says `cancel` ended it before the model stopped.
    pub fn run(
        mut self,
        cancel: &std::sync::atomic::AtomicBool,
        on_delta: &mut dyn FnMut(&str),
    ) -> Result<Streamed, GenerateError> {
        let mut first_token_at = None;
        while !cancel.load(std::sync::atomic::Ordering::Relaxed) {
            match self.next_token()? {
                Some(event) => {
                    first_token_at.get_or_insert_with(Instant::now);
                    if !event.delta.is_empty() {
                        on_delta(&event.delta);
                    }
                }
                None => break,
            }
        }
        let cut = self.stop.is_none();
        if self.stop.is_some() {
            // Stopped at once (the first token was a stop token): that was the first token.
            first_token_at.get_or_insert_with(Instant::now);
        }
        let tail = self.flush();
        if !tail.is_empty() {
            on_delta(&tail);
        }
        Ok(Streamed {
            generation: self.finish(),
            first_token_at,
            cut,
        })
    }

    /// Ends the loop (early if it has not stopped: then the reason is [`StopReason::TokenLimit`]).
    pub fn finish(mut self) -> Generation {
        self.flush();
        if let Some(id) = self.pending.take() {
            self.unfed.push(id);
        }
        let decode_time = self.started.elapsed().saturating_sub(self.prefill_time);
        Generation {
            text: self.text,
            tokens: self.tokens,
            stop: self.stop.unwrap_or(StopReason::TokenLimit),
            cache: self.cache,
            unfed: self.unfed,
            prompt_tokens: self.prompt_tokens,
            prefill_time: self.prefill_time,
            first_token_time: self.first_token_time,
            decode_time,
        }
    }
}
