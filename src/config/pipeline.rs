//! Pipeline templates: the built-in catalogue (`pipelines/*.pipeline`, compiled into the binary), a
//! user's own file (`pipeline_file`), and the text checks both pass. Pure text: building a pipeline
//! from a template, and asking GStreamer whether its elements are installed, is the ingest stage's
//! (`crate::ingest::template`).
//!
//! A template is a fixed `gst-launch` description. Nothing from the configuration is ever spliced
//! into it: the URI, device, credentials and caps are set as properties on the named elements, so
//! a camera URL cannot inject elements. Its contract:
//!
//! - headers, as comment lines: `# source: rtsp|file|v4l2|test` (the kind of uri it reads) and
//!   `# delivers: video/x-raw,format=RGB,…` (edgevlm sets RGB caps at the sample rate and the model
//!   size on `caps`); the first line may name the template (`# rtsp: what it is`); any other
//!   `# key:` line is refused, so a misspelt header does not pass unnoticed;
//! - required names: `src` (the source), `rate` (a videorate; its sink pad sees every decoded
//!   frame), `scale` (its sink pad sees the source geometry), `caps` (a capsfilter edgevlm fills)
//!   and `sink` (an appsink, the last element);
//! - no placeholders (`{`, `}`, `$`).

use super::SourceUri;
use std::borrow::Cow;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Element names every template must define.
pub const REQUIRED_NAMES: [&str; 5] = ["src", "rate", "scale", "caps", "sink"];

/// The kinds of source a template can read (`# source:`), as [`SourceUri::default_pipeline`] names them.
pub const SOURCE_KINDS: [&str; 4] = ["rtsp", "file", "v4l2", "test"];

/// The largest template file read (a launch line is a few hundred bytes).
pub const MAX_FILE_BYTES: u64 = 64 * 1024;

/// One pipeline template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    /// The built-in template's name (as used in `cameras[].pipeline`), or a user template's path.
    pub name: Cow<'static, str>,
    /// The file's full text, comments included.
    pub text: Cow<'static, str>,
    /// The file a user template was read from (`cameras[].pipeline_file`); `None`: built in.
    pub file: Option<PathBuf>,
}

/// One element of a launch line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElementSpec {
    /// Factory name (`rtspsrc`).
    pub factory: String,
    /// `name=` property, if any.
    pub name: Option<String>,
    /// The line of the template it is written on (1-based; 1 for a launch line on its own).
    pub line: usize,
}

/// One thing wrong with a template's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateProblem {
    /// The line it is on (1-based), when it is on one.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

const fn builtin(name: &'static str, text: &'static str) -> Template {
    Template {
        name: Cow::Borrowed(name),
        text: Cow::Borrowed(text),
        file: None,
    }
}

static TEMPLATES: [Template; 9] = [
    builtin("rtsp", include_str!("../../pipelines/rtsp.pipeline")),
    builtin(
        "rtsp-nvdec",
        include_str!("../../pipelines/rtsp-nvdec.pipeline"),
    ),
    builtin(
        "rtsp-nvdec-h265",
        include_str!("../../pipelines/rtsp-nvdec-h265.pipeline"),
    ),
    builtin(
        "rtsp-jetson",
        include_str!("../../pipelines/rtsp-jetson.pipeline"),
    ),
    builtin(
        "rtsp-jetson-h265",
        include_str!("../../pipelines/rtsp-jetson-h265.pipeline"),
    ),
    builtin("file", include_str!("../../pipelines/file.pipeline")),
    builtin("v4l2", include_str!("../../pipelines/v4l2.pipeline")),
    builtin(
        "v4l2-jetson-mjpeg",
        include_str!("../../pipelines/v4l2-jetson-mjpeg.pipeline"),
    ),
    builtin("test", include_str!("../../pipelines/test.pipeline")),
];

impl Template {
    /// The built-in template called `name`.
    pub fn by_name(name: &str) -> Option<Template> {
        TEMPLATES.iter().find(|t| t.name == name).cloned()
    }

