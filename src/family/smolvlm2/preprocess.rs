//! SmolVLM2's frame resize: the longest edge to `video_size`, then to the `max_image_size` square,
//! both with antialiased Lanczos, byte-identical to its video processor. Ingest runs it for every
//! camera of a model of square images, so it lives there (`ingest::square`, below the families in
//! the module graph); this is its name for the family.

pub use crate::ingest::square::{FrameResize, first_step};
