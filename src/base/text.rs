//! Text from outside (MQTT user names, topics, ids) made safe to log.

/// `s` cut to `max` characters (then `…`), with every control character (newline, carriage
/// return, escape, …) written as an escape (`\n`, `\u{1b}`), so that a client cannot forge or
/// colour a log line.
pub fn log_safe(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max * 2));
    for (i, c) in s.chars().enumerate() {
        if i == max {
            out.push('…');
            break;
        }
        if c.is_control() || c == '\u{2028}' || c == '\u{2029}' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_long_text_cut() {
        assert_eq!(
            log_safe("bob\n2026-12-01T00:00:00Z  INFO forged", 64),
            "bob\\n2026-12-01T00:00:00Z  INFO forged"
        );
        assert_eq!(
            log_safe("a\r\u{1b}[31mred\u{7}\u{2028}", 64),
            "a\\r\\u{1b}[31mred\\u{7}\\u{2028}"
        );
        assert_eq!(log_safe("école", 3), "éco…");
        assert_eq!(log_safe("door", 4), "door");
    }
}
