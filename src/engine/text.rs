//! The token embedding and the decoder with its KV cache tensors.
//!
//! The decoder's `present.*` outputs of one call are the `past_key_values.*` inputs of the next,
//! read in place: no copy on our side. On the CPU the decoder writes them into a block of its
//! [`CachePool`] (outside ONNX Runtime's arena, so that the arena holds only each run's own
//! buffers; `engine.cache_memory`, docs/RELIABILITY.md, "Memory over a long run"); on a GPU
//! provider, with `IoBinding`, they are allocated where the provider computes, so the cache never
//! crosses to the host between tokens; only the logits do. The graph still concatenates past and
//! new keys inside each call (the exported contract has no fixed-capacity cache to write into),
//! which is the one copy per token left; docs/ENGINES.md says how a shared-buffer export would
//! remove it.

use super::cache_pool::{CacheBlock, CachePool, CachePoolStats};
use super::error::EngineError;
use super::manifest::{Manifest, TextSpec};
use super::provider;
use super::stats::EngineStats;
use crate::config::{CacheMemory, ProviderKind};
use ort::AsPointer;
use ort::memory::MemoryInfo;
use ort::session::{IoBinding, Session};
use ort::value::{DynTensor, DynTensorValueType, Shape, Tensor, TensorRefMut};
use std::ffi::CString;
use std::sync::{Arc, Mutex};
use std::time::Instant;

const EMBED: &str = "token embedding";
const DECODER: &str = "decoder";

/// The token embedding model.
pub struct Embedder {
    session: Mutex<Session>,
    input: String,
    output: String,
    hidden: usize,
    vocab: u32,
    stats: Arc<EngineStats>,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("hidden", &self.hidden)
            .field("vocab", &self.vocab)
            .finish_non_exhaustive()
    }
}

impl Embedder {
    pub(crate) fn new(session: Session, m: &Manifest, stats: Arc<EngineStats>) -> Embedder {
        Embedder {
            session: Mutex::new(session),
            input: m.text.input_ids.clone(),
            output: m.text.inputs_embeds.clone(),
            hidden: m.text.hidden_size as usize,
            vocab: m.text.vocab_size,
            stats,
        }
    }

    /// Embeddings of `ids`, `ids.len() * hidden` floats.
    pub fn embed(&self, ids: &[u32]) -> Result<Vec<f32>, EngineError> {
        let mut out = Vec::with_capacity(ids.len() * self.hidden);
        self.embed_into(ids, &mut out)?;
        Ok(out)
    }

    /// Appends the embeddings of `ids` to `out`.
    pub fn embed_into(&self, ids: &[u32], out: &mut Vec<f32>) -> Result<(), EngineError> {
        if ids.is_empty() {
            return Ok(());
        }
        if let Some(bad) = ids.iter().find(|&&id| id >= self.vocab) {
            return Err(EngineError::input(
                EMBED,
                format!("token id {bad} is outside the vocabulary ({})", self.vocab),
            ));
        }
        let input = Tensor::from_array((
            [1, ids.len()],
            ids.iter().map(|&i| i64::from(i)).collect::<Vec<i64>>(),
        ))
        .map_err(|e| EngineError::run(EMBED, e))?;
        let mut session = self.session.lock().unwrap_or_else(|p| p.into_inner());
        // From after the lock: waiting for another camera's run is not this run's cost.
        let started = Instant::now();
        let outputs = session
            .run(ort::inputs![self.input.as_str() => input])
            .map_err(|e| EngineError::run(EMBED, e))?;
        let value = outputs
            .get(&self.output)
            .ok_or_else(|| EngineError::run(EMBED, format!("no output `{}`", self.output)))?;
        let (shape, data) = value
            .try_extract_tensor::<f32>()
            .map_err(|e| EngineError::run(EMBED, e))?;
        let want = [1, ids.len() as i64, self.hidden as i64];
        if **shape != want {
            return Err(EngineError::run(
                EMBED,
                format!("output has shape {shape}, expected {want:?}"),
            ));
        }
        out.extend_from_slice(data);
        self.stats.record_embed(ids.len(), started.elapsed());
        Ok(())
    }
}

