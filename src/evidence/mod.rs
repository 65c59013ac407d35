//! Evidence: the picture a narration or a change event is about, as a JPEG snapshot.
//!
//! The watch picks the frame (the sampled frame with the most change in the narration's span or
//! the event, else the last one) and hands it here with [`Snapshotter::submit`], which only
//! queues it: encoding runs on the `snapshots` thread, off the cameras' and the watches' paths.
//! The queue is bounded (`snapshots.queue`); a snapshot that finds it full is dropped and
//! counted, and the narration says `snapshot: null`. Each snapshot is published on
//! `<prefix>/<camera>/snapshot/<id>` and retained on `<prefix>/<camera>/snapshot` (docs/MQTT.md,
//! "Snapshots"), and kept in a small per-camera history ([`HISTORY`]) for in-process readers.

pub mod picture;

use crate::config::SnapshotConfig;
pub use crate::narrate::SnapshotRef;
use crate::publish::Publisher;
use crate::ring::Frame;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::{Instant, UNIX_EPOCH};
use tokio::sync::broadcast;

/// Snapshots kept per camera for in-process readers, newest last.
pub const HISTORY: usize = 16;

/// An encoded snapshot.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Camera id.
    pub camera: String,
    /// What narrations and events say about it.
    pub info: SnapshotRef,
    /// The JPEG.
    pub jpeg: Arc<[u8]>,
}

/// Counters of the snapshot stage.
#[derive(Debug, Default)]
pub struct SnapshotStats {
    /// Snapshots encoded.
    pub encoded: AtomicU64,
    /// Snapshots dropped because the queue was full.
    pub dropped: AtomicU64,
    /// Snapshots that could not be encoded.
    pub failed: AtomicU64,
    /// JPEG bytes produced.
    pub bytes: AtomicU64,
    /// Time spent encoding, in microseconds.
    pub encode_us: AtomicU64,
}

struct Job {
    camera: String,
    info: SnapshotRef,
    frame: Arc<Frame>,
}

struct Inner {
    tx: SyncSender<Job>,
    config: SnapshotConfig,
    stats: SnapshotStats,
    history: Mutex<HashMap<String, VecDeque<Arc<Snapshot>>>>,
    encoded: broadcast::Sender<Arc<Snapshot>>,
}

/// The snapshot stage: a bounded queue and the thread that encodes and publishes. Cheap to clone.
#[derive(Clone)]
pub struct Snapshotter {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Snapshotter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshotter")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl Snapshotter {
    /// Starts the `snapshots` thread; its snapshots go to `publisher` when there is one. The
    /// thread ends when every clone is dropped.
    pub fn start(
        config: SnapshotConfig,
        publisher: Option<Publisher>,
    ) -> std::io::Result<Snapshotter> {
        let (tx, rx) = sync_channel::<Job>(config.queue.max(1));
        let inner = Arc::new(Inner {
            tx,
            config,
            stats: SnapshotStats::default(),
            history: Mutex::new(HashMap::new()),
            encoded: broadcast::channel(64).0,
        });
        let weak = Arc::downgrade(&inner);
        std::thread::Builder::new()
            .name("snapshots".into())
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    let Some(inner) = weak.upgrade() else { break };
                    inner.encode(job, publisher.as_ref());
                }
            })?;
        Ok(Snapshotter { inner })
    }

    /// The settings.
    pub fn config(&self) -> &SnapshotConfig {
        &self.inner.config
    }

    /// Queues a snapshot of `frame` for the narration or event `id` of `camera`. Returns what
    /// the narration or event should say about it, or `None` when snapshots are off or the queue
    /// is full (counted). Never blocks.
    pub fn submit(&self, camera: &str, id: &str, frame: &Arc<Frame>) -> Option<SnapshotRef> {
        let config = &self.inner.config;
        if !config.enabled {
            return None;
        }
        let (width, height) = picture::fitted(frame.width, frame.height, config.max_width);
        let info = SnapshotRef {
            id: id.to_string(),
            frame: frame.seq,
            stream_secs: frame.pts.as_secs_f64(),
            ts: frame
                .wall_time
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0),
            width,
            height,
        };
        let job = Job {
            camera: camera.to_string(),
            info: info.clone(),
            frame: frame.clone(),
        };
        match self.inner.tx.try_send(job) {
            Ok(()) => Some(info),
            Err(TrySendError::Full(_)) => {
                self.inner.stats.dropped.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(camera, id, "Snapshot queue full; snapshot dropped");
                None
            }
            Err(TrySendError::Disconnected(_)) => None,
        }
    }

    /// Counters.
    pub fn stats(&self) -> &SnapshotStats {
        &self.inner.stats
    }

    /// Every snapshot as it is encoded.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Snapshot>> {
        self.inner.encoded.subscribe()
    }

    /// The newest snapshot of `camera`.
    pub fn latest(&self, camera: &str) -> Option<Arc<Snapshot>> {
        let history = self.inner.history.lock().unwrap_or_else(|p| p.into_inner());
        history.get(camera).and_then(|h| h.back().cloned())
    }

    /// The snapshot `id` of `camera`, if it is among the last [`HISTORY`].
    pub fn get(&self, camera: &str, id: &str) -> Option<Arc<Snapshot>> {
        let history = self.inner.history.lock().unwrap_or_else(|p| p.into_inner());
        history
            .get(camera)
            .and_then(|h| h.iter().rev().find(|s| s.info.id == id).cloned())
    }

    /// Forgets a camera that no longer exists.
    pub fn forget(&self, camera: &str) {
        let mut history = self.inner.history.lock().unwrap_or_else(|p| p.into_inner());
        history.remove(camera);
    }
}

impl Inner {
    fn encode(&self, job: Job, publisher: Option<&Publisher>) {
        let t0 = Instant::now();
        let result = picture::encode(
            &job.frame,
            self.config.max_width,
            self.config.quality,
            self.config.overlay,
        );
        drop(job.frame);
        let jpeg = match result {
            Ok((jpeg, w, h)) => {
                debug_assert_eq!((w, h), (job.info.width, job.info.height));
                jpeg
            }
            Err(e) => {
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(camera = %job.camera, id = %job.info.id, error = %e, "Snapshot not encoded");
                return;
            }
        };
        let us = t0.elapsed().as_micros() as u64;
        self.stats.encoded.fetch_add(1, Ordering::Relaxed);
        self.stats.encode_us.fetch_add(us, Ordering::Relaxed);
        self.stats
            .bytes
            .fetch_add(jpeg.len() as u64, Ordering::Relaxed);
        let snapshot = Arc::new(Snapshot {
            camera: job.camera,
            info: job.info,
            jpeg: jpeg.into(),
        });
        if let Some(p) = publisher {
            p.snapshot(&snapshot.camera, &snapshot.info.id, &snapshot.jpeg);
        }
        {
            let mut history = self.history.lock().unwrap_or_else(|p| p.into_inner());
            let h = history.entry(snapshot.camera.clone()).or_default();
            if h.len() >= HISTORY {
                h.pop_front();
            }
            h.push_back(snapshot.clone());
        }
        let _ = self.encoded.send(snapshot);
    }
}
