"""``gym-runtime status``: the server lines stay in columns whatever the names' lengths (a Gym 0.7
environment server's name, ``code_lookup_environment_server``, is longer than the old 24-wide column)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SERVERS = [
    {
        "process_name": "code_lookup_environment_server",
        "server_type": "environment_servers",
        "name": "legacy_agent",
        "state": "ready",
        "url": "http://127.0.0.1:40001",
        "pid": 101,
    },
    {
        "process_name": "arithmetic",
        "server_type": "resources_servers",
        "name": "example_arithmetic",
        "state": "ready",
        "url": "http://127.0.0.1:40002",
        "pid": 102,
    },
]
BODIES = {
    "/health": {"status": "ok"},
    "/server_instances": SERVERS,
    "/support_processes": [{"name": "stub_model", "kind": "model", "state": "ready", "pid": 103}],
}


class _Head(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        body = BODIES.get(self.path)
        data = json.dumps(body).encode()
        self.send_response(200 if body is not None else 404)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass


def test_server_lines_align_with_long_names() -> None:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Head)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "gym_runtime.cli.main",
                "status",
                "--head",
                f"http://127.0.0.1:{srv.server_address[1]}",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        srv.shutdown()
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("  ") and " pid " in ln]
    assert len(lines) == 3, r.stdout
    assert len({ln.index(" ready ") for ln in lines}) == 1, r.stdout  # the state column starts at one place
    assert len({ln.index(" pid ") for ln in lines}) == 1, r.stdout
