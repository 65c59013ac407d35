//! What the running GStreamer may lack, and what stands in for it.
//!
//! edgevlm's floor is GStreamer 1.20 and GLib 2.72 (JetPack 6 is Ubuntu 22.04), proven on Debian
//! 11's 1.18 / 2.66 by `scripts/debian11.sh` (docs/ARCHITECTURE.md, "Platform floors"). Newer
//! features are used when the library loaded at run time has them: this is checked against the
//! running registry, never compiled out, so one binary serves both.
//!
//! - `videoconvertscale` (GStreamer 1.22) converts and scales in one pass. Where it is missing,
//!   each one in a launch line becomes `videoconvert ! videoscale`: the element's name goes to
//!   `videoconvert` (its sink pad sees the source caps, as the template contract needs of
//!   `scale`), and each property goes to whichever of the two has it (both, if both do).

use std::sync::OnceLock;

use gst::prelude::*;

use super::template::split_links;

/// The element GStreamer 1.22 added that our templates use.
const CONVERT_SCALE: &str = "videoconvertscale";

/// `launch` as the running GStreamer can build it: unchanged where it has every element used,
/// with stand-ins for the newer elements it lacks.
pub fn launch_line(launch: &str) -> String {
    if has_convert_scale() {
        launch.to_string()
    } else {
        split_convert_scale(launch, &|factory, property| {
            properties_of(factory).iter().any(|p| p == property)
        })
    }
}

/// Whether the running GStreamer has `videoconvertscale` (looked up once per process).
pub fn has_convert_scale() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| gst::ElementFactory::find(CONVERT_SCALE).is_some())
}

/// One line for the log at start: the running GStreamer and the stand-ins it needs.
pub fn summary() -> String {
    let version = gst::version_string();
    if has_convert_scale() {
        version.to_string()
    } else {
        format!("{version}; {CONVERT_SCALE} (1.22) missing: videoconvert ! videoscale instead")
    }
}

/// The writable property names of `factory`'s elements (empty if it cannot be made).
fn properties_of(factory: &str) -> &'static [String] {
    static CONVERT: OnceLock<Vec<String>> = OnceLock::new();
    static SCALE: OnceLock<Vec<String>> = OnceLock::new();
    let cell = match factory {
        "videoconvert" => &CONVERT,
        "videoscale" => &SCALE,
        _ => return &[],
    };
    cell.get_or_init(|| {
        gst::ElementFactory::make(factory)
            .build()
            .map(|e| {
                e.list_properties()
                    .iter()
                    .map(|p| p.name().to_string())
                    .collect()
            })
            .unwrap_or_default()
    })
}

/// Replaces every `videoconvertscale` segment of `launch` by `videoconvert ! videoscale`;
/// `has(factory, property)` says which element takes a property.
fn split_convert_scale(launch: &str, has: &dyn Fn(&str, &str) -> bool) -> String {
    split_links(launch)
        .iter()
        .map(|segment| {
            let mut words = segment.split_whitespace();
            if words.next() != Some(CONVERT_SCALE) {
                return segment.clone();
            }
            let (mut convert, mut scale) = (vec!["videoconvert"], vec!["videoscale"]);
            for word in words {
                let key = word.split('=').next().unwrap_or(word);
                let (on_convert, on_scale) = if key == "name" {
                    (true, false)
                } else {
                    let (c, s) = (has("videoconvert", key), has("videoscale", key));
                    // A property neither has stays on videoscale, whose parse error names it.
                    (c, s || !c)
                };
                if on_convert {
                    convert.push(word);
                }
                if on_scale {
                    scale.push(word);
                }
            }
            format!("{} ! {}", convert.join(" "), scale.join(" "))
        })
        .collect::<Vec<_>>()
        .join(" ! ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Properties of videoconvert and videoscale in GStreamer 1.18 (the ones these tests use).
    fn gst_1_18(factory: &str, property: &str) -> bool {
        match factory {
            "videoconvert" => ["dither", "n-threads", "matrix-mode"].contains(&property),
            "videoscale" => ["method", "add-borders", "dither", "n-threads"].contains(&property),
            _ => false,
        }
    }

    #[test]
    fn convert_scale_becomes_convert_then_scale_with_the_name_on_convert() {
        let launch = "filesrc name=src ! decodebin ! videorate name=rate drop-only=true \
                      ! videoconvertscale name=scale add-borders=false ! capsfilter name=caps \
                      ! appsink name=sink";
        assert_eq!(
            split_convert_scale(launch, &gst_1_18),
            "filesrc name=src ! decodebin ! videorate name=rate drop-only=true ! videoconvert \
             name=scale ! videoscale add-borders=false ! capsfilter name=caps ! appsink name=sink"
        );
    }

    #[test]
    fn properties_go_to_the_element_that_has_them() {
        let out = split_convert_scale(
            "videoconvertscale name=s matrix-mode=none n-threads=2 method=lanczos bogus=1",
            &gst_1_18,
        );
        assert_eq!(
            out,
            "videoconvert name=s matrix-mode=none n-threads=2 ! videoscale n-threads=2 \
             method=lanczos bogus=1"
        );
    }

    #[test]
    fn lines_without_convert_scale_are_unchanged() {
        let launch =
            "videotestsrc name=src ! videoconvert ! videoscale name=scale ! appsink name=sink";
        assert_eq!(split_convert_scale(launch, &gst_1_18), launch);
    }

    #[test]
    fn the_running_gstreamer_builds_every_template() {
        super::super::init().unwrap();
        for t in super::super::Template::all() {
            if !t.decodes_in_software() && t.name != "test" {
                continue; // hardware templates need hardware elements
            }
            // As run here, and with the stand-in forced (what GStreamer < 1.22 runs).
            let split = split_convert_scale(&t.launch(), &|factory, property| {
                properties_of(factory).iter().any(|p| p == property)
            });
            for launch in [launch_line(&t.launch()), split] {
                let pipeline =
                    gst::parse::launch(&launch).unwrap_or_else(|e| panic!("{launch}: {e}"));
                let bin = pipeline.downcast::<gst::Bin>().unwrap();
                assert!(bin.by_name("scale").is_some(), "{launch}");
            }
        }
    }
}
