//! The topic layout (docs/MQTT.md), in one place so the publisher, the query subscriber, `ask` and
//! the tests agree.

/// Topic names under one prefix (`edgevlm` by default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topics {
    prefix: String,
}

impl Topics {
    /// Topics under `prefix` (already validated by the config decoder).
    pub fn new(prefix: impl Into<String>) -> Self {
        Topics {
            prefix: prefix.into(),
        }
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `<prefix>/available`: retained `online` / `offline`.
    pub fn available(&self) -> String {
        format!("{}/available", self.prefix)
    }

    /// `<prefix>/errors`: bad requests that have no usable id.
    pub fn errors(&self) -> String {
        format!("{}/errors", self.prefix)
    }

    /// `<prefix>/<camera>/status`: retained camera report.
    pub fn status(&self, camera: &str) -> String {
        format!("{}/{camera}/status", self.prefix)
    }

    /// `<prefix>/<camera>/stats`: the camera's figures, every status interval, not retained.
    pub fn stats(&self, camera: &str) -> String {
        format!("{}/{camera}/stats", self.prefix)
    }

    /// `<prefix>/<camera>/narration`: one final message per narration.
    pub fn narration(&self, camera: &str) -> String {
        format!("{}/{camera}/narration", self.prefix)
    }

    /// `<prefix>/<camera>/narration/stream`: chunks while a narration is generated.
    pub fn narration_stream(&self, camera: &str) -> String {
        format!("{}/{camera}/narration/stream", self.prefix)
    }

    /// `<prefix>/<camera>/events`: change events (`new`, `update`, `end`).
    pub fn events(&self, camera: &str) -> String {
        format!("{}/{camera}/events", self.prefix)
    }

    /// `<prefix>/<camera>/activity`: `ON` while a change event is in progress, else `OFF`;
    /// retained.
    pub fn activity(&self, camera: &str) -> String {
        format!("{}/{camera}/activity", self.prefix)
    }

    /// `<prefix>/<camera>/snapshot`: the newest snapshot (JPEG), retained.
    pub fn snapshot(&self, camera: &str) -> String {
        format!("{}/{camera}/snapshot", self.prefix)
    }

    /// `<prefix>/<camera>/snapshot/<id>`: the snapshot of one narration or event (JPEG).
    pub fn snapshot_of(&self, camera: &str, id: &str) -> String {
        format!("{}/{camera}/snapshot/{id}", self.prefix)
    }

    /// `<prefix>/<camera>/query`: questions (subscribed by the runtime).
    pub fn query(&self, camera: &str) -> String {
        format!("{}/{camera}/query", self.prefix)
    }

    /// `<prefix>/+/status`: every camera's retained status (read at connection to find cameras
    /// a previous run published and this one no longer has).
    pub fn status_filter(&self) -> String {
        format!("{}/+/status", self.prefix)
    }

    /// The camera of a `<prefix>/<camera>/status` topic.
    pub fn status_camera<'t>(&self, topic: &'t str) -> Option<&'t str> {
        let rest = topic.strip_prefix(&self.prefix)?.strip_prefix('/')?;
        let camera = rest.strip_suffix("/status")?;
        (!camera.is_empty() && !camera.contains('/')).then_some(camera)
    }

    /// `<prefix>/+/query`: the runtime's subscription.
    pub fn query_filter(&self) -> String {
        format!("{}/+/query", self.prefix)
    }

    /// `<prefix>/<camera>/answer/<id>`: chunks, then the final answer or an error.
    pub fn answer(&self, camera: &str, id: &str) -> String {
        format!("{}/{camera}/answer/{id}", self.prefix)
    }

    /// The camera of a `<prefix>/<camera>/query` topic.
    pub fn query_camera<'t>(&self, topic: &'t str) -> Option<&'t str> {
        let rest = topic.strip_prefix(&self.prefix)?.strip_prefix('/')?;
        let camera = rest.strip_suffix("/query")?;
        (!camera.is_empty() && !camera.contains('/')).then_some(camera)
    }

    /// Whether a client may ask for replies on `topic` (an MQTT 5 response topic): anything
    /// outside the prefix, or an answer topic inside it. Replies must never land on the runtime's
    /// own state topics (`available`, `status`, narrations), where they would mislead subscribers.
    pub fn response_topic_allowed(&self, topic: &str) -> bool {
        if topic.is_empty() || topic.len() > 512 || topic.contains(['+', '#', '\0']) {
            return false;
        }
        if topic.starts_with('$') {
            return false;
        }
        match topic
            .strip_prefix(&self.prefix)
            .and_then(|r| r.strip_prefix('/'))
        {
            None => true,
            Some(rest) => {
                let levels: Vec<&str> = rest.split('/').collect();
                levels.len() >= 3 && levels[1] == "answer" && levels.iter().all(|l| !l.is_empty())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_camera_is_read_back_from_a_query_topic() {
        let t = Topics::new("site/edgevlm");
        assert_eq!(t.query_camera("site/edgevlm/door/query"), Some("door"));
        assert_eq!(t.query_camera("site/edgevlm/a/b/query"), None);
        assert_eq!(t.query_camera("site/edgevlm//query"), None);
        assert_eq!(t.query_camera("other/door/query"), None);
        assert_eq!(t.answer("door", "q1"), "site/edgevlm/door/answer/q1");
    }

    #[test]
    fn replies_cannot_be_pointed_at_the_runtimes_own_topics() {
        let t = Topics::new("edgevlm");
        assert!(t.response_topic_allowed("app/replies/7"));
        assert!(t.response_topic_allowed("edgevlm/door/answer/x"));
        assert!(!t.response_topic_allowed("edgevlm/available"));
        assert!(!t.response_topic_allowed("edgevlm/door/status"));
        assert!(!t.response_topic_allowed("edgevlm/door/narration"));
        assert!(!t.response_topic_allowed("a/#"));
        assert!(!t.response_topic_allowed("$SYS/x"));
    }
}
