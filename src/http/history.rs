//! Recent narrations and events per camera, for `GET /v1/cameras/{camera}/narrations` and
//! `…/events`: bounded (`http.history` each per camera), newest last.

use crate::narrate::{ChangeEvent, Narration};
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use tokio::sync::broadcast;

/// The history.
#[derive(Debug)]
pub struct History {
    size: usize,
    narrations: Mutex<HashMap<String, VecDeque<Narration>>>,
    events: Mutex<HashMap<String, VecDeque<ChangeEvent>>>,
}

fn push<T>(map: &Mutex<HashMap<String, VecDeque<T>>>, camera: &str, item: T, size: usize) {
    let mut m = map.lock().unwrap_or_else(|p| p.into_inner());
    let q = m.entry(camera.to_string()).or_default();
    if q.len() >= size {
        q.pop_front();
    }
    q.push_back(item);
}

/// The newest `n` items of `camera` older than the one whose id is `before` (all, without it),
/// oldest first; `None` when `before` is not among them.
fn newest<T: Clone>(
    map: &Mutex<HashMap<String, VecDeque<T>>>,
    camera: &str,
    n: usize,
    before: Option<&str>,
    id: impl Fn(&T) -> &str,
) -> Option<Vec<T>> {
    let m = map.lock().unwrap_or_else(|p| p.into_inner());
    let Some(q) = m.get(camera) else {
        return before.is_none().then(Vec::new);
    };
    let end = match before {
        Some(b) => q.iter().position(|t| id(t) == b)?,
        None => q.len(),
    };
    Some(
        q.iter()
            .take(end)
            .skip(end.saturating_sub(n))
            .cloned()
            .collect(),
    )
}

impl History {
    /// A history of `size` narrations and `size` events per camera.
    pub fn new(size: usize) -> History {
        History {
            size: size.max(1),
            narrations: Mutex::default(),
            events: Mutex::default(),
        }
    }

    /// Records a narration.
    pub fn narration(&self, n: Narration) {
        let camera = n.camera.clone();
        push(&self.narrations, &camera, n, self.size);
    }

    /// Records an event.
    pub fn event(&self, e: ChangeEvent) {
        let camera = e.camera.clone();
        push(&self.events, &camera, e, self.size);
    }

    /// The newest `n` narrations of `camera` (before the one with id `before`, when given),
    /// oldest first; `None` when `before` is not in the history (any more).
    pub fn narrations(
        &self,
        camera: &str,
        n: usize,
        before: Option<&str>,
    ) -> Option<Vec<Narration>> {
        newest(&self.narrations, camera, n, before, |x| &x.id)
    }

    /// The same for events; an event's `new`, `update`s and `end` share an id, so `before` is
    /// the first message of that id.
    pub fn events(&self, camera: &str, n: usize, before: Option<&str>) -> Option<Vec<ChangeEvent>> {
        newest(&self.events, camera, n, before, |x| &x.id)
    }

    /// Forgets a camera that no longer exists.
    pub fn forget(&self, camera: &str) {
        self.narrations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(camera);
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(camera);
    }

    /// Records what the watches publish until both channels close.
    pub async fn follow(
        self: std::sync::Arc<Self>,
        mut narrations: broadcast::Receiver<Narration>,
        mut events: broadcast::Receiver<ChangeEvent>,
    ) {
        use broadcast::error::RecvError;
        loop {
            tokio::select! {
                n = narrations.recv() => match n {
                    Ok(n) => self.narration(n),
                    Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => break,
                },
                e = events.recv() => match e {
                    Ok(e) => self.event(e),
                    Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => break,
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::narrate::EventType;

    fn event(camera: &str, n: u32) -> ChangeEvent {
        ChangeEvent {
            id: format!("{camera}-ev-{n}"),
            camera: camera.into(),
            kind: EventType::New,
            start_stream_secs: 0.0,
            start_ts: 0.0,
            stream_secs: f64::from(n),
            ts: 0.0,
            activity: 0.5,
            peak_activity: 0.5,
            narration: None,
            snapshot: None,
            watch: None,
        }
    }

    #[test]
    fn each_camera_keeps_its_newest_items_in_order() {
        let h = History::new(3);
        for n in 0..5 {
            h.event(event("door", n));
        }
        h.event(event("yard", 9));
        let ids = |v: Option<Vec<ChangeEvent>>| -> Vec<String> {
            v.unwrap().into_iter().map(|e| e.id).collect()
        };
        assert_eq!(
            ids(h.events("door", 10, None)),
            ["door-ev-2", "door-ev-3", "door-ev-4"]
        );
        assert_eq!(ids(h.events("door", 1, None)), ["door-ev-4"]);
        // Paging back: the page before an item.
        assert_eq!(ids(h.events("door", 1, Some("door-ev-4"))), ["door-ev-3"]);
        assert_eq!(ids(h.events("door", 5, Some("door-ev-3"))), ["door-ev-2"]);
        assert!(ids(h.events("door", 5, Some("door-ev-2"))).is_empty());
        // An id the history no longer has (or never had).
        assert!(h.events("door", 5, Some("door-ev-0")).is_none());
        assert_eq!(ids(h.events("yard", 10, None)).len(), 1);
        h.forget("door");
        assert!(ids(h.events("door", 10, None)).is_empty());
    }
}
