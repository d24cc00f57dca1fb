"""Test fixture (case C39): a stdlib Gym-shaped resources server whose ``/verify`` masks samples, as
NeMo Gym 0.7.0's ``judge_failsafe`` does when its judge fails.

Each row carries ``plan``: a list of ``"mask"`` or rewards; the n-th ``/verify`` of a row (by its
``task_idx``) answers ``plan[n % len(plan)]``: a reward, or ``{"reward": 0.0, "mask_sample": true,
"failure_kind": "judge_failed", "failure_reason": "judge 503"}``. ``GET /`` -> ``{"status": "ok"}``.
"""
import json
import os
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
seen = Counter()
MASKED = {"reward": 0.0, "mask_sample": True, "failure_kind": "judge_failed", "failure_reason": "judge 503"}


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
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
        if self.path != "/verify":
            return self._send({})
        plan = body.get("plan") or [1.0]
        step = plan[seen[body.get("task_idx")] % len(plan)]
        seen[body.get("task_idx")] += 1
        self._send({**body, **(MASKED if step == "mask" else {"reward": float(step)})})

    def log_message(self, *a):
        pass


print("masked_resources", name, "listening on", cfg["host"], cfg["port"], flush=True)
ThreadingHTTPServer((cfg["host"], int(cfg["port"])), Handler).serve_forever()
