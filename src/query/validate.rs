//! Validation of a question, once, into a [`ValidQuery`] that only this module can make: the
//! question service takes nothing else. A payload from MQTT goes through [`validate`] (JSON
//! shape, then the same checks); an in-process request through [`ValidQuery::check`].

use super::answer::{ErrorCode, QueryError};
use std::collections::BTreeMap;
use std::time::Duration;
use std::time::Instant;

/// A question that passed every check: its camera exists, its text is not empty and not too
/// long, its window is within what the camera keeps, its limits are in range. Fields are private
/// so nothing else can make one.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidQuery {
    camera: String,
    question: String,
    window: Duration,
    max_tokens: Option<u32>,
    conversation: Option<String>,
    received: Instant,
}

impl ValidQuery {
    /// Checks an in-process question (no JSON): the same rules and codes as [`validate`].
    #[allow(clippy::too_many_arguments)]
    pub fn check(
        camera: &str,
        question: &str,
        window: Option<Duration>,
        max_tokens: Option<u32>,
        conversation: Option<String>,
        received: Instant,
        limits: &QueryLimits,
        cameras: &CameraDirectory,
    ) -> Result<ValidQuery, QueryError> {
        if let Some(n) = max_tokens
            && (n == 0 || n > limits.max_tokens)
        {
            return Err(bad_max_tokens(limits, &n.to_string()));
        }
        if let Some(c) = &conversation
            && !valid_id(c)
        {
            return Err(bad_conversation(&format!("{c:?}")));
        }
        if window.is_some_and(|w| w.is_zero()) {
            return Err(QueryError::new(
                ErrorCode::InvalidField,
                "`window_secs` must be a number > 0, got 0",
            ));
        }
        checked(
            camera,
            question.trim(),
            window.map(|w| w.as_secs_f64()),
            max_tokens,
            conversation,
            received,
            limits,
            cameras,
        )
    }

    /// Camera id.
    pub fn camera(&self) -> &str {
        &self.camera
    }

    /// The question, trimmed.
    pub fn question(&self) -> &str {
        &self.question
    }

    /// How much recent footage to ground the answer on (the camera's whole window by default).
    pub fn window(&self) -> Duration {
        self.window
    }

    /// Most tokens to generate; `None`: `query.max_tokens`.
    pub fn max_tokens(&self) -> Option<u32> {
        self.max_tokens
    }

    /// Conversation id: a follow-up with the same id continues from the previous answer.
    pub fn conversation(&self) -> Option<&str> {
        self.conversation.as_deref()
    }

    /// When the question arrived (time to first token counts from here).
    pub fn received(&self) -> Instant {
        self.received
    }
}

/// A refused query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The id to reply to, when the payload carried a usable one; `None`: reply on `errors`.
    pub id: Option<String>,
    /// An id that was present but unusable (shown on the errors topic, truncated).
    pub raw_id: Option<String>,
    /// What was wrong.
    pub error: QueryError,
}

/// Limits a query must respect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryLimits {
    /// Largest payload (`mqtt.query_max_bytes`).
    pub max_bytes: usize,
    /// Longest question in characters (`mqtt.question_max_chars`).
    pub question_max_chars: usize,
    /// Largest `max_tokens` a client may ask for.
    pub max_tokens: u32,
}

/// The largest `max_tokens` accepted.
pub const MAX_TOKENS_LIMIT: u32 = 4096;

/// Payloads up to this size are still parsed when they are too large, to find the id to reply to.
const PARSE_FOR_ID_LIMIT: usize = 1 << 20;

/// Fields a query may carry.
const FIELDS: [&str; 5] = [
    "id",
    "question",
    "window_secs",
    "max_tokens",
    "conversation",
];

/// The cameras questions may name, each with how much footage it keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CameraDirectory {
    cameras: BTreeMap<String, Duration>,
}

impl CameraDirectory {
    /// From `(id, kept window)` pairs.
    pub fn new(cameras: impl IntoIterator<Item = (String, Duration)>) -> Self {
        CameraDirectory {
            cameras: cameras.into_iter().collect(),
        }
    }

