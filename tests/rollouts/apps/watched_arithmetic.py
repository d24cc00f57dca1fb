"""Test fixture (environment code a test edits while ``dry-run --watch`` runs): a stdlib resources server.

``GET /`` -> ``{"status": "ok"}``; ``POST /seed_session`` -> ``{}``; ``POST /verify`` -> the request
plus the reward :func:`verify` gives, ``REWARD`` for every answer. A test rewrites the ``REWARD``
line (or breaks the file) and waits for the next table.
"""

import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REWARD = 1.0

name = os.environ["NEMO_GYM_CONFIG_PATH"]
mine, cfg = False, {}
for line in os.environ["NEMO_GYM_CONFIG_DICT"].splitlines():
    if not line.startswith(" "):
        mine = line == name + ":"
    elif mine and line.startswith("      ") and not line.startswith("       ") and ": " in line:
        k, v = line.strip().split(": ", 1)
        cfg[k] = v.strip("'\"")


def verify(body):
    return {**body, "reward": REWARD}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _send(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._send(200, {"status": "ok"})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
        self._send(200, verify(body) if self.path == "/verify" else {})

    def log_message(self, *a):
        pass


ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer((cfg["host"], int(cfg["port"])), Handler).serve_forever()
