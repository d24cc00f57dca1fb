"""``GET /server_instances`` answers with NeMo Gym's keys and meanings (``process_name`` = instance,
``name`` = implementation, ``status`` left to the client) as well as ours (``state``...); the stub
model and a Ray head are not server instances and are listed by ``GET /support_processes``. Every
consumer reads the new shape: ``gym-runtime status`` and ``gym-runtime logs``. (Gym's own
``ng_status`` against a running daemon: tests/daemon/test_gym_clients.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from gym_runtime.settings import load_settings
from tests.helpers.daemon import kill_tree, read_ready_line, up_process, write_fixture_package

GYM_KEYS = {
    "process_name",
    "server_type",
    "name",
    "dir_path",
    "entrypoint",
    "host",
    "port",
    "url",
    "pid",
    "config_path",
    "start_time",
    "status",
    "uptime_seconds",
}
OURS = {"implementation", "state", "restarts", "ready_after_s", "last_exit", "error", "wedged", "log_file", "sandboxes"}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory):
    """A policy_model (the built-in stub model stands in: no --policy-base-url), a resources server."""
    tmp = tmp_path_factory.mktemp("instances")
    pkg = write_fixture_package(
        tmp / "pkg",
        {
            "policy_model": {
                "responses_api_models": {
                    "acme_model": {"base_url": "${policy_base_url}", "model": "${policy_model_name}"}
                }
            },
            "acme_math": {"resources_servers": {"acme_math": {"domain": "math"}}},
        },
    )
    proc = up_process(pkg, tmp)
    try:
        yield json.loads(read_ready_line(proc))["head_server"], tmp
    finally:
        kill_tree(proc)


def test_the_module_daemon_records_itself_outside_the_users_state_root(daemon) -> None:
    """Started by a module-scoped fixture, before any test's own GYM_RUNTIME_HOME is set, the daemon
    still runs on the suite's state root, never the user's default one (tests/conftest.py; bug: it
    left a stale ``~/.cache/gym-runtime/daemon.json``)."""
    _head, tmp = daemon
    pid = json.loads((tmp / "run/daemon.json").read_text())["pid"]
    root, users = load_settings(psutil.Process(pid).environ()).home, load_settings({}).home
    assert root != users and not root.is_relative_to(users)
    assert json.loads((root / "daemon.json").read_text())["pid"] == pid
    if (users / "daemon.json").exists():
        assert json.loads((users / "daemon.json").read_text()).get("pid") != pid


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gym_runtime.cli.main", *args], capture_output=True, text=True, timeout=60
    )


def test_server_instances_have_gyms_keys_and_meanings(daemon) -> None:
    head, tmp = daemon
    rows = {r["process_name"]: r for r in httpx.get(head + "/server_instances", trust_env=False).json()}
    assert sorted(rows) == ["acme_math", "policy_model"]  # the stub model is not a server instance
    math = rows["acme_math"]
    assert set(math) == GYM_KEYS | OURS
    assert (math["server_type"], math["name"], math["implementation"]) == (
        "resources_servers",
        "acme_math",
        "acme_math",
    )
    assert math["config_path"] == "acme_math" and math["entrypoint"] == "app.py"
    assert Path(math["dir_path"]) == tmp / "pkg/resources_servers/acme_math"
    assert math["url"] == f"http://{math['host']}:{math['port']}" and isinstance(math["pid"], int)
    assert math["status"] is None and math["state"] == "ready"
    assert time.time() - 600 < math["start_time"] <= time.time() and math["uptime_seconds"] >= 0
    assert httpx.get(math["url"], trust_env=False).status_code == 200


def test_support_processes_list_the_stub_model(daemon) -> None:
    head, _ = daemon
    [stub] = httpx.get(head + "/support_processes", trust_env=False).json()
    assert (stub["name"], stub["kind"], stub["state"]) == ("stub_model", "model", "ready")
    key = {"Authorization": "Bearer stub-key"}  # the stub requires the job's key (no key given: up's stub-key)
    assert httpx.get(stub["url"] + "/v1/models", headers=key, trust_env=False).json()["data"][0]["id"] == "stub-model"


def test_status_and_logs_read_the_new_shape(daemon) -> None:
    head, _ = daemon
    r = cli("status", "--head", head)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"head server {head}: ok"  # /health's status: Gym 0.7's `ok` (the default line)
    math = next(line for line in lines if line.split()[0] == "acme_math").split()
    assert math[1] == "ready" and math[-1] == "resources_servers/acme_math"
    assert next(line for line in lines if line.split()[0] == "stub_model").split()[-1] == "(model)"
    body = json.loads(cli("status", "--head", head, "--json").stdout)
    assert [s["process_name"] for s in body["servers"]] == ["policy_model", "acme_math"]
    assert [s["name"] for s in body["support_processes"]] == ["stub_model"]
    r = cli("logs", "nope", "--head", head)
    assert r.returncode == 1 and "instances: policy_model, acme_math, stub_model" in r.stderr
    assert cli("logs", "stub_model", "--head", head, "--tail", "5").returncode == 0
