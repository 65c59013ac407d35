#!/usr/bin/env python3
"""The official `openai` client against edgevlm's OpenAI-compatible endpoint, for
tests/http_api.rs. Usage: openai_client.py BASE_URL CAMERA. Prints one JSON object: the models
listed, a completion, a streamed completion (its chunks' text and the finish reason), and a
follow-up in the same chat."""

import json
import sys

import openai

base, camera = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base + "/v1", api_key="unused-on-loopback", max_retries=0)
out = {"models": [m.id for m in client.models.list()]}

first = client.chat.completions.create(
    model=camera,
    messages=[{"role": "user", "content": "What is moving?"}],
    max_tokens=6,
)
out["completion"] = {
    "content": first.choices[0].message.content,
    "finish_reason": first.choices[0].finish_reason,
    "completion_tokens": first.usage.completion_tokens,
    "object": first.object,
}

stream = client.chat.completions.create(
    model="camera:" + camera + ":5",
    messages=[{"role": "user", "content": "What colour is it?"}],
    max_tokens=6,
    stream=True,
)
text, finish = "", None
for chunk in stream:
    delta = chunk.choices[0].delta
    text += delta.content or ""
    finish = chunk.choices[0].finish_reason or finish
out["stream"] = {"content": text, "finish_reason": finish}

follow = client.chat.completions.create(
    model=camera,
    messages=[
        {"role": "user", "content": "What is moving?"},
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "And now?"},
    ],
    max_tokens=6,
)
out["follow_up"] = {"content": follow.choices[0].message.content}
out["conversations"] = [first.to_dict()["edgevlm"], follow.to_dict()["edgevlm"]]

try:
    client.chat.completions.create(
        model="nope", messages=[{"role": "user", "content": "x"}], max_tokens=2
    )
    out["unknown_camera"] = None
except openai.APIStatusError as e:
    out["unknown_camera"] = {"status": e.status_code, "code": e.body.get("code") if isinstance(e.body, dict) else None}

print(json.dumps(out))