    /// Every configured camera with its `window_secs`.
    pub fn from_config(config: &crate::config::Config) -> Self {
        CameraDirectory::new(config.cameras.iter().map(|c| (c.id.clone(), c.window)))
    }

    /// The footage a camera keeps, if it exists.
    pub fn window(&self, camera: &str) -> Option<Duration> {
        self.cameras.get(camera).copied()
    }

    /// Camera ids, sorted.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.cameras.keys().map(String::as_str)
    }
}

/// Whether `id` can be used in a topic level and in logs.
pub fn valid_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

/// Validates the payload of a query that arrived for `camera` at `received`: its id (the reply
/// topic) and the question. Pure: no I/O, no clock.
pub fn validate(
    camera: &str,
    payload: &[u8],
    received: Instant,
    limits: &QueryLimits,
    cameras: &CameraDirectory,
) -> Result<(String, ValidQuery), Rejection> {
    let oversized = payload.len() > limits.max_bytes;
    let value = parse_object(payload, limits)?;
    let obj = value.as_object().expect("parse_object returns an object");
    let id = reply_id(obj)?;
    let fail = |error: QueryError| reject(Some(id.clone()), None, error);
    if oversized {
        return Err(fail(too_large(payload.len(), limits)));
    }
    if let Some(unknown) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(fail(QueryError::new(
            ErrorCode::InvalidField,
            format!(
                "unknown field `{}` (known: {})",
                truncate(unknown, 64),
                FIELDS.join(", ")
            ),
        )));
    }
    let fields = query_fields(obj, limits).map_err(&fail)?;
    checked(
        camera,
        fields.question,
        fields.window_secs,
        fields.max_tokens,
        fields.conversation,
        received,
        limits,
        cameras,
    )
    .map(|q| (id.clone(), q))
    .map_err(fail)
}

/// The payload as a JSON object, or why it is not one (no id known yet: the reply goes to the
/// errors topic).
fn parse_object(payload: &[u8], limits: &QueryLimits) -> Result<serde_json::Value, Rejection> {
    let oversized = payload.len() > limits.max_bytes;
    if payload.len() > PARSE_FOR_ID_LIMIT {
        return Err(reject(
            recover_id(payload),
            None,
            too_large(payload.len(), limits),
        ));
    }
    let text = std::str::from_utf8(payload).map_err(|e| {
        reject(
            recover_id(payload),
            None,
            QueryError::new(
                ErrorCode::Malformed,
                format!(
                    "the payload is not UTF-8 (invalid byte at offset {})",
                    e.valid_up_to()
                ),
            ),
        )
    })?;
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        let err = if oversized {
            too_large(payload.len(), limits)
        } else {
            QueryError::new(
                ErrorCode::Malformed,
                format!(
                    "the payload is not JSON ({e}); expected {{\"id\": \"…\", \"question\": \"…\"}}"
                ),
            )
        };
        reject(recover_id(payload), None, err)
    })?;
    if !value.is_object() {
        return Err(reject(
            None,
            None,
            QueryError::new(
                ErrorCode::Malformed,
                format!(
                    "expected a JSON object {{\"id\": \"…\", \"question\": \"…\"}}, got {}",
                    json_type(&value)
                ),
            ),
        ));
    };
    Ok(value)
}

/// The refusal of a query the MQTT size guard cut (`publish/guard.rs`): `len` bytes, of which
/// `prefix` are the first; the id is read from the prefix when it comes first enough.
pub fn refuse_cut(prefix: &[u8], len: usize, limits: &QueryLimits) -> Rejection {
    reject(recover_id(prefix), None, too_large(len, limits))
}

