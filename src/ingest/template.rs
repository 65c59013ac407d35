//! Pipeline templates as this machine's GStreamer sees them: which of a template's elements are
//! not installed, and what provides them.
//!
//! The templates themselves (the built-in catalogue, `pipeline_file`, the text checks and the
//! contract) are plain text and live in `crate::config` (`src/config/pipeline.rs`).

pub use crate::config::{ElementSpec, REQUIRED_NAMES, Template};
pub(crate) use crate::config::{elements_of, split_links};

use crate::config::Config;

/// An element a template names that this machine's GStreamer cannot make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingElement {
    /// The factory name (`nvh264dec`).
    pub factory: String,
    /// What provides it (`provided by gstreamer1.0-libav`), or that nothing installed does.
    pub hint: String,
    /// The template line it is written on (1-based).
    pub line: usize,
}

impl Template {
    /// The elements of the line the running GStreamer builds (`compat::launch_line`: stand-ins for
    /// elements newer than it) that are not installed, each once, in order. Initialises GStreamer.
    pub fn missing_elements(&self) -> Result<Vec<MissingElement>, super::IngestError> {
        super::init()?;
        let mut out: Vec<MissingElement> = Vec::new();
        for (line, segment) in self.segments() {
            for e in elements_of(&super::compat::launch_line(&segment)) {
                if gst::ElementFactory::find(&e.factory).is_none()
                    && !out.iter().any(|m| m.factory == e.factory)
                {
                    out.push(MissingElement {
                        hint: missing_element_hint(&e.factory),
                        factory: e.factory,
                        line,
                    });
                }
            }
        }
        Ok(out)
    }
}

/// Every enabled camera whose template (built in or its own file) names elements this machine
/// does not have: the configuration path (`cameras[i].pipeline` or `cameras[i].pipeline_file`)
/// and the reason (the template, the element, what provides it), one per element. What
/// `edgevlm validate` adds to the configuration's own problems; the cameras are those of a
/// configuration that loaded, so `i` is the index in the file.
pub fn missing_elements(config: &Config) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (i, cam) in config.cameras.iter().enumerate() {
        if !cam.enabled {
            continue;
        }
        let key = if cam.pipeline_file.is_some() {
            format!("cameras[{i}].pipeline_file")
        } else {
            format!("cameras[{i}].pipeline")
        };
        let template = match cam.template() {
            Ok(t) => t,
            Err(why) => {
                out.push((key, why));
                continue;
            }
        };
        let missing = match template.missing_elements() {
            Ok(m) => m,
            Err(e) => {
                // Without GStreamer nothing can be checked; one line says why, not one per camera.
                out.push((String::new(), e.to_string()));
                return out;
            }
        };
        if missing.is_empty() {
            continue;
        }
        match &template.file {
            // A user's file: each element with its line.
            Some(file) => out.extend(missing.iter().map(|m| {
                let at = format!("{}:{}", file.display(), m.line);
                let why = format!("element `{}` is not installed on this machine", m.factory);
                (key.clone(), format!("{at}: {why}; {}", m.hint))
            })),
            // A built-in template: one line per camera.
            None => out.push((key.clone(), built_in_reason(&template.name, &missing))),
        }
    }
    out
}

