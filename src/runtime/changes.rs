//! Camera state changes, forwarded to the control task so that a change (running → retrying, a
//! new failure) is published when it happens, not only on the status timer (docs/MQTT.md,
//! "Status"). One small task per camera waits on the camera's status channel; the changed ids
//! are a set, so what waits is bounded by the number of cameras however fast they change.

use crate::supervisor::{CameraStatus, Supervisor};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

/// Follows every camera's status.
pub(super) struct Changes {
    changed: Arc<Mutex<BTreeSet<String>>>,
    wake: Arc<Notify>,
    followed: HashMap<String, Follower>,
}

struct Follower {
    status: watch::Receiver<CameraStatus>,
    task: JoinHandle<()>,
}

impl Changes {
    pub(super) fn new() -> Changes {
        Changes {
            changed: Arc::default(),
            wake: Arc::new(Notify::new()),
            followed: HashMap::new(),
        }
    }

    /// Follows the supervisor's cameras: a new or restarted camera (a new status channel) gets a
    /// follower, a removed one loses it.
    pub(super) fn follow(&mut self, supervisor: &Supervisor) {
        let views = supervisor.views();
        self.followed.retain(|id, f| {
            let kept = views
                .iter()
                .any(|v| v.id() == id && v.watch().same_channel(&f.status));
            if !kept {
                f.task.abort();
            }
            kept
        });
        for view in views {
            if self.followed.contains_key(view.id()) {
                continue;
            }
            let id = view.id().to_string();
            let mut status = view.watch();
            status.mark_unchanged();
            let (changed, wake, camera) = (self.changed.clone(), self.wake.clone(), id.clone());
            let mut rx = status.clone();
            let task = tokio::spawn(async move {
                // Ends when the camera's task and handle are gone (the channel closes).
                while rx.changed().await.is_ok() {
                    lock(&changed).insert(camera.clone());
                    wake.notify_one();
                }
            });
            self.followed.insert(id, Follower { status, task });
        }
    }

    /// Waits for at least one change and returns the cameras that changed since the last call.
    pub(super) async fn next(&self) -> BTreeSet<String> {
        loop {
            let taken = std::mem::take(&mut *lock(&self.changed));
            if !taken.is_empty() {
                return taken;
            }
            self.wake.notified().await;
        }
    }
}

fn lock(m: &Mutex<BTreeSet<String>>) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
    // A set of names cannot be left inconsistent by a panic elsewhere.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Drop for Changes {
    fn drop(&mut self) {
        for f in self.followed.values() {
            f.task.abort();
        }
    }
}
