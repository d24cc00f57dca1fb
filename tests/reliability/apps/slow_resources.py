"""Test fixture (environment code a test controls): a stdlib Gym-shaped resources server.

``GET /`` -> ``{"status": "ok"}``; ``POST /seed_session`` sleeps the instance config's
``seed_sleep`` seconds, then answers ``{}``; ``POST /verify`` sleeps ``verify_sleep`` seconds (so
rows are held here while a test breaks things), then answers the request plus ``reward: 1.0``;
``GET /stats`` -> how many ``/seed_session`` and ``/verify`` calls arrived. Its own config keys are read from
``NEMO_GYM_CONFIG_DICT`` with a tiny line parser (the venv has no PyYAML).
"""

import json
import os
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

name = os.environ["NEMO_GYM_CONFIG_PATH"]
mine, cfg = False, {}
for line in os.environ["NEMO_GYM_CONFIG_DICT"].splitlines():
    if not line.startswith(" "):
        mine = line == name + ":"
    elif mine and line.startswith("      ") and not line.startswith("       ") and ": " in line:
        k, v = line.strip().split(": ", 1)
        cfg[k] = v.strip("'\"")


calls = Counter()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _send(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._send(200, dict(calls) if self.path == "/stats" else {"status": "ok"})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
        calls[self.path] += 1
        if self.path == "/verify":
            time.sleep(float(cfg.get("verify_sleep", 0)))
            return self._send(200, {**body, "reward": 1.0})
        if self.path == "/seed_session":
            time.sleep(float(cfg.get("seed_sleep", 0)))
        self._send(200, {})

    def log_message(self, *a):
        pass


ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer.request_queue_size = 512
print("slow_resources", name, "listening on", cfg["host"], cfg["port"], flush=True)
ThreadingHTTPServer((cfg["host"], int(cfg["port"])), Handler).serve_forever()
