//! A sequence's KV cache as generation sees it: the decoder's tensors plus the next position.

use crate::engine::PastKv;
use std::sync::Arc;

/// The KV cache of one token sequence (a camera's history, or a query's continuation of it).
///
/// The tensors are immutable and shared: [`KvCache::fork`] is a reference-count increment, and
/// extending a fork makes new tensors for the fork only, so a query can start from a camera's cache
/// and decode without disturbing it (docs/ENGINES.md, "KV cache and generation"). The cost is
/// that the fork's first step concatenates the shared past into its own tensors, the same work
/// every step does anyway.
#[derive(Clone)]
pub struct KvCache {
    kv: Arc<PastKv>,
    next_position: i64,
}

impl std::fmt::Debug for KvCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "KvCache {{ len: {}, next_position: {}, bytes: {}, shared_by: {} }}",
            self.kv.len(),
            self.next_position,
            self.kv.bytes(),
            Arc::strong_count(&self.kv)
        )
    }
}

impl KvCache {
    pub(crate) fn new(kv: PastKv, next_position: i64) -> KvCache {
        KvCache {
            kv: Arc::new(kv),
            next_position,
        }
    }

    /// The decoder tensors, for driving [`crate::engine::Decoder::forward`] directly.
    pub fn past(&self) -> &PastKv {
        &self.kv
    }

    /// Cached positions.
    pub fn len(&self) -> usize {
        self.kv.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.kv.is_empty()
    }

    /// The position id the next token gets (rotary positions; equals `len()` unless positions
    /// were set explicitly).
    pub fn next_position(&self) -> i64 {
        self.next_position
    }

    /// Bytes of the cache tensors.
    pub fn bytes(&self) -> usize {
        self.kv.bytes()
    }

    /// A cache that shares this one's tensors; extending either leaves the other as it is.
    pub fn fork(&self) -> KvCache {
        self.clone()
    }

    /// The cache without the positions in `drop` (ascending, disjoint ranges): the positions
    /// after each dropped range move down by the positions dropped before them, their keys turned
    /// back by `rope` so the cache is what it would be had they been computed at their new
    /// positions over the same context (exact up to float rounding: RoPE attention depends only on
    /// relative positions); the next position is lowered by the positions dropped. Nothing is
    /// recomputed. Cache tensors in device memory are refused ([`PastKv::select`]).
    pub fn evict(
        &self,
        drop: &[std::ops::Range<usize>],
        rope: &crate::engine::Rope,
    ) -> Result<KvCache, crate::engine::EngineError> {
        let mut keep = Vec::with_capacity(drop.len() + 1);
        let (mut at, mut dropped) = (0usize, 0usize);
        for r in drop {
            if r.start < at || r.end > self.len() {
                return Err(crate::engine::EngineError::input(
                    "decoder",
                    format!(
                        "positions {r:?} to evict are not ascending within the cache's {}",
                        self.len()
                    ),
                ));
            }
            if r.start > at {
                keep.push((at..r.start, -(dropped as i64)));
            }
            dropped += r.len();
            at = r.end;
        }
        if at < self.len() {
            keep.push((at..self.len(), -(dropped as i64)));
        }
        Ok(KvCache {
            kv: Arc::new(self.kv.select(&keep, rope)?),
            next_position: self.next_position - dropped as i64,
        })
    }

    /// Compression scores of positions ([`crate::engine::PastKv::scores`]): key similarity of
    /// each pair with RoPE taken off, and value norms, averaged over the layers.
    pub fn scores(
        &self,
        pairs: &[(usize, usize)],
        positions: &[usize],
        rope: &crate::engine::Rope,
    ) -> Result<(Vec<f32>, Vec<f32>), crate::engine::EngineError> {
        self.kv.scores(pairs, positions, rope)
    }

    /// Whether both are backed by the very same tensors (no copy was made).
    pub fn shares_storage_with(&self, other: &KvCache) -> bool {
        Arc::ptr_eq(&self.kv, &other.kv) || self.kv.same_tensors(&other.kv)
    }
}