/// The `id` of a query whose payload cannot be parsed whole (too large, cut short, not UTF-8 or
/// not valid JSON further on), so that its sender still gets the error on its answer topic: the
/// top-level members are scanned from the start, without building values or recursing, until
/// `"id"`. `None` when the payload does not start as an object, the id is not a valid one, or
/// something unreadable comes before it.
pub fn recover_id(payload: &[u8]) -> Option<String> {
    let mut s = Scan { b: payload, i: 0 };
    s.ws();
    s.eat(b'{')?;
    loop {
        s.ws();
        let key = s.string()?;
        s.ws();
        s.eat(b':')?;
        s.ws();
        if key == "id" {
            return s.string().filter(|id| valid_id(id));
        }
        s.skip_value()?;
        s.ws();
        s.eat(b',')?;
    }
}

/// A byte cursor over JSON text (for [`recover_id`]).
struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

impl Scan<'_> {
    fn ws(&mut self) {
        while self.b.get(self.i).is_some_and(|c| c.is_ascii_whitespace()) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.b.get(self.i) == Some(&c)).then(|| self.i += 1)
    }

    /// The end (exclusive) of the string starting at the cursor, which is left after it.
    fn skip_string(&mut self) -> Option<usize> {
        self.eat(b'"')?;
        loop {
            match *self.b.get(self.i)? {
                b'\\' => self.i += 2,
                b'"' => {
                    self.i += 1;
                    return Some(self.i);
                }
                _ => self.i += 1,
            }
        }
    }

    /// A string, decoded (`None` if it is not a valid JSON string, lone surrogates included).
    fn string(&mut self) -> Option<String> {
        let start = self.i;
        let end = self.skip_string()?;
        serde_json::from_slice(&self.b[start..end]).ok()
    }

    /// Skips one value of any depth (strings are skipped whole, so brackets in them do not count).
    fn skip_value(&mut self) -> Option<()> {
        let mut depth = 0usize;
        loop {
            match *self.b.get(self.i)? {
                b'"' => {
                    self.skip_string()?;
                }
                b'{' | b'[' => {
                    depth += 1;
                    self.i += 1;
                }
                b'}' | b']' if depth > 0 => {
                    depth -= 1;
                    self.i += 1;
                }
                b',' | b'}' | b']' if depth == 0 => return Some(()),
                _ => self.i += 1,
            }
            if depth == 0 && matches!(self.b.get(self.i), Some(b',' | b'}' | b']')) {
                return Some(());
            }
        }
    }
}

/// The query's `id`: where its answer goes.
fn reply_id(obj: &serde_json::Map<String, serde_json::Value>) -> Result<String, Rejection> {
    match obj.get("id") {
        None => Err(reject(
            None,
            None,
            QueryError::new(
                ErrorCode::MissingField,
                "`id` is required (1-64 characters of A-Z, a-z, 0-9, `_`, `-`, `.`); answers go to <prefix>/<camera>/answer/<id>",
            ),
        )),
        Some(serde_json::Value::String(s)) if valid_id(s) => Ok(s.clone()),
        Some(serde_json::Value::String(s)) => Err(reject(
            None,
            Some(s.chars().take(64).collect()),
            QueryError::new(
                ErrorCode::InvalidField,
                "`id` must be 1-64 characters of A-Z, a-z, 0-9, `_`, `-` or `.` (it becomes a topic level)",
            ),
        )),
        Some(other) => Err(reject(
            None,
            None,
            QueryError::new(
                ErrorCode::InvalidField,
                format!("`id` must be a string, got {}", json_type(other)),
            ),
        )),
    }
}

/// The typed fields of a query object, before the checks every question passes.
struct Fields<'a> {
    question: &'a str,
    window_secs: Option<f64>,
    max_tokens: Option<u32>,
    conversation: Option<String>,
}