/// Where a cache's tensors are.
enum KvStore {
    /// The CPU provider's: one block of the decoder's [`CachePool`], outside ONNX Runtime's arena.
    Host(CacheBlock),
    /// Another provider's: the decoder's own outputs, in the memory it computes in.
    Device(Vec<DynTensor>),
}

/// The KV cache tensors of every layer after some number of positions.
///
/// Immutable once made: a decoder call returns a new one and leaves its input untouched, which is
/// what makes sharing one between a camera and its queries safe.
pub struct PastKv {
    /// `k0, v0, k1, v1, …`, each `[1, kv_heads, len, head_dim]`.
    store: KvStore,
    tensors: usize,
    kv_heads: usize,
    head_dim: usize,
    len: usize,
    bytes_per_position: usize,
}

impl std::fmt::Debug for PastKv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PastKv {{ len: {}, layers: {}, bytes: {} }}",
            self.len,
            self.tensors / 2,
            self.bytes()
        )
    }
}

impl PastKv {
    /// Cached positions.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes held by the tensors.
    pub fn bytes(&self) -> usize {
        self.len * self.bytes_per_position
    }

    /// Whether both hold the very same tensors (a fork that has not diverged).
    pub fn same_tensors(&self, other: &PastKv) -> bool {
        match (&self.store, &other.store) {
            (KvStore::Host(a), KvStore::Host(b)) => {
                self.len == other.len && std::ptr::eq(a.addr(), b.addr())
            }
            (KvStore::Device(a), KvStore::Device(b)) => {
                a.len() == b.len()
                    && a.iter()
                        .zip(b)
                        .all(|(a, b)| std::ptr::eq(a.data_ptr(), b.data_ptr()))
            }
            _ => false,
        }
    }
}

/// The decoder's rotary positions as HF's default RoPE applies them (`rotate_half` layout: the
/// pair `(i, i + head_dim / 2)` of a key turns by `position * inv_freq[i]`, `inv_freq[i] =
/// theta^(-2i / head_dim)`, the whole head rotated). The cache holds keys after rotation, so a
/// key can be moved to another position by turning it by the difference: what lets an eviction
/// policy renumber the kept positions without recomputing them (docs/ARCHITECTURE.md, "Cache
/// policies").
#[derive(Debug, Clone, PartialEq)]
pub struct Rope {
    inv_freq: Vec<f64>,
}

impl Rope {
    /// The default RoPE of `theta` over heads of `head_dim` (even).
    pub fn new(theta: f64, head_dim: usize) -> Rope {
        let half = head_dim / 2;
        Rope {
            inv_freq: (0..half)
                .map(|i| theta.powf(-(2.0 * i as f64) / head_dim as f64))
                .collect(),
        }
    }

    /// `(cos, sin)` of each pair's angle for a move of `shift` positions.
    fn turn(&self, shift: i64) -> Vec<(f32, f32)> {
        self.inv_freq
            .iter()
            .map(|f| {
                let (s, c) = (shift as f64 * f).sin_cos();
                (c as f32, s as f32)
            })
            .collect()
    }
}

impl Rope {
    /// Whether keys of width `dim` are this RoPE's rotary pairs.
    fn check_width(&self, dim: usize) -> Result<(), EngineError> {
        if dim == 2 * self.inv_freq.len() {
            return Ok(());
        }
        Err(EngineError::input(
            DECODER,
            format!(
                "keys of width {dim} for rotary pairs of {}",
                self.inv_freq.len()
            ),
        ))
    }
}

/// Writes `row` (one head's key) turned by `turn` to `out`: the pair `(i, i + d/2)` rotated by
/// its angle.
fn turn_into(row: &[f32], turn: &[(f32, f32)], out: &mut [f32]) {
    let half = row.len() / 2;
    for (i, &(c, s)) in turn.iter().enumerate() {
        let (x1, x2) = (row[i], row[i + half]);
        out[i] = x1 * c - x2 * s;
        out[i + half] = x2 * c + x1 * s;
    }
}

