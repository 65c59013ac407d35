//! Camera source addresses, credentials and their redaction.
//!
//! Credentials never live inside a URL here (moonfire-nvr's rule): a URL with a password would end up
//! in logs, status messages and GStreamer's own debug strings. They are set as element properties
//! from `username` + `password_file`/`password_env` instead.

use std::fmt;
use std::path::PathBuf;

/// Where a camera's frames come from, parsed from its `uri`.
#[derive(Clone, PartialEq, Eq)]
pub enum SourceUri {
    /// `rtsp://host[:port]/path` or `rtsps://…`, without user info.
    Rtsp(String),
    /// A local video file (`file:///abs/path` or a plain path).
    File(PathBuf),
    /// A V4L2 capture device (`v4l2:///dev/video0`).
    V4l2(PathBuf),
    /// A GStreamer test pattern (`test://ball`, `test://smpte`, `test://snow`, …).
    Test(String),
}

/// Test patterns accepted by `test://PATTERN` (videotestsrc's nicknames that move or change).
pub const TEST_PATTERNS: &[&str] = &[
    "smpte",
    "snow",
    "black",
    "white",
    "red",
    "green",
    "blue",
    "checkers-1",
    "checkers-2",
    "checkers-4",
    "checkers-8",
    "circular",
    "blink",
    "smpte75",
    "zone-plate",
    "gamut",
    "chroma-zone-plate",
    "solid-color",
    "ball",
    "smpte100",
    "bar",
    "pinwheel",
    "spokes",
    "gradient",
    "colors",
];

impl SourceUri {
    /// Parses a camera URI; the error message never repeats a password found in it.
    pub fn parse(uri: &str) -> Result<SourceUri, String> {
        let uri = uri.trim();
        if uri.is_empty() {
            return Err("must not be empty".into());
        }
        let Some((scheme, rest)) = uri.split_once("://") else {
            // A plain path is a file; anything else with a colon is probably a typo'd URL.
            if uri.starts_with('/') || uri.starts_with('.') || !uri.contains(':') {
                return Ok(SourceUri::File(PathBuf::from(uri)));
            }
            return Err(format!(
                "`{}` is neither a URL (scheme://…) nor a file path",
                redact_uri(uri)
            ));
        };
        match scheme.to_ascii_lowercase().as_str() {
            "rtsp" | "rtsps" | "rtspt" => {
                let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
                if authority.contains('@') {
                    return Err(format!(
                        "`{}` carries credentials in the URL; put the user name in `username` and \
                         the password in `password_file` or `password_env` instead",
                        redact_uri(uri)
                    ));
                }
                let host = authority
                    .rsplit_once(':')
                    .map_or(authority, |(h, _)| h)
                    .trim_matches(['[', ']']);
                if host.is_empty() {
                    return Err(format!("`{}` has no host", redact_uri(uri)));
                }
                if let Some((_, port)) = authority.rsplit_once(':')
                    && !authority.ends_with(']')
                    && port.parse::<u16>().is_err()
                {
                    return Err(format!(
                        "`{}` has an invalid port `{port}`",
                        redact_uri(uri)
                    ));
                }
                Ok(SourceUri::Rtsp(uri.to_string()))
            }
            "file" => {
                let path = rest.strip_prefix("localhost").unwrap_or(rest);
                if !path.starts_with('/') {
                    return Err(format!(
                        "`{}`: a file URL needs an absolute path (file:///path/to/video.mp4)",
                        redact_uri(uri)
                    ));
                }
                Ok(SourceUri::File(PathBuf::from(path)))
            }
            "v4l2" => {
                if !rest.starts_with('/') {
                    return Err(format!(
                        "`{}`: expected a device path such as v4l2:///dev/video0",
                        redact_uri(uri)
                    ));
                }
                Ok(SourceUri::V4l2(PathBuf::from(rest)))
            }
            "test" => {
                let pattern = rest.trim_end_matches('/');
                if TEST_PATTERNS.contains(&pattern) {
                    Ok(SourceUri::Test(pattern.to_string()))
                } else {
                    Err(format!(
                        "unknown test pattern `{pattern}` (expected one of: {})",
                        TEST_PATTERNS.join(", ")
                    ))
                }
            }
            other => Err(format!(
                "unsupported scheme `{other}` (expected rtsp, rtsps, file, v4l2 or test)"
            )),
        }
    }

    /// Whether the source runs in real time (restarted on end of stream) or ends (a file).
    pub fn is_live(&self) -> bool {
        !matches!(self, SourceUri::File(_))
    }

