//! One client's subscriptions, as the gate rewrites them. rumqttd 0.20 keeps a log for every
//! distinct subscription filter it has ever seen, for the life of the process, each with a
//! preallocated segment: about 20 KiB per filter (docs/RELIABILITY.md, "Bounds"). A client that
//! subscribes to its own answer topic for each question (`<prefix>/<camera>/answer/<id>`, as
//! `edgevlm ask` and most integrations do) would so cost 20 KiB per question, for ever. The gate
//! subscribes it upstream to `<prefix>/<camera>/answer/+` instead (one filter per camera) and
//! passes on only the answers of the ids the client asked for.

use std::collections::HashSet;

/// What one client subscribed to.
#[derive(Debug)]
pub(super) struct Filters {
    prefix: String,
    /// Exact answer topics the client subscribed to (rewritten upstream to the camera's `+`).
    wanted: HashSet<String>,
    /// Every other filter, as the client gave it.
    own: Vec<String>,
}

impl Filters {
    pub(super) fn new(prefix: &str) -> Filters {
        Filters {
            prefix: prefix.to_string(),
            wanted: HashSet::new(),
            own: Vec::new(),
        }
    }

    /// The camera of an exact answer topic `<prefix>/<camera>/answer/<id>` (no wildcards).
    fn answer_camera<'t>(&self, topic: &'t str) -> Option<&'t str> {
        let rest = topic.strip_prefix(&self.prefix)?.strip_prefix('/')?;
        let (camera, id) = rest.split_once("/answer/")?;
        let single = |s: &str| !s.is_empty() && !s.contains(['/', '+', '#']);
        (single(camera) && single(id)).then_some(camera)
    }

    /// The filter to subscribe upstream for the client's `filter`.
    pub(super) fn subscribe(&mut self, filter: &str) -> String {
        match self.answer_camera(filter) {
            Some(camera) => {
                let shared = format!("{}/{camera}/answer/+", self.prefix);
                self.wanted.insert(filter.to_string());
                shared
            }
            None => {
                if !self.own.iter().any(|f| f == filter) {
                    self.own.push(filter.to_string());
                }
                filter.to_string()
            }
        }
    }

    /// The client unsubscribed `filter` (the upstream `+` of an answer topic stays; what it
    /// brings is no longer passed on).
    pub(super) fn unsubscribe(&mut self, filter: &str) {
        self.wanted.remove(filter);
        self.own.retain(|f| f != filter);
    }

    /// Whether a message on `topic` goes to the client: everything but answers is what the
    /// client subscribed to; an answer only if the client asked for that id, or subscribed to a
    /// filter of its own that matches it.
    pub(super) fn delivers(&self, topic: &str) -> bool {
        self.answer_camera(topic).is_none()
            || self.wanted.contains(topic)
            || self.own.iter().any(|f| matches(f, topic))
    }
}

/// MQTT topic filter matching (`+` one level, `#` the rest; `$` topics are not matched by a
/// leading wildcard).
fn matches(filter: &str, topic: &str) -> bool {
    if topic.starts_with('$') && filter.starts_with(['+', '#']) {
        return false;
    }
    let mut t = topic.split('/');
    for f in filter.split('/') {
        match (f, t.next()) {
            ("#", _) => return true,
            ("+", Some(_)) => {}
            (f, Some(level)) if f == level => {}
            _ => return false,
        }
    }
    t.next().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answer_subscriptions_share_one_filter_per_camera_and_deliver_only_their_ids() {
        let mut f = Filters::new("edgevlm");
        assert_eq!(
            f.subscribe("edgevlm/door/answer/q1"),
            "edgevlm/door/answer/+"
        );
        assert_eq!(
            f.subscribe("edgevlm/door/answer/q2"),
            "edgevlm/door/answer/+"
        );
        assert_eq!(f.subscribe("edgevlm/+/narration"), "edgevlm/+/narration");
        assert!(f.delivers("edgevlm/door/answer/q1"));
        assert!(!f.delivers("edgevlm/door/answer/q3"));
        assert!(f.delivers("edgevlm/door/narration"));
        f.unsubscribe("edgevlm/door/answer/q1");
        assert!(!f.delivers("edgevlm/door/answer/q1"));
        assert!(f.delivers("edgevlm/door/answer/q2"));
        // A client's own wildcard gets every answer it matches.
        let mut w = Filters::new("edgevlm");
        assert_eq!(w.subscribe("edgevlm/#"), "edgevlm/#");
        assert!(w.delivers("edgevlm/yard/answer/anything"));
        // Wildcards in the id, or other prefixes, are not rewritten.
        let mut o = Filters::new("a/b");
        assert_eq!(o.subscribe("a/b/door/answer/+"), "a/b/door/answer/+");
        assert_eq!(o.subscribe("a/b/door/answer/q"), "a/b/door/answer/+");
        assert_eq!(
            o.subscribe("edgevlm/door/answer/q"),
            "edgevlm/door/answer/q"
        );
    }

    #[test]
    fn filters_match_as_mqtt_says() {
        assert!(matches("a/+/c", "a/b/c"));
        assert!(!matches("a/+/c", "a/b/c/d"));
        assert!(matches("a/#", "a"));
        assert!(matches("a/#", "a/b/c"));
        assert!(matches("#", "a/b"));
        assert!(!matches("#", "$SYS/x"));
        assert!(!matches("a/b", "a/c"));
        assert!(matches("+/+", "a/b"));
    }
}