impl PastKv {
    /// Cache tensor `j` as host data `[heads, len, dim]`, its shape checked for a device one.
    fn host_data(&self, j: usize) -> Result<&[f32], EngineError> {
        let value = match &self.store {
            KvStore::Host(block) => return Ok(block.tensor(j, self.len)),
            KvStore::Device(values) => &values[j],
        };
        let (shape, data) = value
            .try_extract_tensor::<f32>()
            .map_err(|e| EngineError::run(DECODER, e))?;
        match **shape {
            [1, h, l, d]
                if l as usize == self.len
                    && h as usize == self.kv_heads
                    && d as usize == self.head_dim =>
            {
                Ok(data)
            }
            _ => Err(EngineError::run(
                DECODER,
                format!(
                    "a cache tensor has shape {shape}, expected [1, {}, {}, {}]",
                    self.kv_heads, self.len, self.head_dim
                ),
            )),
        }
    }

    /// A cache of only the positions in `keep` (ascending, disjoint ranges, in that order), the
    /// keys of each range moved by its shift in positions (`-3`: three positions earlier); values
    /// are copied as they are. Needs the tensors in host memory (the CPU provider); a cache in
    /// device memory is refused, and the caller rebuilds instead.
    pub fn select(
        &self,
        keep: &[(std::ops::Range<usize>, i64)],
        rope: &Rope,
    ) -> Result<PastKv, EngineError> {
        let mut last = 0;
        for (r, _) in keep {
            if r.start < last || r.end < r.start || r.end > self.len {
                return Err(EngineError::input(
                    DECODER,
                    format!(
                        "positions {r:?} to keep are not ascending within the cache's {}",
                        self.len
                    ),
                ));
            }
            last = r.end;
        }
        let len: usize = keep.iter().map(|(r, _)| r.len()).sum();
        let turns: Vec<Vec<(f32, f32)>> = keep.iter().map(|&(_, shift)| rope.turn(shift)).collect();
        let (cached, heads, dim) = (self.len, self.kv_heads, self.head_dim);
        rope.check_width(dim)?;
        // Tensor `j` of the new cache into `out` (`heads * len * dim` floats).
        let fill = |j: usize, out: &mut [f32]| -> Result<(), EngineError> {
            let data = self.host_data(j)?;
            let key = j.is_multiple_of(2);
            let mut at = 0;
            for h in 0..heads {
                for ((r, shift), turn) in keep.iter().zip(&turns) {
                    let rows = &data[(h * cached + r.start) * dim..(h * cached + r.end) * dim];
                    let to = &mut out[at..at + rows.len()];
                    at += rows.len();
                    if !key || *shift == 0 {
                        to.copy_from_slice(rows);
                        continue;
                    }
                    for (row, to) in rows.chunks_exact(dim).zip(to.chunks_exact_mut(dim)) {
                        turn_into(row, turn, to);
                    }
                }
            }
            Ok(())
        };
        let store = match &self.store {
            KvStore::Host(block) => {
                let mut out = block
                    .pool()
                    .take(len)
                    .map_err(|e| EngineError::run(DECODER, format!("cache memory: {e}")))?;
                for j in 0..self.tensors {
                    fill(j, out.tensor_mut(j, len))?;
                }
                KvStore::Host(out)
            }
            KvStore::Device(_) => {
                let mut values = Vec::with_capacity(self.tensors);
                for j in 0..self.tensors {
                    let mut out = vec![0.0f32; heads * len * dim];
                    fill(j, &mut out)?;
                    values.push(
                        Tensor::<f32>::from_array(([1, heads, len, dim], out))
                            .map(Tensor::upcast)
                            .map_err(|e| EngineError::run(DECODER, e))?,
                    );
                }
                KvStore::Device(values)
            }
        };
        Ok(PastKv {
            store,
            len,
            tensors: self.tensors,
            kv_heads: heads,
            head_dim: dim,
            bytes_per_position: self.bytes_per_position,
        })
    }

