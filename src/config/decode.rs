//! A strict TOML decoder that collects every problem with its path instead of stopping at the first.
//!
//! serde's derive stops at the first unknown key or bad type, which hides the other problems of a
//! file that a person is fixing by hand; `edgevlm validate` must report all of them at once.

use serde::de::DeserializeOwned;
use std::fmt;

/// One configuration problem: where it is and what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Path of the offending key, e.g. `cameras[1].sample_fps` (empty for file-level problems).
    pub path: String,
    /// What is wrong, with the expected and the found value where they help.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// All problems found in one configuration, in file order as far as the decoder can tell.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// Collects errors and, for the documentation test, every key the decoder asked for.
#[derive(Default)]
pub(crate) struct Sink {
    pub errors: Vec<ConfigError>,
    /// Key patterns (`cameras[].sample_fps`) requested while decoding, in order.
    pub known: Vec<String>,
}

impl Sink {
    pub fn error(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(ConfigError {
            path: path.into(),
            message: message.into(),
        });
    }
}

/// A view of one TOML table that records which keys were used.
pub(crate) struct Fields<'a> {
    path: String,
    pattern: String,
    table: &'a toml::Table,
    used: Vec<&'static str>,
}

impl<'a> Fields<'a> {
    /// `path` names this table in messages (`cameras[2]`), `pattern` in the key list (`cameras[]`).
    pub fn new(
        path: impl Into<String>,
        pattern: impl Into<String>,
        table: &'a toml::Table,
    ) -> Self {
        Fields {
            path: path.into(),
            pattern: pattern.into(),
            table,
            used: Vec::new(),
        }
    }

    /// Full path of `key` inside this table.
    pub fn path_of(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    fn mark(&mut self, key: &'static str, sink: &mut Sink) -> Option<&'a toml::Value> {
        self.used.push(key);
        let pattern = if self.pattern.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.pattern)
        };
        if !sink.known.contains(&pattern) {
            sink.known.push(pattern);
        }
        self.table.get(key)
    }

    /// Whether the table has `key` at all (does not mark it used).
    pub fn has(&self, key: &str) -> bool {
        self.table.contains_key(key)
    }

    /// The raw value of `key`, if present (marks it used).
    pub fn raw(&mut self, key: &'static str, sink: &mut Sink) -> Option<&'a toml::Value> {
        self.mark(key, sink)
    }

    /// Decodes `key` if present; a value of the wrong type is reported and gives `None`.
    pub fn opt<T: DeserializeOwned>(&mut self, key: &'static str, sink: &mut Sink) -> Option<T> {
        let value = self.mark(key, sink)?;
        match value.clone().try_into::<T>() {
            Ok(v) => Some(v),
            Err(e) => {
                let expected = clean_serde_message(&e.to_string());
                sink.error(self.path_of(key), expected);
                None
            }
        }
    }

    /// Decodes `key`, or returns `default` when it is absent or invalid (invalid is reported).
    pub fn get<T: DeserializeOwned>(
        &mut self,
        key: &'static str,
        default: T,
        sink: &mut Sink,
    ) -> T {
        self.opt(key, sink).unwrap_or(default)
    }

    /// Decodes `key` as the name of one of `choices`; absent, of the wrong type or unknown (the
    /// last two reported) gives `default`.
    pub fn choice<T: Copy>(
        &mut self,
        key: &'static str,
        choices: &[(&str, T)],
        default: T,
        sink: &mut Sink,
    ) -> T {
        let Some(text) = self.opt::<String>(key, sink) else {
            return default;
        };
        if let Some((_, v)) = choices.iter().find(|(name, _)| *name == text) {
            return *v;
        }
        let names: Vec<String> = choices.iter().map(|(n, _)| format!("\"{n}\"")).collect();
        let expected = match names.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            _ => names.join(""),
        };
        sink.error(
            self.path_of(key),
            format!("expected {expected}, got \"{text}\""),
        );
        default
    }

    /// A nested table; a non-table value is reported.
    pub fn table(&mut self, key: &'static str, sink: &mut Sink) -> Option<&'a toml::Table> {
        match self.mark(key, sink)? {
            toml::Value::Table(t) => Some(t),
            other => {
                sink.error(
                    self.path_of(key),
                    format!("expected a table, got {}", type_name(other)),
                );
                None
            }
        }
    }

    /// Reports every key of the table that no decoder asked for, with a suggestion.
    pub fn finish(self, sink: &mut Sink) {
        for key in self.table.keys() {
            if self.used.iter().any(|u| u == key) {
                continue;
            }
            let suggestion = closest(key, &self.used)
                .map(|s| format!("; did you mean `{s}`?"))
                .unwrap_or_default();
            let mut known: Vec<&str> = self.used.clone();
            known.sort_unstable();
            known.dedup();
            sink.error(
                self.path_of(key),
                format!(
                    "unknown key{suggestion} (known keys here: {})",
                    known.join(", ")
                ),
            );
        }
    }
}

/// TOML type name of a value, for messages.
pub(crate) fn type_name(v: &toml::Value) -> &'static str {
    match v {
        toml::Value::String(_) => "a string",
        toml::Value::Integer(_) => "an integer",
        toml::Value::Float(_) => "a float",
        toml::Value::Boolean(_) => "a boolean",
        toml::Value::Datetime(_) => "a datetime",
        toml::Value::Array(_) => "an array",
        toml::Value::Table(_) => "a table",
    }
}

/// serde's messages read "invalid type: string \"x\", expected f64"; say it in our words.
fn clean_serde_message(msg: &str) -> String {
    let msg = msg.trim();
    let msg = msg.strip_prefix("invalid type: ").unwrap_or(msg);
    let msg = msg
        .replace("expected f64", "expected a number")
        .replace("expected u32", "expected a non-negative integer")
        .replace("expected u64", "expected a non-negative integer")
        .replace("expected a borrowed string", "expected a string");
    // serde puts the found value first; turn "X, expected Y" into "expected Y, got X".
    match msg.split_once(", expected ") {
        Some((got, expected)) => format!("expected {expected}, got {got}"),
        None => msg,
    }
}

/// The known key nearest to `key` by edit distance, if it is close enough to be a typo.
fn closest<'k>(key: &str, known: &[&'k str]) -> Option<&'k str> {
    known
        .iter()
        .map(|k| (levenshtein(key, k), *k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 4))
        .min()
        .map(|(_, k)| k)
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_errors_say_expected_then_got() {
        assert_eq!(
            clean_serde_message("invalid type: string \"x\", expected f64"),
            "expected a number, got string \"x\""
        );
    }

    #[test]
    fn typos_get_a_suggestion() {
        assert_eq!(
            closest("sample_fsp", &["sample_fps", "uri"]),
            Some("sample_fps")
        );
        assert_eq!(closest("zzzzzz", &["sample_fps", "uri"]), None);
    }
}