    /// The pipeline template used when the camera does not name one.
    pub fn default_pipeline(&self) -> &'static str {
        match self {
            SourceUri::Rtsp(_) => "rtsp",
            SourceUri::File(_) => "file",
            SourceUri::V4l2(_) => "v4l2",
            SourceUri::Test(_) => "test",
        }
    }

    /// The address with any credentials removed, safe to log.
    pub fn redacted(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for SourceUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceUri::Rtsp(u) => f.write_str(&redact_uri(u)),
            SourceUri::File(p) => write!(f, "file://{}", p.display()),
            SourceUri::V4l2(p) => write!(f, "v4l2://{}", p.display()),
            SourceUri::Test(p) => write!(f, "test://{p}"),
        }
    }
}

impl fmt::Debug for SourceUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SourceUri({self})")
    }
}

/// Query parameters whose value is a secret (compared without case, `-` and `_`).
const SECRET_PARAMS: [&str; 12] = [
    "password",
    "passwd",
    "pass",
    "pwd",
    "token",
    "accesstoken",
    "secret",
    "key",
    "apikey",
    "auth",
    "signature",
    "sig",
];

/// `uri` with its secrets replaced by `***`: the user-info part (`user:pass@`) in any spelling of
/// the separator (`rtsp://`, `rtsp:\\`, `rtsp:/`, none at all) and the value of every query
/// parameter named like a password or token (`?password=…`, `&token=…`, see `SECRET_PARAMS`).
pub fn redact_uri(uri: &str) -> String {
    // Where the authority starts: after `scheme:` and any slashes or backslashes.
    let scheme_end = uri
        .find(':')
        .filter(|&i| {
            i > 0
                && uri[..i]
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        })
        .filter(|&i| uri[i + 1..].starts_with(['/', '\\']));
    let start = match scheme_end {
        Some(i) => i + 1 + uri[i + 1..].len() - uri[i + 1..].trim_start_matches(['/', '\\']).len(),
        None => 0,
    };
    let end = uri[start..]
        .find(['/', '\\', '?', '#'])
        .map_or(uri.len(), |e| start + e);
    let mut out = match uri[start..end].rfind('@') {
        Some(at) => format!("{}***@{}", &uri[..start], &uri[start + at + 1..end]),
        None => uri[..end].to_string(),
    };
    let rest = &uri[end..];
    let (before_fragment, fragment) = rest.split_at(rest.find('#').unwrap_or(rest.len()));
    match before_fragment.split_once('?') {
        Some((path, query)) => {
            out.push_str(path);
            out.push('?');
            let params: Vec<String> = query
                .split('&')
                .map(|p| match p.split_once('=') {
                    Some((name, _)) if secret_param(name) => format!("{name}=***"),
                    _ => p.to_string(),
                })
                .collect();
            out.push_str(&params.join("&"));
        }
        None => out.push_str(before_fragment),
    }
    out.push_str(fragment);
    out
}

fn secret_param(name: &str) -> bool {
    let norm: String = name
        .chars()
        .filter(|c| *c != '-' && *c != '_')
        .flat_map(char::to_lowercase)
        .collect();
    SECRET_PARAMS.contains(&norm.as_str())
}

/// A secret string (a camera or broker password) that cannot print itself.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret itself, for handing to the element or client that needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Removes every occurrence of the secret from `text` (defence in depth for foreign messages).
    pub fn scrub(&self, text: &str) -> String {
        if self.0.is_empty() {
            text.to_string()
        } else {
            text.replace(&self.0, "***")
        }
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Where a camera's password is read from, at every (re)connect so it can be rotated in place.
#[derive(Clone, PartialEq, Eq)]
pub enum PasswordSource {
    /// A file whose content (without the trailing newline) is the password (systemd credentials).
    File(PathBuf),
    /// An environment variable.
    Env(String),
}

impl fmt::Debug for PasswordSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PasswordSource::File(p) => write!(f, "password_file({})", p.display()),
            PasswordSource::Env(v) => write!(f, "password_env({v})"),
        }
    }
}

impl PasswordSource {
    /// Reads the password now; the error names the source, never the content.
    pub fn load(&self) -> Result<Secret, String> {
        match self {
            PasswordSource::File(path) => match std::fs::read_to_string(path) {
                Ok(s) => Ok(Secret::new(s.trim_end_matches(['\n', '\r']))),
                Err(e) => Err(format!("cannot read password file {}: {e}", path.display())),
            },
            PasswordSource::Env(var) => match std::env::var(var) {
                Ok(s) if !s.is_empty() => Ok(Secret::new(s)),
                Ok(_) => Err(format!("environment variable {var} is empty")),
                Err(_) => Err(format!("environment variable {var} is not set")),
            },
        }
    }
}

