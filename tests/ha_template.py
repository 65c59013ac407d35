#!/usr/bin/env python3
"""Renders Home Assistant MQTT templates the way Home Assistant does, for tests/home_assistant.rs:
Jinja2 with `value` (the payload as text), `value_json` (the payload parsed as JSON, when it
parses) and `this` (the entity's state object: `state`, `attributes`). Reads one JSON object per
line on stdin, `{"template": ..., "value": ..., "this": {...}}`, and writes one JSON string per
line: the rendered text (or `{"error": ...}`)."""

import json
import sys

import jinja2

env = jinja2.Environment(undefined=jinja2.Undefined)
for line in sys.stdin:
    req = json.loads(line)
    ctx = {"value": req.get("value", ""), "this": req.get("this", {})}
    try:
        ctx["value_json"] = json.loads(ctx["value"])
    except ValueError:
        pass
    try:
        out = env.from_string(req["template"]).render(**ctx)
        print(json.dumps(out), flush=True)
    except Exception as e:  # noqa: BLE001 - reported to the test as is
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