    /// Every built-in template name.
    pub fn names() -> Vec<&'static str> {
        TEMPLATES
            .iter()
            .filter_map(|t| match t.name {
                Cow::Borrowed(n) => Some(n),
                Cow::Owned(_) => None,
            })
            .collect()
    }

    /// Every built-in template.
    pub fn all() -> &'static [Template] {
        &TEMPLATES
    }

    /// A user template: `text`, read from `file`.
    pub fn from_text(file: &Path, text: String) -> Template {
        Template {
            name: Cow::Owned(file.display().to_string()),
            text: Cow::Owned(text),
            file: Some(file.to_path_buf()),
        }
    }

    /// Reads a user template file (at most [`MAX_FILE_BYTES`] of UTF-8), without checking it.
    pub fn read(file: &Path) -> Result<Template, String> {
        let cannot = |e: std::io::Error| format!("cannot read {}: {e}", file.display());
        let meta = std::fs::metadata(file).map_err(cannot)?;
        if !meta.is_file() {
            return Err(format!("{} is not a file", file.display()));
        }
        let mut bytes = Vec::new();
        std::fs::File::open(file)
            .and_then(|f| f.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes))
            .map_err(cannot)?;
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(format!(
                "{} is over {MAX_FILE_BYTES} bytes; a pipeline template is one launch line and its headers",
                file.display()
            ));
        }
        let text = String::from_utf8(bytes)
            .map_err(|e| format!("{} is not UTF-8 text: {e}", file.display()))?;
        Ok(Template::from_text(file, text))
    }

    /// The user template in `file` for a camera reading `uri`: read, checked like the built-in
    /// ones, and reading the camera's kind of source; every problem, each as `FILE:LINE: what`.
    pub fn load_for_camera(file: &Path, uri: &SourceUri) -> Result<Template, Vec<String>> {
        let t = Template::read(file).map_err(|e| vec![e])?;
        let mut problems: Vec<String> = t.problems().iter().map(|p| t.describe(p)).collect();
        if problems.is_empty() && !t.accepts(uri) {
            let line = t.header_line("source");
            problems.push(t.describe(&TemplateProblem {
                line,
                message: format!(
                    "`# source: {}`, but the camera's uri {uri} is of kind `{}`",
                    t.source_kind(),
                    uri.default_pipeline()
                ),
            }));
        }
        if problems.is_empty() {
            Ok(t)
        } else {
            Err(problems)
        }
    }

    /// `problem` as printed: `FILE:LINE: what` for a user template, `template `NAME`, line N: what`
    /// for a built-in one.
    pub fn describe(&self, problem: &TemplateProblem) -> String {
        match (&self.file, problem.line) {
            (Some(f), Some(line)) => format!("{}:{line}: {}", f.display(), problem.message),
            (Some(f), None) => format!("{}: {}", f.display(), problem.message),
            (None, Some(line)) => {
                format!("template `{}`, line {line}: {}", self.name, problem.message)
            }
            (None, None) => format!("template `{}`: {}", self.name, problem.message),
        }
    }

    /// The headers (`# key: value` comment lines, key one lowercase word): line, key, value.
    fn headers(&self) -> impl Iterator<Item = (usize, &str, &str)> {
        self.text.lines().enumerate().filter_map(|(i, l)| {
            let body = l.trim_start().strip_prefix('#')?.trim();
            let (key, value) = body.split_once(':')?;
            let key = key.trim_end();
            let is_key = key.starts_with(|c: char| c.is_ascii_lowercase())
                && key
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
            is_key.then(|| (i + 1, key, value.trim()))
        })
    }

    /// The value of the first `# key: value` header.
    fn header(&self, key: &str) -> Option<&str> {
        self.headers().find(|h| h.1 == key).map(|h| h.2)
    }

    fn header_line(&self, key: &str) -> Option<usize> {
        self.headers().find(|h| h.1 == key).map(|h| h.0)
    }

    /// The kind of source it reads (`rtsp`, `file`, `v4l2`, `test`; `unknown` without a header).
    pub fn source_kind(&self) -> &str {
        self.header("source").unwrap_or("unknown")
    }

    /// Whether its decoder is chosen by `decodebin` (software, or whatever decoder the machine
    /// ranks first): what `decode = "keyframes"` gates.
    pub fn decodes_in_software(&self) -> bool {
        self.launch_lines()
            .any(|(_, l)| l.split_whitespace().any(|w| w == "decodebin"))
    }

    /// Whether a camera with this URI can use the template.
    pub fn accepts(&self, uri: &SourceUri) -> bool {
        self.source_kind() == uri.default_pipeline()
    }

    /// The built-in template a camera with `uri` may use under `name`, or why not (an unknown
    /// name, or a template for another kind of source).
    pub fn for_camera(name: &str, uri: &SourceUri) -> Result<Template, String> {
        let t = Template::by_name(name).ok_or_else(|| {
            format!(
                "unknown pipeline template `{name}` (expected one of: {}; or your own file in \
                 `pipeline_file`)",
                Template::names().join(", ")
            )
        })?;
        if !t.accepts(uri) {
            return Err(format!(
                "template `{name}` reads {} sources, but uri is {uri}",
                t.source_kind()
            ));
        }
        Ok(t)
    }

    /// The lines of the launch description (not comments, not blank), with their line numbers.
    fn launch_lines(&self) -> impl Iterator<Item = (usize, &str)> {
        self.text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.trim()))
            .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
    }

    /// The launch line: the text without comment lines, joined.
    pub fn launch(&self) -> String {
        self.launch_lines()
            .map(|(_, l)| l)
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The launch line's link segments (split on `!`), each with the line it starts on.
    pub(crate) fn segments(&self) -> Vec<(usize, String)> {
        let mut launch = String::new();
        let mut starts = Vec::new();
        for (n, l) in self.launch_lines() {
            if !launch.is_empty() {
                launch.push(' ');
            }
            starts.push((launch.len(), n));
            launch.push_str(l);
        }
        let line_at = |offset: usize| {
            starts
                .iter()
                .take_while(|(start, _)| *start <= offset)
                .last()
                .map_or(1, |(_, n)| *n)
        };
        split_links_at(&launch)
            .into_iter()
            .map(|(offset, segment)| (line_at(offset), segment))
            .collect()
    }

    /// The elements of the launch line, in order; caps filters written inline are skipped.
    pub fn elements(&self) -> Vec<ElementSpec> {
        self.segments()
            .iter()
            .filter_map(|(line, segment)| element_of(segment, *line))
            .collect()
    }

    /// Factory names used, in order.
    pub fn factories(&self) -> Vec<String> {
        self.elements().into_iter().map(|e| e.factory).collect()
    }

    /// Checks the text without instantiating anything (hardware templates are checked this way on
    /// machines without the hardware): the first problem, as [`describe`](Self::describe) prints it.
    pub fn check_text(&self) -> Result<(), String> {
        match self.problems().first() {
            None => Ok(()),
            Some(p) => Err(self.describe(p)),
        }
    }

    /// Every way the text breaks the contract (module documentation), in line order where it can.
    pub fn problems(&self) -> Vec<TemplateProblem> {
        let mut out = self.header_problems();
        if self.launch_lines().next().is_none() {
            out.push(TemplateProblem {
                line: None,
                message: "has no launch line (only comments)".into(),
            });
            return out;
        }
        for (line, text) in self.launch_lines() {
            if let Some(word) = text
                .split_whitespace()
                .find(|w| w.contains(['{', '}', '$']))
            {
                out.push(TemplateProblem {
                    line: Some(line),
                    message: format!(
                        "`{word}` is a placeholder, and nothing is spliced into a template: \
                         edgevlm sets the uri, device and credentials as properties of `src`"
                    ),
                });
            }
        }
        out.extend(element_problems(&self.elements()));
        out
    }

    fn header_problems(&self) -> Vec<TemplateProblem> {
        let mut out = Vec::new();
        let mut seen: Vec<(&str, usize)> = Vec::new();
        for (line, key, value) in self.headers() {
            match key {
                "source" | "delivers" => {
                    if let Some((_, first)) = seen.iter().find(|(k, _)| *k == key) {
                        out.push(TemplateProblem {
                            line: Some(line),
                            message: format!(
                                "a second `# {key}:` header (the first is on line {first})"
                            ),
                        });
                        continue;
                    }
                    seen.push((key, line));
                    if let Some(message) = header_value_problem(key, value) {
                        out.push(TemplateProblem {
                            line: Some(line),
                            message,
                        });
                    }
                }
                // The first line names the template (`# rtsp: an RTSP camera …`).
                _ if line == 1 => {}
                _ => out.push(TemplateProblem {
                    line: Some(line),
                    message: format!(
                        "unknown header `# {key}:` (the headers are `# source:` and \
                         `# delivers:`; only the first line may be `# NAME: what it is`)"
                    ),
                }),
            }
        }
        for key in ["source", "delivers"] {
            if !seen.iter().any(|(k, _)| *k == key) {
                out.push(TemplateProblem {
                    line: None,
                    message: match key {
                        "source" => format!(
                            "no `# source:` header (the kind of uri it reads: {})",
                            SOURCE_KINDS.join(", ")
                        ),
                        _ => "no `# delivers:` header (the caps the template delivers: \
                              `# delivers: video/x-raw,format=RGB`)"
                            .into(),
                    },
                });
            }
        }
        out
    }
}