    /// Scores for compressing the cache (InfiniPot-V's two criteria, averaged over every layer):
    /// for each `(a, b)` of `pairs` the cosine similarity of the keys at positions `a` and `b`
    /// with RoPE taken off (each key turned back to position 0, so the similarity is of the
    /// tokens, not of where they sit), all heads of a layer as one vector; and for each of
    /// `positions` the L2 norm of its values, all heads of a layer as one vector. Host memory
    /// only, like [`PastKv::select`].
    pub fn scores(
        &self,
        pairs: &[(usize, usize)],
        positions: &[usize],
        rope: &Rope,
    ) -> Result<(Vec<f32>, Vec<f32>), EngineError> {
        if let Some(bad) = pairs
            .iter()
            .flat_map(|&(a, b)| [a, b])
            .chain(positions.iter().copied())
            .find(|&p| p >= self.len)
        {
            return Err(EngineError::input(
                DECODER,
                format!("position {bad} to score is past the cache's {}", self.len),
            ));
        }
        // The turn back to position 0 of every position a pair names, once for all layers.
        let mut back: std::collections::HashMap<usize, Vec<(f32, f32)>> =
            std::collections::HashMap::new();
        for &p in pairs.iter().flat_map(|(a, b)| [a, b]) {
            back.entry(p).or_insert_with(|| rope.turn(-(p as i64)));
        }
        let cached = self.len;
        let layers = (self.tensors / 2).max(1) as f32;
        let (heads, dim) = (self.kv_heads, self.head_dim);
        let mut sims = vec![0.0f32; pairs.len()];
        let mut norms = vec![0.0f32; positions.len()];
        for j in 0..self.tensors {
            let data = self.host_data(j)?;
            let row =
                |h: usize, p: usize| &data[(h * cached + p) * dim..(h * cached + p + 1) * dim];
            if j % 2 == 1 {
                for (n, &p) in norms.iter_mut().zip(positions) {
                    let sq: f32 = (0..heads).flat_map(|h| row(h, p)).map(|x| x * x).sum();
                    *n += sq.sqrt() / layers;
                }
                continue;
            }
            rope.check_width(dim)?;
            // Keys of one position, all heads, turned back to position 0.
            let unrotated = |p: usize, out: &mut Vec<f32>| {
                out.clear();
                for h in 0..heads {
                    let at = out.len();
                    out.resize(at + dim, 0.0);
                    turn_into(row(h, p), &back[&p], &mut out[at..]);
                }
            };
            let (mut ka, mut kb) = (Vec::new(), Vec::new());
            for (sim, &(a, b)) in sims.iter_mut().zip(pairs) {
                unrotated(a, &mut ka);
                unrotated(b, &mut kb);
                let dot: f32 = ka.iter().zip(&kb).map(|(x, y)| x * y).sum();
                let na: f32 = ka.iter().map(|x| x * x).sum::<f32>().sqrt();
                let nb: f32 = kb.iter().map(|x| x * x).sum::<f32>().sqrt();
                *sim += dot / (na * nb).max(f32::MIN_POSITIVE) / layers;
            }
        }
        Ok((sims, norms))
    }
}

struct DecoderState {
    session: Session,
    binding: IoBinding,
}

/// The decoder session; one call appends `S` positions to a cache.
pub struct Decoder {
    state: Mutex<DecoderState>,
    hidden: usize,
    vocab: usize,
    kv_heads: usize,
    head_dim: usize,
    max_context: usize,
    embeds_name: String,
    mask_name: String,
    positions_name: String,
    logits_name: String,
    past_names: Vec<String>,
    /// `past_names` for ONNX Runtime's C API (pooled caches are bound through it).
    past_cnames: Vec<CString>,
    present_names: Vec<String>,
    /// The CPU provider's cache memory; `None`: caches stay in the provider's own memory.
    pool: Option<Arc<CachePool>>,
    cache_memory: MemoryInfo<'static>,
    host_memory: MemoryInfo<'static>,
    bytes_per_position: usize,
    rope: Option<Rope>,
    stats: Arc<EngineStats>,
}

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder")
            .field("layers", &(self.past_names.len() / 2))
            .field("hidden", &self.hidden)
            .field("vocab", &self.vocab)
            .field("max_context", &self.max_context)
            .finish_non_exhaustive()
    }
}

