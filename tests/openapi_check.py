#!/usr/bin/env python3
"""Checks responses of a running server against docs/openapi.json, for tests/http_api.rs.
Reads JSON lines on stdin: {"path": "/v1/cameras/{camera}", "method": "get", "status": 200,
"body": <the JSON body>}; validates each body against the documented response schema (JSON
Schema 2020-12, as OpenAPI 3.1 uses). Prints how many were checked; exits 1 naming the first that
does not match, or a status the document does not list."""

import json
import sys

import jsonschema

spec = json.load(open(sys.argv[1]))
checked = 0
for line in sys.stdin:
    r = json.loads(line)
    op = spec["paths"].get(r["path"], {}).get(r["method"])
    if op is None:
        sys.exit(f"{r['method']} {r['path']} is not in the document")
    resp = op["responses"].get(str(r["status"]))
    if resp is None:
        sys.exit(f"{r['method']} {r['path']}: status {r['status']} is not documented")
    schema = resp["content"]["application/json"]["schema"]
    root = dict(schema, components=spec["components"])
    try:
        jsonschema.Draft202012Validator(root).validate(r["body"])
    except jsonschema.ValidationError as e:
        sys.exit(f"{r['method']} {r['path']} {r['status']}: {e.message} at {list(e.absolute_path)}")
    checked += 1
print(json.dumps({"checked": checked}))
