//! Pipeline templates (`pipelines/*.pipeline`), compiled into the binary.
//!
//! A template is a fixed `gst-launch` description. Nothing from the configuration is ever spliced
//! into it: the URI, device, credentials and caps are set as properties on the named elements, so
//! a camera URL cannot inject elements. Required names: `src` (the source), `rate` (videorate;
//! its sink pad sees every decoded frame), `scale` (its sink pad sees the source geometry),
//! `caps` (a capsfilter edgevlm fills) and `sink` (an appsink).

pub use crate::config::Template;

/// Element names every template must define.
pub const REQUIRED_NAMES: [&str; 5] = ["src", "rate", "scale", "caps", "sink"];

/// One element of a parsed launch line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElementSpec {
    /// Factory name (`rtspsrc`).
    pub factory: String,
    /// `name=` property, if any.
    pub name: Option<String>,
}

impl Template {
    /// The launch line: the text without comment lines, joined.
    pub fn launch(&self) -> String {
        self.text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The elements of the launch line, in order; caps filters written inline are skipped.
    pub fn elements(&self) -> Vec<ElementSpec> {
        elements_of(&self.launch())
    }

    /// Factory names used, in order.
    pub fn factories(&self) -> Vec<String> {
        self.elements().into_iter().map(|e| e.factory).collect()
    }

    /// Checks the text without instantiating anything (hardware templates are checked this way on
    /// machines without the hardware).
    pub fn check_text(&self) -> Result<(), String> {
        let launch = self.launch();
        if launch.is_empty() {
            return Err(format!("template `{}` has no launch line", self.name));
        }
        if launch.contains(['{', '}', '$']) {
            return Err(format!(
                "template `{}` contains placeholders; values are set as properties, never spliced",
                self.name
            ));
        }
        if !["rtsp", "file", "v4l2", "test"].contains(&self.source_kind()) {
            return Err(format!(
                "template `{}` lacks a `# source: rtsp|file|v4l2|test` header",
                self.name
            ));
        }
        let elements = self.elements();
        for required in REQUIRED_NAMES {
            let n = elements
                .iter()
                .filter(|e| e.name.as_deref() == Some(required))
                .count();
            if n != 1 {
                return Err(format!(
                    "template `{}` must name exactly one element `{required}`, found {n}",
                    self.name
                ));
            }
        }
        let factory_of = |name: &str| {
            elements
                .iter()
                .find(|e| e.name.as_deref() == Some(name))
                .map(|e| e.factory.as_str())
        };
        for (name, factory) in [
            ("rate", "videorate"),
            ("caps", "capsfilter"),
            ("sink", "appsink"),
        ] {
            if factory_of(name) != Some(factory) {
                return Err(format!(
                    "template `{}`: element `{name}` must be a {factory}",
                    self.name
                ));
            }
        }
        if elements.last().and_then(|e| e.name.as_deref()) != Some("sink") {
            return Err(format!(
                "template `{}` must end with the appsink `sink`",
                self.name
            ));
        }
        Ok(())
    }
}

/// The elements of a launch line, in order; caps filters written inline are skipped.
pub(crate) fn elements_of(launch: &str) -> Vec<ElementSpec> {
    split_links(launch)
        .iter()

        .filter_map(|segment| {
            let mut words = segment.split_whitespace();
            let factory = words.next()?;
            // `video/x-raw,…` is an inline caps filter, not an element.
            if factory.contains('/') {
                return None;
            }
            let name = words
                .filter_map(|w| w.strip_prefix("name="))
                .map(|n| n.trim_matches('"').to_string())
                .next();
            Some(ElementSpec {
                factory: factory.to_string(),
                name,
            })
        })
        .collect()
}

/// Splits a launch line on `!` outside quotes and parentheses.
pub(super) fn split_links(launch: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let (mut depth, mut quoted) = (0i32, false);
    for c in launch.chars() {
        match c {
            '"' => quoted = !quoted,
            '(' if !quoted => depth += 1,
            ')' if !quoted => depth -= 1,
            '!' if !quoted && depth == 0 => {
                out.push(cur.trim().to_string());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur.trim().to_string());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_template_is_valid_text() {
        for t in Template::all() {
            t.check_text().unwrap_or_else(|e| panic!("{e}"));
            assert!(
                t.text.contains("# delivers: video/x-raw,format=RGB"),
                "{}",
                t.name
            );
        }
    }

    #[test]
    fn the_required_templates_exist() {
        for name in ["rtsp", "rtsp-nvdec", "rtsp-jetson", "file", "v4l2", "test"] {
            assert!(Template::by_name(name).is_some(), "{name}");
        }
    }

    #[test]
    fn hardware_templates_use_the_hardware_elements() {
        let nvdec = Template::by_name("rtsp-nvdec").unwrap().factories();
        assert!(nvdec.iter().any(|f| f == "nvh264dec"), "{nvdec:?}");
        let jetson = Template::by_name("rtsp-jetson").unwrap().factories();
        assert!(jetson.iter().any(|f| f == "nvv4l2decoder"), "{jetson:?}");
        assert!(jetson.iter().any(|f| f == "nvvidconv"), "{jetson:?}");
    }

    #[test]
    fn parsing_skips_inline_caps_and_finds_names() {
        let t = Template::by_name("rtsp").unwrap();
        let e = t.elements();
        assert_eq!(e[0].factory, "rtspsrc");
        assert_eq!(e[0].name.as_deref(), Some("src"));
        assert_eq!(e[1].factory, "decodebin");
    }

    #[test]
    fn a_template_without_a_sink_is_rejected() {
        let t = Template {
            name: "bad",
            text: "# source: test\nvideotestsrc name=src ! videorate name=rate ! videoscale name=scale ! capsfilter name=caps ! fakesink",
        };
        assert!(t.check_text().unwrap_err().contains("`sink`"));
    }
}