/// User name plus where to read the password.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CredentialSource {
    /// RTSP user name.
    pub username: String,
    /// Where the password comes from (none: user name only).
    pub password: Option<PasswordSource>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_with_credentials_are_rejected_without_echoing_the_password() {
        let err = SourceUri::parse("rtsp://admin:hunter2@10.0.0.5:554/stream").unwrap_err();
        assert!(!err.contains("hunter2"), "{err}");
        assert!(err.contains("rtsp://***@10.0.0.5:554/stream"), "{err}");
        assert!(err.contains("password_file"), "{err}");
    }

    #[test]
    fn schemes_map_to_sources() {
        assert_eq!(
            SourceUri::parse("rtsp://cam.local:8554/live").unwrap(),
            SourceUri::Rtsp("rtsp://cam.local:8554/live".into())
        );
        assert_eq!(
            SourceUri::parse("file:///srv/a.mp4").unwrap(),
            SourceUri::File("/srv/a.mp4".into())
        );
        assert_eq!(
            SourceUri::parse("clips/a.mp4").unwrap(),
            SourceUri::File("clips/a.mp4".into())
        );
        assert_eq!(
            SourceUri::parse("v4l2:///dev/video0").unwrap(),
            SourceUri::V4l2("/dev/video0".into())
        );
        assert_eq!(
            SourceUri::parse("test://ball").unwrap(),
            SourceUri::Test("ball".into())
        );
        assert!(
            SourceUri::parse("http://x/y")
                .unwrap_err()
                .contains("scheme `http`")
        );
        assert!(
            SourceUri::parse("rtsp://cam:99999/x")
                .unwrap_err()
                .contains("port")
        );
        assert!(
            SourceUri::parse("test://nope")
                .unwrap_err()
                .contains("ball")
        );
    }

    #[test]
    fn redaction_hides_user_info_and_secret_parameters_in_any_form() {
        let cases = [
            ("rtsp://u:p@h:1/a@b", "rtsp://***@h:1/a@b"),
            ("rtsp://h/x", "rtsp://h/x"),
            ("rtsp:\\\\u:pw@host/s", "rtsp:\\\\***@host/s"),
            ("rtsp:/u:pw@host", "rtsp:/***@host"),
            ("file://u:pw@/v.mp4", "file://***@/v.mp4"),
            ("u:pw@host:554/s", "***@host:554/s"),
            (
                "http://h/s?user=a&password=pw&x=1",
                "http://h/s?user=a&password=***&x=1",
            ),
            (
                "rtsp://h/s?Access-Token=t0k#pw=1",
                "rtsp://h/s?Access-Token=***#pw=1",
            ),
            (
                "rtsp://h/s?PWD=a&api_key=b&sig=c",
                "rtsp://h/s?PWD=***&api_key=***&sig=***",
            ),
            ("rtsp://a:b@h/s?token=t", "rtsp://***@h/s?token=***"),
            ("test://ball", "test://ball"),
            ("/videos/a@b.mp4", "/videos/a@b.mp4"),
        ];
        for (uri, want) in cases {
            assert_eq!(redact_uri(uri), want, "{uri}");
        }
    }

    #[test]
    fn no_parse_error_repeats_a_password() {
        for uri in [
            "rtsp:\\\\admin:hunter2@cam",
            "file://admin:hunter2@",
            "rtsp://admin:hunter2@cam/s",
            "rtsp://cam:99999/s?password=hunter2",
            "rtsp://:1/s?password=hunter2",
            "v4l2://admin:hunter2@dev",
            "admin:hunter2@cam",
            "ftp://admin:hunter2@cam",
        ] {
            let e = SourceUri::parse(uri).unwrap_err();
            assert!(!e.contains("hunter2"), "{uri}: {e}");
        }
        let ok = SourceUri::parse("rtsp://cam/s?password=hunter2").unwrap();
        assert!(!ok.to_string().contains("hunter2"), "{ok}");
    }

    #[test]
    fn secrets_never_print_themselves() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s} {s:?}"), "*** Secret(***)");
        assert_eq!(s.scrub("auth hunter2 failed"), "auth *** failed");
    }
}
