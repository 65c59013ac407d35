//! Watch: what runs per camera once the model is loaded. It composes the stages downstream of the
//! window (memory, narrate, publish) for one camera on one thread: every sampled frame is encoded
//! once into the camera's memory and extends its live cache; the narrator decides when to speak;
//! narrations and change events go to the outputs (MQTT and in-process listeners).

mod camera;

pub use camera::{CameraWatch, Outputs, WatchOptions, WatchWorker};
