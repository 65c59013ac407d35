//! edgevlm: an embedded streaming-video runtime that lets a video language model watch live
//! cameras. Modules follow the data flow: config, ingest, ring, prune, engine, memory, generate,
//! narrate, query, publish (MQTT, with the embedded broker in `broker`), supervisor, telemetry
//! (docs/ARCHITECTURE.md, "Modules").

pub mod base;
pub mod broker;
pub mod config;
pub mod engine;
pub mod eval;
pub mod evidence;
pub mod family;
pub mod generate;
pub mod http;
pub mod ingest;
pub mod memory;
pub mod narrate;
pub mod prune;
pub mod publish;
pub mod query;
pub mod ring;
pub mod runtime;
pub mod supervisor;
pub mod telemetry;
pub mod watch;
