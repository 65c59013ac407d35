//! The pipeline templates (`pipelines/*.pipeline`) a camera can name, compiled into the binary.
//! This is the catalogue and the one check of a camera's choice; building a pipeline from a
//! template is the ingest stage's (`crate::ingest::template`).

use super::SourceUri;

/// One pipeline template.
#[derive(Debug, Clone, Copy)]
pub struct Template {
    /// Template name, as used in `cameras[].pipeline`.
    pub name: &'static str,
    /// The file's full text, comments included.
    pub text: &'static str,
}

const TEMPLATES: &[Template] = &[
    Template {
        name: "rtsp",
        text: include_str!("../../pipelines/rtsp.pipeline"),
    },
    Template {
        name: "rtsp-nvdec",
        text: include_str!("../../pipelines/rtsp-nvdec.pipeline"),
    },
    Template {
        name: "rtsp-jetson",
        text: include_str!("../../pipelines/rtsp-jetson.pipeline"),
    },
    Template {
        name: "file",
        text: include_str!("../../pipelines/file.pipeline"),
    },
    Template {
        name: "v4l2",
        text: include_str!("../../pipelines/v4l2.pipeline"),
    },
    Template {
        name: "test",
        text: include_str!("../../pipelines/test.pipeline"),
    },
];

impl Template {
    /// The template called `name`.
    pub fn by_name(name: &str) -> Option<Template> {
        TEMPLATES.iter().copied().find(|t| t.name == name)
    }

    /// Every template name.
    pub fn names() -> Vec<&'static str> {
        TEMPLATES.iter().map(|t| t.name).collect()
    }

    /// Every template.
    pub fn all() -> &'static [Template] {
        TEMPLATES
    }

    /// The value of a `# key: value` header line.
    fn header(&self, key: &str) -> Option<&'static str> {
        self.text.lines().find_map(|l| {
            l.strip_prefix('#')
                .map(str::trim)
                .and_then(|l| l.strip_prefix(key))
                .and_then(|l| l.strip_prefix(':'))
                .map(str::trim)
        })
    }

    /// The kind of source it reads (`rtsp`, `file`, `v4l2`, `test`).
    pub fn source_kind(&self) -> &'static str {
        self.header("source").unwrap_or("unknown")
    }

    /// Whether its decoder is chosen by `decodebin` (software, or whatever decoder the machine
    /// ranks first): what `decode = "keyframes"` gates.
    pub fn decodes_in_software(&self) -> bool {
        self.text
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .any(|l| l.split_whitespace().any(|w| w == "decodebin"))
    }

    /// Whether a camera with this URI can use the template.
    pub fn accepts(&self, uri: &SourceUri) -> bool {
        self.source_kind() == uri.default_pipeline()
    }

    /// The template a camera with `uri` may use under `name`, or why not (an unknown name, or a
    /// template for another kind of source).
    pub fn for_camera(name: &str, uri: &SourceUri) -> Result<Template, String> {
        let t = Template::by_name(name).ok_or_else(|| {
            format!(
                "unknown pipeline template `{name}` (expected one of: {})",
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
}
