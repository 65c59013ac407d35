//! Home Assistant MQTT discovery (docs/HOME_ASSISTANT.md): for each camera, a device with seven
//! entities, each announced by a retained config message on
//! `<discovery prefix>/<component>/<node id>/<camera>_<entity>/config`, whose payload names the
//! runtime's own topics. Nothing here is published by itself: the publisher sends these as
//! retained state (again after every reconnection), and clears them when a camera goes.

use super::topics::Topics;
use serde_json::{Value, json};

/// The id an answer asked from Home Assistant's Ask box carries: its replies land on
/// `<prefix>/<camera>/answer/ha`, which the Answer sensor reads.
pub const HA_QUESTION_ID: &str = "ha";

/// Characters Home Assistant accepts in a node id and an object id: others become `_`.
pub fn ha_id(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The discovery messages of one camera: (config topic, payload).
pub fn camera_configs(
    discovery_prefix: &str,
    node: &str,
    topics: &Topics,
    camera: &str,
) -> Vec<(String, Value)> {
    let node = ha_id(node);
    let object = |entity: &str| format!("{}_{entity}", ha_id(camera));
    let device = json!({
        "identifiers": [format!("edgevlm_{node}_{}", ha_id(camera))],
        "name": camera,
        "manufacturer": "edgevlm",
        "model": "edgevlm camera",
        "sw_version": env!("CARGO_PKG_VERSION"),
    });
    let entity = |component: &str, entity: &str, name: &str, mut body: Value| {
        let o = object(entity);
        let extra = json!({
            "name": name,
            "unique_id": format!("edgevlm_{node}_{o}"),
            "device": device.clone(),
            "availability_topic": topics.available(),
        });
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                b.insert(k.clone(), v.clone());
            }
        }
        (
            format!("{discovery_prefix}/{component}/{node}/{o}/config"),
            body,
        )
    };
    let narration = topics.narration(camera);
    let answer = topics.answer(camera, HA_QUESTION_ID);
    vec![
        entity(
            "binary_sensor",
            "activity",
            "Activity",
            json!({
                "state_topic": topics.activity(camera),
                "payload_on": "ON",
                "payload_off": "OFF",
                "device_class": "motion",
            }),
        ),
        entity(
            "sensor",
            "narration",
            "Narration",
            json!({
                "state_topic": narration,
                // A sensor's state is at most 255 characters; the whole text is an attribute.
                "value_template": "{{ value_json.text[:255] }}",
                "json_attributes_topic": narration,
                "json_attributes_template":
                    "{{ {'text': value_json.text, 'trigger': value_json.trigger, \
                     'event': value_json.event, 'watch': value_json.watch, \
                     'stream_end_secs': value_json.stream_end_secs} | tojson }}",
                "icon": "mdi:text-box-outline",
            }),
        ),
        entity(
            "image",
            "snapshot",
            "Snapshot",
            json!({
                "image_topic": topics.snapshot(camera),
                "content_type": "image/jpeg",
            }),
        ),
        entity(
            "event",
            "event",
            "Event",
            json!({
                "state_topic": topics.events(camera),
                "event_types": ["new", "update", "end"],
                "value_template":
                    "{{ {'event_type': value_json.type, 'id': value_json.id, \
                     'narration': value_json.narration, 'activity': value_json.activity} \
                     | tojson }}",
            }),
        ),
        entity(
            "text",
            "ask",
            "Ask",
            json!({
                "command_topic": topics.query(camera),
                "command_template":
                    format!("{{\"id\": \"{HA_QUESTION_ID}\", \"question\": {{{{ value | tojson }}}}}}"),
                "min": 1,
                "max": 255,
                "mode": "text",
                "icon": "mdi:comment-question-outline",
            }),
        ),
        entity(
            "sensor",
            "answer",
            "Answer",
            json!({
                "state_topic": answer,
                // Chunks keep the state; the final answer (or the error) replaces it.
                "value_template":
                    "{% if value_json.text is defined %}{{ value_json.text[:255] }}\
                     {% elif value_json.error is defined %}{{ value_json.error.message[:255] }}\
                     {% else %}{{ this.state }}{% endif %}",
                "icon": "mdi:comment-text-outline",
            }),
        ),
        entity(
            "sensor",
            "state",
            "State",
            json!({
                "state_topic": topics.status(camera),
                "value_template": "{{ value_json.state }}",
                "json_attributes_topic": topics.status(camera),
                "json_attributes_template":
                    "{{ {'reason': value_json.reason, 'geometry': value_json.geometry, \
                     'instance': value_json.instance} | tojson }}",
                "icon": "mdi:cctv",
            }),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_camera_is_one_device_of_seven_entities_with_unique_ids() {
        let topics = Topics::new("edgevlm");
        let c = camera_configs("homeassistant", "edgevlm-vm.lan", &topics, "door");
        assert_eq!(c.len(), 7);
        let ids: std::collections::BTreeSet<String> = c
            .iter()
            .map(|(_, v)| v["unique_id"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(ids.len(), 7);
        for (topic, v) in &c {
            assert!(
                topic.starts_with("homeassistant/") && topic.ends_with("/config"),
                "{topic}"
            );
            // The node id keeps only what Home Assistant accepts.
            assert!(topic.contains("/edgevlm-vm_lan/door_"), "{topic}");
            assert_eq!(v["device"]["identifiers"][0], "edgevlm_edgevlm-vm_lan_door");
            assert_eq!(v["availability_topic"], "edgevlm/available");
        }
        let ask = &c.iter().find(|(t, _)| t.contains("/text/")).unwrap().1;
        assert_eq!(ask["command_topic"], "edgevlm/door/query");
        assert_eq!(
            ask["command_template"],
            "{\"id\": \"ha\", \"question\": {{ value | tojson }}}"
        );
    }
}