/// Reads `question`, `window_secs`, `max_tokens` and `conversation` with their JSON types.
fn query_fields<'a>(
    obj: &'a serde_json::Map<String, serde_json::Value>,
    limits: &QueryLimits,
) -> Result<Fields<'a>, QueryError> {
    let question = match obj.get("question") {
        None => {
            return Err(QueryError::new(
                ErrorCode::MissingField,
                "`question` is required",
            ));
        }
        Some(serde_json::Value::String(q)) => q.trim(),
        Some(other) => {
            return Err(QueryError::new(
                ErrorCode::InvalidField,
                format!("`question` must be a string, got {}", json_type(other)),
            ));
        }
    };
    let window_secs = match obj.get("window_secs") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::Number(n)) => match n.as_f64() {
            Some(w) if w.is_finite() && w > 0.0 => Some(w),
            _ => {
                return Err(QueryError::new(
                    ErrorCode::InvalidField,
                    format!("`window_secs` must be a number > 0, got {n}"),
                ));
            }
        },
        Some(other) => {
            return Err(QueryError::new(
                ErrorCode::InvalidField,
                format!("`window_secs` must be a number, got {}", json_type(other)),
            ));
        }
    };
    let max_tokens = match obj.get("max_tokens") {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(n) if (1..=u64::from(limits.max_tokens)).contains(&n) => Some(n as u32),
            _ => return Err(bad_max_tokens(limits, &v.to_string())),
        },
    };
    let conversation = match obj.get("conversation") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(c)) if valid_id(c) => Some(c.clone()),
        Some(other) => return Err(bad_conversation(&other.to_string())),
    };
    Ok(Fields {
        question,
        window_secs,
        max_tokens,
        conversation,
    })
}

/// The checks every question passes, whatever it came through.
#[allow(clippy::too_many_arguments)]
fn checked(
    camera: &str,
    question: &str,
    window_secs: Option<f64>,
    max_tokens: Option<u32>,
    conversation: Option<String>,
    received: Instant,
    limits: &QueryLimits,
    cameras: &CameraDirectory,
) -> Result<ValidQuery, QueryError> {
    let Some(kept) = cameras.window(camera) else {
        let known: Vec<&str> = cameras.ids().collect();
        return Err(QueryError::new(
            ErrorCode::UnknownCamera,
            format!(
                "no camera `{}` (cameras: {})",
                truncate(camera, 64),
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ),
        ));
    };
    if question.is_empty() {
        return Err(QueryError::new(
            ErrorCode::EmptyQuestion,
            "`question` is empty",
        ));
    }
    let chars = question.chars().count();
    if chars > limits.question_max_chars {
        return Err(QueryError::new(
            ErrorCode::QuestionTooLong,
            format!(
                "`question` has {chars} characters; at most {} are accepted",
                limits.question_max_chars
            ),
        ));
    }
    let window = match window_secs {
        None => kept,
        // A little slack: a client asking for exactly the configured window must not be refused
        // because of float rounding.
        Some(w) if w <= kept.as_secs_f64() + 1e-6 => Duration::from_secs_f64(w).min(kept),
        Some(w) => {
            return Err(QueryError::new(
                ErrorCode::WindowTooLong,
                format!(
                    "`window_secs` = {w} is more than camera `{camera}` keeps ({} s, its window_secs)",
                    kept.as_secs_f64()
                ),
            ));
        }
    };
    Ok(ValidQuery {
        camera: camera.to_string(),
        question: question.to_string(),
        window,
        max_tokens,
        conversation,
        received,
    })
}

fn bad_max_tokens(limits: &QueryLimits, got: &str) -> QueryError {
    QueryError::new(
        ErrorCode::InvalidField,
        format!(
            "`max_tokens` must be an integer between 1 and {}, got {}",
            limits.max_tokens,
            truncate(got, 32)
        ),
    )
}

fn bad_conversation(got: &str) -> QueryError {
    QueryError::new(
        ErrorCode::InvalidField,
        format!(
            "`conversation` must be 1-64 characters of A-Z, a-z, 0-9, `_`, `-` or `.`, got {}",
            truncate(got, 70)
        ),
    )
}

fn reject(id: Option<String>, raw_id: Option<String>, error: QueryError) -> Rejection {
    Rejection { id, raw_id, error }
}

fn too_large(len: usize, limits: &QueryLimits) -> QueryError {
    QueryError::new(
        ErrorCode::TooLarge,
        format!(
            "the payload has {len} bytes; at most {} are accepted (mqtt.query_max_bytes)",
            limits.max_bytes
        ),
    )
}