/// Which logits rows a decoder call returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogitRows {
    /// Only the last position's (what generation needs).
    Last,
    /// Every new position's (for checks and scoring).
    All,
}

/// The result of one decoder call.
#[derive(Debug)]
pub struct DecoderOutput {
    /// Logits, row-major, `rows x vocab`.
    pub logits: Vec<f32>,
    /// Rows in `logits`.
    pub rows: usize,
    /// The cache extended by the call's positions.
    pub present: PastKv,
}

impl Decoder {
    pub(crate) fn new(
        session: Session,
        m: &Manifest,
        provider: ProviderKind,
        device_id: i32,
        cache_memory: CacheMemory,
        stats: Arc<EngineStats>,
    ) -> Result<Decoder, EngineError> {
        let t = &m.text;
        let binding = session
            .create_binding()
            .map_err(|e| EngineError::run(DECODER, e))?;
        let mut past_names = Vec::new();
        let mut present_names = Vec::new();
        for i in 0..t.num_layers {
            past_names.push(TextSpec::layer_name(&t.past_key, i));
            past_names.push(TextSpec::layer_name(&t.past_value, i));
            present_names.push(TextSpec::layer_name(&t.present_key, i));
            present_names.push(TextSpec::layer_name(&t.present_value, i));
        }
        let memory_error = |e: ort::Error| EngineError::run(DECODER, e);
        let past_cnames = past_names
            .iter()
            .map(|n| {
                CString::new(n.as_str()).map_err(|_| {
                    EngineError::input(DECODER, format!("input name `{n}` holds a NUL byte"))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let pool =
            (provider == ProviderKind::Cpu && cache_memory == CacheMemory::Pool).then(|| {
                CachePool::new(
                    past_names.len(),
                    t.num_kv_heads as usize * t.head_dim as usize,
                )
            });
        Ok(Decoder {
            state: Mutex::new(DecoderState { session, binding }),
            hidden: t.hidden_size as usize,
            vocab: t.vocab_size as usize,
            kv_heads: t.num_kv_heads as usize,
            head_dim: t.head_dim as usize,
            max_context: t.max_context as usize,
            embeds_name: t.inputs_embeds.clone(),
            mask_name: t.attention_mask.clone(),
            positions_name: t.position_ids.clone(),
            logits_name: t.logits.clone(),
            past_names,
            past_cnames,
            present_names,
            pool,
            cache_memory: provider::device_memory(provider, device_id).map_err(memory_error)?,
            host_memory: provider::host_memory().map_err(memory_error)?,
            bytes_per_position: m.kv_bytes_per_position(),
            rope: t
                .rope_theta
                .map(|theta| Rope::new(theta, t.head_dim as usize)),
            stats,
        })
    }

    /// The decoder's rotary positions (`None`: the manifest gives no `rope_theta`, so cached
    /// positions cannot be renumbered).
    pub fn rope(&self) -> Option<&Rope> {
        self.rope.as_ref()
    }

    /// Logits width.
    pub fn vocab(&self) -> usize {
        self.vocab
    }

    /// Width of `inputs_embeds`.
    pub fn hidden(&self) -> usize {
        self.hidden
    }

    /// Most positions a cache may hold.
    pub fn max_context(&self) -> usize {
        self.max_context
    }

    /// The cache pool's counters (`None`: caches live in a GPU provider's memory).
    pub fn cache_pool(&self) -> Option<CachePoolStats> {
        self.pool.as_ref().map(|p| p.stats())
    }

    fn cache(&self, store: KvStore, len: usize) -> PastKv {
        PastKv {
            store,
            tensors: self.past_names.len(),
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            len,
            bytes_per_position: self.bytes_per_position,
        }
    }

    /// A cache with no positions (the first call's `[1, kv_heads, 0, head_dim]` tensors).
    pub fn empty_cache(&self) -> Result<PastKv, EngineError> {
        if let Some(pool) = &self.pool {
            let block = pool
                .take(0)
                .map_err(|e| EngineError::run(DECODER, format!("cache memory: {e}")))?;
            return Ok(self.cache(KvStore::Host(block), 0));
        }
        let values = (0..self.past_names.len())
            .map(|_| {
                Tensor::<f32>::from_array(([1, self.kv_heads, 0, self.head_dim], Vec::<f32>::new()))
                    .map(Tensor::upcast)
            })
            .collect::<Result<Vec<DynTensor>, _>>()
            .map_err(|e| EngineError::run(DECODER, e))?;
        Ok(self.cache(KvStore::Device(values), 0))
    }

    /// Views of a pooled block's first `len` positions, as ONNX Runtime tensors.
    fn views(
        &self,
        block: &CacheBlock,
        len: usize,
    ) -> Result<Vec<TensorRefMut<'static, f32>>, EngineError> {
        (0..self.past_names.len())
            .map(|j| {
                let shape = Shape::new([1, self.kv_heads as i64, len as i64, self.head_dim as i64]);
                // SAFETY: the block holds `len` positions of tensor `j` from this address, in
                // host memory; every view is dropped in `forward` before the block can be.
                unsafe {
                    TensorRefMut::<f32>::from_raw(
                        self.host_memory.clone(),
                        block.tensor_ptr(j).cast(),
                        shape,
                    )
                }
                .map_err(|e| EngineError::run(DECODER, e))
            })
            .collect()
    }

    /// Runs `S = positions.len()` new positions (`embeds` is `S * hidden` floats) after `past`.
    pub fn forward(
        &self,
        past: &PastKv,
        embeds: &[f32],
        positions: &[i64],
        rows: LogitRows,
    ) -> Result<DecoderOutput, EngineError> {
        let s = positions.len();
        if s == 0 {
            return Err(EngineError::input(DECODER, "no positions to run"));
        }
        if embeds.len() != s * self.hidden {
            return Err(EngineError::input(
                DECODER,
                format!(
                    "{} embedding floats for {s} positions of width {}",
                    embeds.len(),
                    self.hidden
                ),
            ));
        }
        let total = past.len + s;
        if total > self.max_context {
            return Err(EngineError::input(
                DECODER,
                format!(
                    "{total} positions exceed the model's max_context of {}",
                    self.max_context
                ),
            ));
        }
        let host = matches!(past.store, KvStore::Host(_));
        if past.tensors != self.past_names.len()
            || past.kv_heads != self.kv_heads
            || past.head_dim != self.head_dim
            || host != self.pool.is_some()
        {
            return Err(EngineError::input(
                DECODER,
                "the cache was made by another model".to_string(),
            ));
        }
        let run = |e: ort::Error| EngineError::run(DECODER, e);
        let embeds = Tensor::from_array(([1, s, self.hidden], embeds.to_vec())).map_err(run)?;
        let mask = Tensor::from_array(([1, total], vec![1i64; total])).map_err(run)?;
        let positions = Tensor::from_array(([1, s], positions.to_vec())).map_err(run)?;
        // The CPU provider's: the new cache's block, and views of both caches for ONNX Runtime.
        let (block, past_views, present_views) = match (&self.pool, &past.store) {
            (Some(pool), KvStore::Host(past_block)) => {
                let block = pool
                    .take(total)
                    .map_err(|e| EngineError::run(DECODER, format!("cache memory: {e}")))?;
                let past_views = self.views(past_block, past.len)?;
                let present_views = self.views(&block, total)?;
                (Some(block), past_views, present_views)
            }
            _ => (None, Vec::new(), Vec::new()),
        };

        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let DecoderState { session, binding } = &mut *state;
        // From after the lock: waiting for another camera's run is not this run's cost.
        let started = Instant::now();
        binding.clear();
        let result = (|| {
            binding
                .bind_input(&self.embeds_name, &embeds)
                .map_err(run)?;
            binding.bind_input(&self.mask_name, &mask).map_err(run)?;
            binding
                .bind_input(&self.positions_name, &positions)
                .map_err(run)?;
            match &past.store {
                KvStore::Host(_) => {
                    for (name, view) in self.past_cnames.iter().zip(&past_views) {
                        bind_input_view(binding, name, view)?;
                    }
                }
                KvStore::Device(values) => {
                    for (name, value) in self.past_names.iter().zip(values) {
                        // A session output is bound by reference: ONNX Runtime reads it in place.
                        binding.bind_input(name, value).map_err(run)?;
                    }
                }
            }
            if block.is_some() {
                // ONNX Runtime writes the new cache into the pooled block.
                // The binding holds each view's tensor until it is cleared.
                for (name, view) in self.present_names.iter().zip(present_views) {
                    binding.bind_output(name, view).map_err(run)?;
                }
            } else {
                // Re-bound every call: a bound output keeps its buffer, and the cache grows.
                for name in &self.present_names {
                    binding
                        .bind_output_to_device(name, &self.cache_memory)
                        .map_err(run)?;
                }
            }
            binding
                .bind_output_to_device(&self.logits_name, &self.host_memory)
                .map_err(run)?;
            let mut outputs = session.run_binding(binding).map_err(run)?;
            let mut values = Vec::with_capacity(self.present_names.len());
            for name in &self.present_names {
                let value = outputs
                    .remove(name.as_str())
                    .ok_or_else(|| EngineError::run(DECODER, format!("no output `{name}`")))?;
                values.push(value.downcast::<DynTensorValueType>().map_err(run)?);
            }
            if let Some(shape) = values.first().and_then(|v| v.dtype().tensor_shape()) {
                let want = [1, self.kv_heads as i64, total as i64, self.head_dim as i64];
                if **shape != want {
                    return Err(EngineError::run(
                        DECODER,
                        format!(
                            "`{}` has shape {shape}, expected {want:?}",
                            self.present_names[0]
                        ),
                    ));
                }
            }
            let logits_value = outputs.get(&self.logits_name).ok_or_else(|| {
                EngineError::run(DECODER, format!("no output `{}`", self.logits_name))
            })?;
            let (shape, data) = logits_value.try_extract_tensor::<f32>().map_err(run)?;
            let want = [1, s as i64, self.vocab as i64];
            if **shape != want {
                return Err(EngineError::run(
                    DECODER,
                    format!("logits have shape {shape}, expected {want:?}"),
                ));
            }
            let (logits, rows) = match rows {
                LogitRows::Last => (data[(s - 1) * self.vocab..].to_vec(), 1),
                LogitRows::All => (data.to_vec(), s),
            };
            Ok((logits, rows, values))
        })();
        // Drop the binding's references to the caller's cache and to the new outputs.
        binding.clear();
        drop(state);
        let result = result.map(|(logits, rows, values)| {
            let store = match block {
                // The outputs are views of the block: dropped, the block is the cache.
                Some(block) => {
                    drop(values);
                    KvStore::Host(block)
                }
                None => KvStore::Device(values),
            };
            DecoderOutput {
                logits,
                rows,
                present: self.cache(store, total),
            }
        });
        // The views go before the blocks they point into (`past` is borrowed beyond this call).
        drop(past_views);
        if result.is_ok() {
            self.stats.record_decoder(s, started.elapsed());
        }
        result
    }
}

/// Binds a view of a pooled cache block as an input. Through ONNX Runtime's C API: `ort`'s
/// `bind_input` deep-copies any tensor it does not own (the whole cache, every call), while ONNX
/// Runtime itself reads a bound input in place.
fn bind_input_view(
    binding: &mut IoBinding,
    name: &std::ffi::CStr,
    view: &TensorRefMut<'static, f32>,
) -> Result<(), EngineError> {
    let api = ort::api();
    // SAFETY: a live binding, a NUL-terminated name and a live tensor; the caller keeps the view
    // and its block alive until the binding is cleared.
    let status = unsafe { (api.BindInput)(binding.ptr_mut(), name.as_ptr(), view.ptr()) };
    if status.0.is_null() {
        return Ok(());
    }
    // SAFETY: a status ONNX Runtime returned; its message is copied before it is released.
    let message = unsafe {
        let text = std::ffi::CStr::from_ptr((api.GetErrorMessage)(status.0))
            .to_string_lossy()
            .into_owned();
        (api.ReleaseStatus)(status.0);
        text
    };
    Err(EngineError::run(
        DECODER,
        format!("binding `{}`: {message}", name.to_string_lossy()),
    ))
}
