"""Task sandboxes under ``gym-runtime up``: a server reaches the daemon's task-sandbox API with the
address and token of its environment, its live sandboxes are counted in ``/server_instances``, a
command in one runs, and nothing of them is left after a stop or after a SIGKILL of the daemon.
The fixture server speaks the API directly (stdlib only), as the ``gym_runtime`` provider does."""

from __future__ import annotations

import json
import os
import signal
import time

import httpx
import psutil
import pytest

from sandbox import probe_isolation
from sandbox.taskbox import box_support
from tests.helpers.daemon import FIXTURE_APP, kill_tree, read_ready_line, up_process, write_fixture_package

MAKES_A_SANDBOX = (
    r"""import json, os, urllib.request
def call(method, path, body=None):
    req = urllib.request.Request(os.environ["GYM_RUNTIME_SANDBOX_URL"] + path, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Authorization": "Bearer " + os.environ["GYM_RUNTIME_SANDBOX_TOKEN"],
                                          "Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    return json.loads(opener.open(req, timeout=60).read() or b"null")
box = call("POST", "/v1/sandboxes", {"workdir": "/srv", "env": {"WHO": "acme_exec"}})
out = call("POST", "/v1/sandboxes/%s/exec" % box["sandbox_id"], {"command": "echo $WHO in $(pwd)"})
with open(os.path.join(os.environ["HOME"], "sandbox.json"), "w") as f:
    json.dump({"id": box["sandbox_id"], "exec": out}, f)
"""
    + FIXTURE_APP
)


@pytest.fixture()
def pkg(tmp_path):
    if isinstance(box_support(probe_isolation()), str):
        pytest.skip(box_support(probe_isolation()))
    return write_fixture_package(
        tmp_path / "pkg",
        {"acme_exec": {"resources_servers": {"acme_exec": {"domain": "other"}}}},
        apps={"acme_exec": MAKES_A_SANDBOX},
        name="acme-exec",
    )


def _box_pids(box_id: str) -> list[int]:
    return [
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if any(box_id in part for part in (p.info["cmdline"] or [])) and p.status() != psutil.STATUS_ZOMBIE
    ]


def _started(proc, tmp_path) -> tuple[dict, str]:
    info = json.loads(read_ready_line(proc, timeout=300))
    made = json.loads((tmp_path / "run" / "servers" / "acme_exec" / "sandbox.json").read_text())
    assert made["exec"]["stdout"] == "acme_exec in /srv\n" and made["exec"]["return_code"] == 0, made
    servers = httpx.get(info["head_server"] + "/server_instances", timeout=10, trust_env=False).json()
    assert {s["process_name"]: s.get("sandboxes") for s in servers} == {"acme_exec": 1}
    assert _box_pids(made["id"]), "the sandbox's processes run"
    return info, made["id"]


def _gone(box_id: str, within: float = 10.0) -> list[int]:
    until = time.monotonic() + within
    while (left := _box_pids(box_id)) and time.monotonic() < until:
        time.sleep(0.1)
    return left


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["stop", "sigkill"])
def test_a_servers_sandbox_runs_is_counted_and_ends_with_the_daemon(pkg, tmp_path, sig):
    proc = up_process(pkg, tmp_path, env={"GYM_RUNTIME_HOME": str(tmp_path / "home")})
    try:
        _, box_id = _started(proc, tmp_path)
        os.kill(proc.pid, sig)
        code = proc.wait(60)
        assert code == (0 if sig == signal.SIGTERM else -signal.SIGKILL)
        assert _gone(box_id) == []
        if sig == signal.SIGTERM:
            assert not (tmp_path / "run" / "task-sandboxes" / box_id).exists()
            assert "task sandboxes" in proc.stderr.read()  # a step of the stop report
    finally:
        kill_tree(proc)