/// What is wrong with a `# source:` or `# delivers:` value, if anything.
fn header_value_problem(key: &str, value: &str) -> Option<String> {
    if key == "source" {
        return (!SOURCE_KINDS.contains(&value)).then(|| {
            format!(
                "`# source: {value}` is not a kind of source (expected one of: {})",
                SOURCE_KINDS.join(", ")
            )
        });
    }
    let fields: Vec<String> = value
        .split(',')
        .map(|f| {
            f.split_whitespace()
                .collect::<String>()
                .replace("(string)", "")
        })
        .collect();
    let raw = fields.first().is_some_and(|f| f == "video/x-raw");
    let rgb = fields.iter().any(|f| f == "format=RGB");
    (!(raw && rgb)).then(|| {
        format!(
            "`# delivers: {value}` breaks the contract: edgevlm sets video/x-raw,format=RGB at the \
             sample rate and the model size on `caps`, so the template delivers \
             `video/x-raw,format=RGB`"
        )
    })
}

/// The required names, each on one element of the right kind, and the appsink last.
fn element_problems(elements: &[ElementSpec]) -> Vec<TemplateProblem> {
    let mut out = Vec::new();
    for required in REQUIRED_NAMES {
        let mut named = elements
            .iter()
            .filter(|e| e.name.as_deref() == Some(required));
        match (named.next(), named.next()) {
            (None, _) => out.push(TemplateProblem {
                line: None,
                message: format!(
                    "no element named `{required}` (a template names {})",
                    REQUIRED_NAMES.join(", ")
                ),
            }),
            (Some(first), Some(second)) => out.push(TemplateProblem {
                line: Some(second.line),
                message: format!(
                    "a second element named `{required}` (the first is on line {})",
                    first.line
                ),
            }),
            (Some(_), None) => {}
        }
    }
    for (name, factory, role) in [
        (
            "rate",
            "videorate",
            "its sink pad counts every decoded frame",
        ),
        ("caps", "capsfilter", "edgevlm sets the RGB caps on it"),
        ("sink", "appsink", "edgevlm takes the frames from it"),
    ] {
        if let Some(e) = elements.iter().find(|e| e.name.as_deref() == Some(name))
            && e.factory != factory
        {
            out.push(TemplateProblem {
                line: Some(e.line),
                message: format!(
                    "element `{name}` is `{}`, but it must be `{factory}` ({role})",
                    e.factory
                ),
            });
        }
    }
    if let Some(last) = elements.last()
        && last.name.as_deref() != Some("sink")
    {
        out.push(TemplateProblem {
            line: Some(last.line),
            message: format!(
                "the pipeline ends with `{}`; it must end with the appsink named `sink`",
                last.factory
            ),
        });
    }
    out.sort_by_key(|p| p.line.unwrap_or(usize::MAX));
    out
}