fn json_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n).collect();
        t.push('…');
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: QueryLimits = QueryLimits {
        max_bytes: 512,
        question_max_chars: 40,
        max_tokens: 256,
    };

    fn cams() -> CameraDirectory {
        CameraDirectory::new([("door".to_string(), Duration::from_secs(60))])
    }

    fn check(camera: &str, payload: &str) -> Result<ValidQuery, Rejection> {
        validate(camera, payload.as_bytes(), Instant::now(), &LIMITS, &cams()).map(|(_, q)| q)
    }

    fn code(camera: &str, payload: &str) -> (Option<String>, ErrorCode) {
        let r = check(camera, payload).unwrap_err();
        (r.id, r.error.code)
    }

    #[test]
    fn the_id_of_an_unparsable_query_is_recovered_when_it_can_be() {
        let deep = format!(
            r#"{{"x":{}1{},"id":"deep","question":"q"}}"#,
            "[".repeat(500),
            "]".repeat(500)
        );
        let cases: &[(&[u8], Option<&str>)] = &[
            (br#"{"id":"a1","question":"x"}"#, Some("a1")),
            // Not JSON further on: a lone surrogate escape, a cut-off payload, a bad byte.
            (br#"{"id":"a2","question":"\ud800"}"#, Some("a2")),
            (br#" { "id" : "a3" , "question": "AAAA"#, Some("a3")),
            (b"{\"id\":\"a4\",\"question\":\"\xff\"}", Some("a4")),
            // After other members, whatever they hold (brackets and escaped quotes in strings).
            (br#"{"question":"a \" ] } [ {","window_secs":12.5,"c":{"d":[1,{"e":"}"}]},"id":"a5"}"#, Some("a5")),
            (deep.as_bytes(), Some("deep")),
            (br#"{"question":"x"}"#, None),
            (br#"{"id":"a/b","question":"x"}"#, None),
            (br#"{"id":7}"#, None),
            (br#"{"question":"\ud800","id":"x"}"#, Some("x")),
            (br#"{"\ud800":1,"id":"x"}"#, None),
            (br#"["id","x"]"#, None),
            (br#"{"question":"AAAA"#, None),
            (b"", None),
        ];
        for (payload, id) in cases {
            assert_eq!(
                recover_id(payload).as_deref(),
                *id,
                "{}",
                String::from_utf8_lossy(payload)
            );
        }
        let cut = refuse_cut(br#"{"id":"big","question":"AAA"#, 10 << 20, &LIMITS);
        assert_eq!(cut.id.as_deref(), Some("big"));
        assert_eq!(cut.error.code, ErrorCode::TooLarge);
        assert!(
            cut.error.message.contains("10485760 bytes"),
            "{}",
            cut.error.message
        );
    }

    #[test]
    fn a_malformed_query_with_a_readable_id_is_answered_on_its_topic() {
        let (id, c) = code("door", r#"{"id":"s1","question":"\ud800"}"#);
        assert_eq!((id.as_deref(), c), (Some("s1"), ErrorCode::Malformed));
        let deep = format!(
            r#"{{"id":"n1","x":{}{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        let (id, c) = code("door", &deep);
        assert_eq!(id.as_deref(), Some("n1"));
        assert!(
            matches!(c, ErrorCode::Malformed | ErrorCode::TooLarge),
            "{c:?}"
        );
    }

    #[test]
    fn a_valid_query_defaults_to_the_whole_window() {
        let q = check("door", r#"{"id":"q-1","question":"  Who came in? "}"#).unwrap();
        assert_eq!(q.question(), "Who came in?");
        assert_eq!(q.window(), Duration::from_secs(60));
        assert_eq!(q.max_tokens(), None);
        let q = check(
            "door",
            r#"{"id":"q.2","question":"x","window_secs":60,"max_tokens":64}"#,
        )
        .unwrap();
        assert_eq!(q.window(), Duration::from_secs(60));
        assert_eq!(q.max_tokens(), Some(64));
    }

    #[test]
    fn each_bad_request_gets_its_code_and_keeps_its_id_when_usable() {
        let id = Some("a".to_string());
        let cases: &[(&str, &str, Option<String>, ErrorCode)] = &[
            ("door", "not json", None, ErrorCode::Malformed),
            ("door", "[1,2]", None, ErrorCode::Malformed),
            ("door", r#"{"question":"x"}"#, None, ErrorCode::MissingField),
            (
                "door",
                r#"{"id":7,"question":"x"}"#,
                None,
                ErrorCode::InvalidField,
            ),
            (
                "door",
                r#"{"id":"a/b","question":"x"}"#,
                None,
                ErrorCode::InvalidField,
            ),
            ("door", r#"{"id":"a"}"#, id.clone(), ErrorCode::MissingField),
            (
                "door",
                r#"{"id":"a","question":3}"#,
                id.clone(),
                ErrorCode::InvalidField,
            ),
            (
                "door",
                r#"{"id":"a","question":"  "}"#,
                id.clone(),
                ErrorCode::EmptyQuestion,
            ),
            (
                "door",
                &format!(r#"{{"id":"a","question":"{}"}}"#, "x".repeat(41)),
                id.clone(),
                ErrorCode::QuestionTooLong,
            ),
            (
                "yard",
                r#"{"id":"a","question":"x"}"#,
                id.clone(),
                ErrorCode::UnknownCamera,
            ),
            (
                "door",
                r#"{"id":"a","question":"x","window_secs":61}"#,
                id.clone(),
                ErrorCode::WindowTooLong,
            ),
            (
                "door",
                r#"{"id":"a","question":"x","window_secs":-1}"#,
                id.clone(),
                ErrorCode::InvalidField,
            ),
            (
                "door",
                r#"{"id":"a","question":"x","window_secs":"5"}"#,
                id.clone(),
                ErrorCode::InvalidField,
            ),
            (
                "door",
                r#"{"id":"a","question":"x","max_tokens":0}"#,
                id.clone(),
                ErrorCode::InvalidField,
            ),
            (
                "door",
                r#"{"id":"a","question":"x","max_tokens":1.5}"#,
                id.clone(),
                ErrorCode::InvalidField,
            ),
            (
                "door",
                r#"{"id":"a","question":"x","windw_secs":5}"#,
                id.clone(),
                ErrorCode::InvalidField,
            ),
            (
                "door",
                &format!(r#"{{"id":"a","question":"x","pad":"{}"}}"#, "p".repeat(600)),
                id.clone(),
                ErrorCode::TooLarge,
            ),
        ];
        for (camera, payload, want_id, want_code) in cases {
            assert_eq!(
                code(camera, payload),
                (want_id.clone(), *want_code),
                "payload {payload}"
            );
        }
    }

    #[test]
    fn messages_say_what_was_wrong() {
        let r = check("yard", r#"{"id":"a","question":"x"}"#).unwrap_err();
        assert_eq!(r.error.message, "no camera `yard` (cameras: door)");
        let r = check("door", r#"{"id":"a","question":"x","window_secs":90}"#).unwrap_err();
        assert!(
            r.error.message.contains("keeps (60 s"),
            "{}",
            r.error.message
        );
        let r = check("door", r#"{"id":"bad id!","question":"x"}"#).unwrap_err();
        assert_eq!(r.raw_id.as_deref(), Some("bad id!"));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // A cheap fuzz: every prefix of a few payloads, and random bytes.
        let seeds = [
            r#"{"id":"a","question":"x","window_secs":1e400}"#,
            "{\"id\":\"a\",\"question\":\"\u{1F600}\"}",
            "\u{0}\u{ff}",
        ];
        for s in seeds {
            for end in 0..=s.len() {
                let _ = validate(
                    "door",
                    &s.as_bytes()[..end],
                    Instant::now(),
                    &LIMITS,
                    &cams(),
                );
            }
        }
        let mut x = 0x1234_5678_u64;
        for _ in 0..2000 {
            let bytes: Vec<u8> = (0..(x % 64))
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let _ = validate("door", &bytes, Instant::now(), &LIMITS, &cams());
        }
    }
}
