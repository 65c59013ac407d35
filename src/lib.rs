//! edgevlm: an embedded streaming-video runtime that lets a video language model watch live
//! cameras. Modules follow the data flow: config, ingest, ring, prune, engine, generate,
//! supervisor, telemetry
//! (DESIGN §2).

pub mod config;
pub mod engine;
pub mod generate;
pub mod ingest;
pub mod prune;
pub mod ring;
pub mod supervisor;
pub mod telemetry;