/// The element a link segment starts with (`None` for inline caps and references to named
/// elements such as `t.` or `demux.video_0`).
fn element_of(segment: &str, line: usize) -> Option<ElementSpec> {
    let mut words = segment.split_whitespace();
    let factory = words.next()?;
    // `video/x-raw,…` is an inline caps filter, `name.` a link to a named element or its pad.
    if factory.contains(['/', '.', '"']) {
        return None;
    }
    let name = words
        .filter_map(|w| w.strip_prefix("name="))
        .map(|n| n.trim_matches('"').to_string())
        .next();
    Some(ElementSpec {
        factory: factory.to_string(),
        name,
        line,
    })
}

/// The elements of a launch line, in order; caps filters written inline are skipped.
pub(crate) fn elements_of(launch: &str) -> Vec<ElementSpec> {
    split_links(launch)
        .iter()
        .filter_map(|segment| element_of(segment, 1))
        .collect()
}

/// Splits a launch line on `!` outside quotes and parentheses.
pub(crate) fn split_links(launch: &str) -> Vec<String> {
    split_links_at(launch).into_iter().map(|(_, s)| s).collect()
}

/// [`split_links`], each segment with the byte offset where its text starts.
fn split_links_at(launch: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut start = 0;
    let (mut depth, mut quoted) = (0i32, false);
    let push = |out: &mut Vec<(usize, String)>, from: usize, to: usize| {
        let raw = &launch[from..to];
        let lead = raw.len() - raw.trim_start().len();
        out.push((from + lead, raw.trim().to_string()));
    };
    for (i, c) in launch.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '(' if !quoted => depth += 1,
            ')' if !quoted => depth -= 1,
            '!' if !quoted && depth == 0 => {
                push(&mut out, start, i);
                start = i + 1;
            }
            _ => {}
        }
    }
    push(&mut out, start, launch.len());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(text: &str) -> Template {
        Template::from_text(Path::new("/etc/edgevlm/mine.pipeline"), text.to_string())
    }

    fn messages(t: &Template) -> Vec<String> {
        t.problems().iter().map(|p| t.describe(p)).collect()
    }

    const GOOD: &str = "# mine: an RTSP camera\n# source: rtsp\n\
                        # delivers: video/x-raw,format=RGB\n\
                        rtspsrc name=src ! decodebin\n  ! videorate name=rate drop-only=true\n  \
                        ! videoconvertscale name=scale ! capsfilter name=caps ! appsink name=sink\n";

    #[test]
    fn every_built_in_template_keeps_the_contract() {
        for t in Template::all() {
            assert_eq!(t.problems(), [], "{}", t.name);
            assert!(SOURCE_KINDS.contains(&t.source_kind()), "{}", t.name);
        }
    }

    #[test]
    fn the_built_in_names_include_the_codec_and_hardware_variants() {
        for name in [
            "rtsp",
            "rtsp-nvdec",
            "rtsp-nvdec-h265",
            "rtsp-jetson",
            "rtsp-jetson-h265",
            "file",
            "v4l2",
            "v4l2-jetson-mjpeg",
            "test",
        ] {
            assert!(Template::by_name(name).is_some(), "{name}");
        }
        assert_eq!(Template::names().len(), Template::all().len());
    }

    #[test]
    fn hardware_templates_use_the_hardware_elements_for_their_codec() {
        let has = |name: &str, wanted: &[&str]| {
            let f = Template::by_name(name).unwrap().factories();
            for w in wanted {
                assert!(f.iter().any(|x| x == w), "{name} lacks {w}: {f:?}");
            }
            f
        };
        has("rtsp-nvdec", &["rtph264depay", "h264parse", "nvh264dec"]);
        has(
            "rtsp-nvdec-h265",
            &["rtph265depay", "h265parse", "nvh265dec"],
        );
        has(
            "rtsp-jetson",
            &["rtph264depay", "nvv4l2decoder", "nvvidconv"],
        );
        has(
            "rtsp-jetson-h265",
            &["rtph265depay", "h265parse", "nvv4l2decoder", "nvvidconv"],
        );
        has(
            "v4l2-jetson-mjpeg",
            &["v4l2src", "jpegparse", "nvv4l2decoder", "nvvidconv"],
        );
        let t = Template::by_name("v4l2-jetson-mjpeg").unwrap();
        assert!(
            t.launch()
                .contains("image/jpeg ! jpegparse ! nvv4l2decoder mjpeg=1")
        );
        for name in ["rtsp-nvdec-h265", "rtsp-jetson-h265", "v4l2-jetson-mjpeg"] {
            let t = Template::by_name(name).unwrap();
            assert!(!t.decodes_in_software(), "{name}");
            assert!(t.text.contains("Checked as text only here"), "{name}");
        }
    }

    #[test]
    fn hardware_template_comments_point_at_templates_that_exist() {
        // The comments once said "copy this file", which does nothing to a compiled-in template.
        for t in Template::all() {
            assert!(!t.text.contains("copy this file"), "{}", t.name);
            for word in t.text.split('`').skip(1).step_by(2) {
                let template_like = word.starts_with("rtsp-") || word.starts_with("v4l2-");
                if template_like && !word.contains(' ') {
                    assert!(Template::by_name(word).is_some(), "{}: `{word}`", t.name);
                }
            }
        }
    }

    #[test]
    fn parsing_skips_inline_caps_and_references_and_finds_names_and_lines() {
        let t = Template::by_name("rtsp").unwrap();
        let e = t.elements();
        assert_eq!(e[0].factory, "rtspsrc");
        assert_eq!(e[0].name.as_deref(), Some("src"));
        assert_eq!(e[1].factory, "decodebin");
        let t = user(GOOD);
        let lines: Vec<(String, usize)> = t
            .elements()
            .into_iter()
            .map(|e| (e.factory, e.line))
            .collect();
        assert_eq!(
            lines,
            [
                ("rtspsrc".to_string(), 4),
                ("decodebin".into(), 4),
                ("videorate".into(), 5),
                ("videoconvertscale".into(), 6),
                ("capsfilter".into(), 6),
                ("appsink".into(), 6)
            ]
        );
        let tee = elements_of("videotestsrc ! tee name=t ! queue ! fakesink t. ! queue ! appsink");
        assert!(tee.iter().all(|e| !e.factory.contains('.')), "{tee:?}");
        assert_eq!(user(GOOD).problems(), []);
    }

    #[test]
    fn a_user_template_names_its_file_and_line_for_every_problem() {
        let t = user(
            "# mine: spliced\n# source: rtsp\n# delivers: video/x-raw,format=RGB\n\
             rtspsrc name=src location={uri} ! decodebin\n\
             ! videorate name=rate ! videoscale name=scale ! capsfilter name=caps caps=$CAPS\n\
             ! fakesink name=sink\n",
        );
        assert_eq!(
            messages(&t),
            [
                "/etc/edgevlm/mine.pipeline:4: `location={uri}` is a placeholder, and nothing is \
                 spliced into a template: edgevlm sets the uri, device and credentials as \
                 properties of `src`",
                "/etc/edgevlm/mine.pipeline:5: `caps=$CAPS` is a placeholder, and nothing is \
                 spliced into a template: edgevlm sets the uri, device and credentials as \
                 properties of `src`",
                "/etc/edgevlm/mine.pipeline:6: element `sink` is `fakesink`, but it must be \
                 `appsink` (edgevlm takes the frames from it)",
            ]
        );
    }

    #[test]
    fn missing_and_repeated_names_and_a_wrong_last_element_are_refused() {
        let t = user(
            "# source: file\n# delivers: video/x-raw,format=RGB\n\
             filesrc name=src ! decodebin ! videorate name=rate\n\
             ! videoconvertscale name=rate ! capsfilter name=caps ! appsink name=sink ! fakesink\n",
        );
        let got = messages(&t);
        for want in [
            "/etc/edgevlm/mine.pipeline:4: a second element named `rate` (the first is on line 3)",
            "/etc/edgevlm/mine.pipeline:4: the pipeline ends with `fakesink`; it must end with \
             the appsink named `sink`",
            "/etc/edgevlm/mine.pipeline: no element named `scale` (a template names src, rate, \
             scale, caps, sink)",
        ] {
            assert!(
                got.iter().any(|g| g == want),
                "missing `{want}` in {got:#?}"
            );
        }
        assert_eq!(got.len(), 3, "{got:#?}");
    }

    #[test]
    fn headers_are_required_exact_and_known() {
        let t = user(
            "# mine: a camera\n# sources: rtsp\n# delivers: video/x-raw,format=BGR\n\
             # source: rtp\n# source: rtsp\n\
             rtspsrc name=src ! decodebin ! videorate name=rate ! videoconvertscale name=scale \
             ! capsfilter name=caps ! appsink name=sink\n",
        );
        let got = messages(&t);
        assert_eq!(
            got,
            [
                "/etc/edgevlm/mine.pipeline:2: unknown header `# sources:` (the headers are \
                 `# source:` and `# delivers:`; only the first line may be `# NAME: what it is`)",
                "/etc/edgevlm/mine.pipeline:3: `# delivers: video/x-raw,format=BGR` breaks the \
                 contract: edgevlm sets video/x-raw,format=RGB at the sample rate and the model \
                 size on `caps`, so the template delivers `video/x-raw,format=RGB`",
                "/etc/edgevlm/mine.pipeline:4: `# source: rtp` is not a kind of source (expected \
                 one of: rtsp, file, v4l2, test)",
                "/etc/edgevlm/mine.pipeline:5: a second `# source:` header (the first is on line 4)",
            ]
        );
        let t = user("rtspsrc name=src ! fakesink\n");
        let got = messages(&t);
        assert!(
            got[0].ends_with(
                "no `# source:` header (the kind of uri it reads: rtsp, file, v4l2, test)"
            ),
            "{got:#?}"
        );
        assert!(got[1].contains("no `# delivers:` header"), "{got:#?}");
        let t = user("# source: test\n# delivers: video/x-raw,format=RGB\n# only comments\n");
        assert_eq!(
            messages(&t),
            ["/etc/edgevlm/mine.pipeline: has no launch line (only comments)"]
        );
    }

    #[test]
    fn a_user_template_must_read_the_cameras_kind_of_source() {
        let dir = std::env::temp_dir().join(format!("edgevlm-tpl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("mine.pipeline");
        std::fs::write(&file, GOOD).unwrap();
        let rtsp = SourceUri::parse("rtsp://cam/a").unwrap();
        let t = Template::load_for_camera(&file, &rtsp).unwrap();
        assert_eq!(t.file.as_deref(), Some(file.as_path()));
        assert_eq!(t.name, file.display().to_string());
        assert!(t.decodes_in_software());
        let clip = SourceUri::parse("/clips/a.mp4").unwrap();
        let errs = Template::load_for_camera(&file, &clip).unwrap_err();
        assert_eq!(
            errs,
            [format!(
                "{}:2: `# source: rtsp`, but the camera's uri file:///clips/a.mp4 is of kind `file`",
                file.display()
            )]
        );
        let missing = dir.join("none.pipeline");
        let errs = Template::load_for_camera(&missing, &rtsp).unwrap_err();
        assert!(
            errs[0].starts_with(&format!("cannot read {}: ", missing.display())),
            "{errs:?}"
        );
        let errs = Template::load_for_camera(&dir, &rtsp).unwrap_err();
        assert_eq!(errs, [format!("{} is not a file", dir.display())]);
        std::fs::write(&file, vec![b'#'; MAX_FILE_BYTES as usize + 1]).unwrap();
        let errs = Template::load_for_camera(&file, &rtsp).unwrap_err();
        assert!(errs[0].contains("is over 65536 bytes"), "{errs:?}");
        std::fs::write(&file, [0xff, 0xfe, b'\n']).unwrap();
        let errs = Template::load_for_camera(&file, &rtsp).unwrap_err();
        assert!(errs[0].contains("is not UTF-8 text"), "{errs:?}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn split_links_keeps_quoted_and_bracketed_bangs_and_offsets() {
        let launch = "a x=\"1 ! 2\" ! ( b ! c ) !  d";
        assert_eq!(
            split_links_at(launch),
            [
                (0, "a x=\"1 ! 2\"".to_string()),
                (14, "( b ! c )".into()),
                (27, "d".into())
            ]
        );
    }
}