/// `template `NAME` needs the GStreamer element(s) …, which is (are) not installed …; provided by …`.
fn built_in_reason(name: &str, missing: &[MissingElement]) -> String {
    let quoted = |ms: &[&MissingElement]| {
        let names: Vec<String> = ms.iter().map(|m| format!("`{}`", m.factory)).collect();
        match names.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
            _ => names.concat(),
        }
    };
    let all: Vec<&MissingElement> = missing.iter().collect();
    let (what, verb) = if all.len() == 1 {
        ("element", "is")
    } else {
        ("elements", "are")
    };
    let mut hints: Vec<&str> = Vec::new();
    for m in missing {
        if !hints.contains(&m.hint.as_str()) {
            hints.push(&m.hint);
        }
    }
    let provided = if hints.len() == 1 {
        hints[0].to_string()
    } else {
        hints
            .iter()
            .map(|h| {
                let of: Vec<&MissingElement> =
                    all.iter().copied().filter(|m| m.hint == *h).collect();
                format!("{}: {h}", quoted(&of))
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    format!(
        "template `{name}` needs the GStreamer {what} {}, which {verb} not installed on this \
         machine; {provided}",
        quoted(&all)
    )
}

/// What provides a missing element (or what to choose instead), or that nothing installed does.
pub(crate) fn missing_element_hint(factory: &str) -> String {
    let hint = match factory {
        "nvh264dec" | "nvh265dec" | "cudaconvertscale" | "cudadownload" | "cudaupload" => {
            "provided by an NVIDIA GPU driver and gstreamer1.0-plugins-bad built with nvcodec \
             (cudaconvertscale: 1.22 or newer); use pipeline = \"rtsp\" for software decoding"
        }
        "nvv4l2decoder" | "nvvidconv" | "nvjpegdec" => {
            "provided by NVIDIA JetPack on Jetson devices; use pipeline = \"rtsp\" or \"v4l2\" \
             elsewhere"
        }
        "avdec_h264" | "avdec_h265" | "avdec_mjpeg" => "provided by gstreamer1.0-libav",
        "rtspsrc" | "rtph264depay" | "rtph265depay" | "rtpjpegdepay" | "v4l2src" | "jpegdec" => {
            "provided by gstreamer1.0-plugins-good"
        }
        "h264parse" | "h265parse" | "jpegparse" | "libde265dec" => {
            "provided by gstreamer1.0-plugins-bad"
        }
        "decodebin" | "videoconvert" | "videoscale" | "videorate" | "videotestsrc" | "appsink"
        | "videoconvertscale" => "provided by gstreamer1.0-plugins-base",
        _ => {
            "no installed GStreamer plugin has an element of that name (is it right? \
              `gst-inspect-1.0 NAME` lists what an installed one has)"
        }
    };
    hint.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::path::Path;

    #[test]
    fn software_templates_have_every_element_here_and_hardware_ones_name_theirs() {
        for t in Template::all() {
            let missing = t.missing_elements().unwrap();
            if t.decodes_in_software() || t.name == "test" {
                assert_eq!(missing, [], "{}", t.name);
            }
        }
        // No NVIDIA GPU or Jetson on the build machines: the hardware decoder is the first missing.
        if gst::ElementFactory::find("nvh265dec").is_none() {
            let m = Template::by_name("rtsp-nvdec-h265")
                .unwrap()
                .missing_elements()
                .unwrap();
            assert_eq!(m[0].factory, "nvh265dec");
            assert!(m[0].hint.contains("nvcodec"), "{m:?}");
        }
        if gst::ElementFactory::find("nvv4l2decoder").is_none() {
            let m = Template::by_name("v4l2-jetson-mjpeg")
                .unwrap()
                .missing_elements()
                .unwrap();
            assert_eq!(m[0].factory, "nvv4l2decoder");
            assert!(m[0].hint.starts_with("provided by NVIDIA JetPack"), "{m:?}");
        }
    }

    #[test]
    fn a_built_in_reason_names_every_element_once_and_each_provider() {
        let m = |factory: &str| MissingElement {
            factory: factory.into(),
            hint: missing_element_hint(factory),
            line: 1,
        };
        assert_eq!(
            built_in_reason("x", &[m("nvh264dec")]),
            "template `x` needs the GStreamer element `nvh264dec`, which is not installed on this \
             machine; provided by an NVIDIA GPU driver and gstreamer1.0-plugins-bad built with \
             nvcodec (cudaconvertscale: 1.22 or newer); use pipeline = \"rtsp\" for software \
             decoding"
        );
        assert_eq!(
            built_in_reason("y", &[m("nvv4l2decoder"), m("jpegparse"), m("nvvidconv")]),
            "template `y` needs the GStreamer elements `nvv4l2decoder`, `jpegparse` and \
             `nvvidconv`, which are not installed on this machine; `nvv4l2decoder` and \
             `nvvidconv`: provided by NVIDIA JetPack on Jetson devices; use pipeline = \"rtsp\" \
             or \"v4l2\" elsewhere; `jpegparse`: provided by gstreamer1.0-plugins-bad"
        );
    }

    #[test]
    fn an_unknown_element_of_a_user_template_is_named_with_its_line() {
        let t = Template::from_text(
            Path::new("/x/mine.pipeline"),
            "# source: test\n# delivers: video/x-raw,format=RGB\n\
             videotestsrc name=src\n! videorate name=rate\n! nosuchconvert name=scale\n\
             ! capsfilter name=caps ! appsink name=sink\n"
                .into(),
        );
        assert_eq!(t.problems(), []);
        let m = t.missing_elements().unwrap();
        assert_eq!(m.len(), 1, "{m:?}");
        assert_eq!((m[0].factory.as_str(), m[0].line), ("nosuchconvert", 5));
        assert!(
            m[0].hint.starts_with("no installed GStreamer plugin"),
            "{m:?}"
        );
    }

    #[test]
    fn the_config_check_names_the_camera_key_and_skips_disabled_cameras() {
        let c = Config::parse(
            "[[cameras]]\nid = \"a\"\nuri = \"rtsp://cam/a\"\npipeline = \"rtsp-jetson-h265\"\n\
             [[cameras]]\nid = \"b\"\nuri = \"rtsp://cam/b\"\npipeline = \"rtsp-nvdec\"\n\
             enabled = false\n\
             [[cameras]]\nid = \"c\"\nuri = \"test://ball\"\n",
            None,
        )
        .unwrap();
        let problems = missing_elements(&c);
        if gst::ElementFactory::find("nvv4l2decoder").is_none() {
            assert_eq!(
                problems,
                [(
                    "cameras[0].pipeline".to_string(),
                    "template `rtsp-jetson-h265` needs the GStreamer elements `nvv4l2decoder` \
                     and `nvvidconv`, which are not installed on this machine; provided by \
                     NVIDIA JetPack on Jetson devices; use pipeline = \"rtsp\" or \"v4l2\" \
                     elsewhere"
                        .to_string()
                )]
            );
        }
        assert!(
            problems.iter().all(|(k, _)| k == "cameras[0].pipeline"),
            "{problems:#?}"
        );
    }
}
