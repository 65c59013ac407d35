#!/usr/bin/env python3
"""The web page in headless Chromium, for tests/http_api.rs, through chromedriver's W3C WebDriver
protocol (the Python standard library only). Usage: web_page.py URL SCREENSHOT.PNG

Loads the page, waits for the `door` camera's card and for a narration in the feed, types a
question in the box, clicks Ask and waits for the streamed answer to finish; saves a screenshot.
Prints one JSON object with what it saw; exits 1 with the reason if a step fails."""

import base64
import json
import socket
import subprocess
import sys
import time
import urllib.request

url, shot = sys.argv[1], sys.argv[2]
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


port = free_port()
driver = subprocess.Popen(["chromedriver", f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
base = f"http://127.0.0.1:{port}"


def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())["value"]


def fail(why):
    print(json.dumps({"error": why}))
    sys.exit(1)


try:
    for _ in range(100):
        try:
            call("GET", "/status")
            break
        except OSError:
            time.sleep(0.1)
    caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {
        "binary": "/usr/bin/chromium",
        "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1280,900"]}}}}
    session = call("POST", "/session", caps)["sessionId"]
    s = f"/session/{session}"

    def js(script, *args):
        return call("POST", s + "/execute/sync", {"script": script, "args": list(args)})

    def wait(script, what, bound=60):
        deadline = time.time() + bound
        while time.time() < deadline:
            v = js(script)
            if v:
                return v
            time.sleep(0.2)
        fail("timed out waiting for " + what)

    call("POST", s + "/url", {"url": url})
    state = wait("const c = document.querySelector('.camera[data-camera=door] .state');"
                 "return c && c.textContent.startsWith('running') ? c.textContent : null;", "the door camera running")
    narration = wait("const n = document.querySelector('#feed li.narration .text');"
                     "return n && n.textContent ? n.textContent : null;", "a narration in the feed")
    snapshot = wait("const i = document.querySelector('.camera[data-camera=door] img');"
                    "return i && i.complete && i.naturalWidth > 0 ? [i.naturalWidth, i.naturalHeight] : null;",
                    "the door snapshot")
    box = call("POST", s + "/element", {"using": "css selector", "value": "#question"})[ELEMENT]
    call("POST", s + f"/element/{box}/value", {"text": "What is moving?"})
    button = call("POST", s + "/element", {"using": "css selector", "value": "#ask"})[ELEMENT]
    call("POST", s + f"/element/{button}/click", {})
    answer = wait("const a = document.querySelector('#answer');"
                  "return a.dataset.done === 'true' ? [a.className, a.textContent] : null;", "the streamed answer")
    png = call("GET", s + "/screenshot")
    with open(shot, "wb") as f:
        f.write(base64.b64decode(png))
    model = js("return document.querySelector('#model').textContent;")
    call("DELETE", s)
    print(json.dumps({"state": state, "narration": narration, "snapshot": snapshot,
                      "answer_class": answer[0], "answer": answer[1], "model": model}))
finally:
    driver.kill()
