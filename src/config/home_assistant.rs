//! `[home_assistant]`: MQTT discovery, so Home Assistant finds every camera by itself.

use super::check_topic_prefix;
use super::decode::{Fields, Sink};

/// `[home_assistant]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HomeAssistantConfig {
    /// Publish the discovery messages (off by default).
    pub discovery: bool,
    /// Home Assistant's discovery prefix (its MQTT integration's setting).
    pub discovery_prefix: String,
}

impl Default for HomeAssistantConfig {
    fn default() -> Self {
        HomeAssistantConfig {
            discovery: false,
            discovery_prefix: "homeassistant".into(),
        }
    }
}

pub(super) fn decode_home_assistant(
    t: &toml::Table,
    mqtt_enabled: bool,
    sink: &mut Sink,
) -> HomeAssistantConfig {
    let d = HomeAssistantConfig::default();
    let mut f = Fields::new("home_assistant", "home_assistant", t);
    let discovery: bool = f.get("discovery", d.discovery, sink);
    let discovery_prefix: String = f.get("discovery_prefix", d.discovery_prefix, sink);
    if let Err(e) = check_topic_prefix(&discovery_prefix) {
        sink.error(f.path_of("discovery_prefix"), e);
    }
    if discovery && !mqtt_enabled {
        sink.error(
            f.path_of("discovery"),
            "is true but mqtt.enabled is false: discovery is published over MQTT",
        );
    }
    f.finish(sink);
    HomeAssistantConfig {
        discovery,
        discovery_prefix,
    }
}
