"""The daemon never imports FastAPI: its head server and task-sandbox API are Starlette apps, and the
stub model, a FastAPI app, is a process of its own (docs/architecture.md §7.3). A ``sitecustomize``
on the daemon's path writes, as the daemon exits, which of its modules came from FastAPI or
Starlette; the head server answers its routes, its errors and its docs before that, and the
task-sandbox API serves from the servers' spawn on."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import httpx
import psutil

from tests.helpers.daemon import kill_tree, read_ready_line, up_process, write_fixture_package

RECORD = """import atexit, json, os, sys
def _record():
    if "gym_runtime.head.app" in sys.modules:  # the daemon: it served the head server
        web = sorted(m for m in sys.modules if m.split(".")[0] in ("fastapi", "starlette") or m == "gym_runtime.task_sandboxes.api")
        with open(os.environ["WEB_MODULES_RECORD"], "a") as f:
            f.write(json.dumps({"pid": os.getpid(), "web": web}) + "\\n")
atexit.register(_record)
"""


def test_the_daemon_serves_its_head_server_and_task_sandbox_api_without_fastapi(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(RECORD)
    record = tmp_path / "web-modules.jsonl"
    pkg = write_fixture_package(
        tmp_path / "pkg",
        {
            "policy_model": {
                "responses_api_models": {
                    "acme_model": {"base_url": "${policy_base_url}", "model": "${policy_model_name}"}
                }
            },
            "acme_math": {"resources_servers": {"acme_math": {"domain": "math"}}},
        },
    )  # no --policy-base-url: the built-in stub model stands in for the policy
    env = {
        "PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p),
        "WEB_MODULES_RECORD": str(record),
    }
    proc = up_process(pkg, tmp_path, env=env)
    try:
        head = json.loads(read_ready_line(proc))["head_server"]
        with httpx.Client(base_url=head, trust_env=False, timeout=30) as c:
            (stub,) = c.get("/support_processes").json()
            assert stub["name"] == "stub_model" and stub["pid"] != proc.pid
            assert "gym_runtime.stub_model" in psutil.Process(stub["pid"]).cmdline()  # its own interpreter
            assert c.get("/nope").json()["error"]["code"] == "GR-HEAD-NOT-FOUND"
            bad = c.post("/rollouts/run", content=b"\x80", headers={"content-type": "application/json"})
            assert bad.status_code == 400 and bad.json()["error"]["code"] == "GR-ROLLOUT-BAD-REQUEST"
            assert c.get("/servers/acme_math/logs", params={"tail": "x"}).status_code == 422
            assert "/rollouts/run" in c.get("/openapi.json").json()["paths"]
            assert c.get("/docs").status_code == 200
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(60) == 0, proc.stderr.read()[-3000:] if proc.stderr else ""
    finally:
        kill_tree(proc)
    (daemon,) = [r for r in map(json.loads, record.read_text().splitlines()) if r["pid"] == proc.pid]
    assert {"starlette.applications", "gym_runtime.task_sandboxes.api"} <= set(daemon["web"])  # both apps ran
    assert not [m for m in daemon["web"] if m.split(".")[0] == "fastapi"]
