//! Ingest: cameras attached through GStreamer, decoded, scaled to the model geometry and sampled.
//!
//! Each camera runs a pipeline built from its template (one of `pipelines/`, compiled in, or its
//! own `pipeline_file`); a [`Session`] is one run of it. Frames leave as packed RGB at the camera's
//! [`Geometry`] through the ring's hand-off.

mod compat;
mod geometry;
mod keyframes;
mod session;
pub mod square;
mod template;

pub use compat::{launch_line, summary as gstreamer_summary};
pub use geometry::{Geometry, TOKEN_PX, camera_geometry, processor_geometry, reference_geometry};
pub use session::{CameraShared, IngestError, Session, SessionEvent, init};
pub use template::{ElementSpec, MissingElement, REQUIRED_NAMES, Template, missing_elements};
mod probe;
/// The reference resize (torch's antialiased bicubic, bit-exact), in its own crate so debug
/// builds optimise it (crates/resize).
pub use edgevlm_resize::{Kernel, ResizeError, Resizer};
pub use probe::{ProbeSummary, probe};
