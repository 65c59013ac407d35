//! Conversations: the cache after an answer, kept for a follow-up with the same id; bounded in
//! number (least recently used forgotten first) and in age, on the injected clock.

use crate::base::Clock;
use crate::family::StreamFormat;
use crate::generate::KvCache;
use crate::generate::render::Rendered;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// One conversation's state after its last answer.
#[derive(Debug, Clone)]
pub(crate) struct Conversation {
    /// The camera it is about.
    pub camera: String,
    /// The cache: footage, questions and answers so far (minus `unfed`).
    pub cache: KvCache,
    /// Sampled tokens not in the cache (the stop token or the last token).
    pub unfed: Vec<u32>,
    /// The last answer ended its turn (`<|im_end|>` among `unfed`).
    pub ended: bool,
    /// The newest frame in the cache.
    pub last_seq: u64,
    /// Stream time of the first frame in the cache.
    pub first_pts: Duration,
    /// Frames in the cache.
    pub frames: usize,
    /// Visual tokens in the cache.
    pub visual_tokens: usize,
    /// Questions answered in it.
    pub turns: u32,
    /// Last answer's end.
    pub last_used: Instant,
}

impl Conversation {
    /// What closes the previous answer's turn before new footage and the next question.
    pub fn turn_close(&self, format: &dyn StreamFormat) -> Rendered {
        format.turn_close(self.ended)
    }
}

/// The conversations remembered.
#[derive(Debug)]
pub struct Conversations {
    max: usize,
    ttl: Duration,
    clock: Clock,
    map: HashMap<String, Conversation>,
}

impl Conversations {
    /// At most `max` conversations, each forgotten `ttl` after its last use by `clock`.
    pub fn new(max: usize, ttl: Duration, clock: Clock) -> Conversations {
        Conversations {
            max,
            ttl,
            clock,
            map: HashMap::new(),
        }
    }

    /// Now, by the clock conversations age on (their `last_used`).
    pub(crate) fn now(&self) -> Instant {
        self.clock.now()
    }

    /// Conversations held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    fn expire(&mut self) {
        let (ttl, now) = (self.ttl, self.clock.now());
        self.map
            .retain(|_, c| now.saturating_duration_since(c.last_used) < ttl);
    }

    /// Removes and returns a live conversation (it is put back after the answer).
    pub(crate) fn take(&mut self, id: &str) -> Option<Conversation> {
        self.expire();
        self.map.remove(id)
    }

    /// Stores a conversation, forgetting the least recently used beyond the bound.
    pub(crate) fn put(&mut self, id: String, c: Conversation) {
        if self.max == 0 {
            return;
        }
        self.expire();
        self.map.insert(id, c);
        while self.map.len() > self.max {
            let oldest = self
                .map
                .iter()
                .min_by_key(|(_, c)| c.last_used)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => {
                    self.map.remove(&k);
                }
                None => break,
            }
        }
    }

    /// Forgets a camera's conversations.
    pub(crate) fn remove_camera(&mut self, camera: &str) {
        self.map.retain(|_, c| c.camera != camera);
    }
}
