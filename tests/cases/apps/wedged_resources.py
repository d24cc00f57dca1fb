"""Test fixture (case C46): a stdlib Gym-shaped resources server that wedges in ``/verify``.

One thread serves everything (``HTTPServer``, not threading), and ``/verify`` runs
``time.sleep(10_000)`` on it, as a CPU-bound or deadlocked handler would block an event loop: its
port stays open, and from then on ``GET /`` gets no answer either. ``/seed_session`` answers ``{}``.
A start after the first (the restart of the wedged server) waits 10 s before it listens, so a test
sees the restart under way whatever the machine's speed (a marker file in ``$HOME`` tells them apart).
"""

import json
import os
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

name = os.environ["NEMO_GYM_CONFIG_PATH"]
mine, cfg = False, {}
for line in os.environ["NEMO_GYM_CONFIG_DICT"].splitlines():
    if not line.startswith(" "):
        mine = line == name + ":"
    elif mine and line.startswith("      ") and not line.startswith("       ") and ": " in line:
        k, v = line.strip().split(": ", 1)
        cfg[k] = v.strip("'\"")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _send(self, obj):
        body = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._send({"status": "ok"})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.path == "/verify":
            time.sleep(10_000)
        self._send({})

    def log_message(self, *a):
        pass


started_before = os.path.join(os.environ["HOME"], "wedged_resources.started")
if os.path.exists(started_before):
    time.sleep(10)
open(started_before, "w").close()
print("wedged_resources", name, "listening on", cfg["host"], cfg["port"], flush=True)
HTTPServer((cfg["host"], int(cfg["port"])), Handler).serve_forever()
