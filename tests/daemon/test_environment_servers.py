"""An environment server (NeMo Gym 0.7's fourth server type) under ``gym-runtime up``: built,
started, supervised and listed like every server (the ready line, ``/server_instances`` with Gym's
keys, ``status``, ``logs``), and the head server's probes of the release line (NeMo Gym 0.7.0
``nemo_gym/server_utils.py`` ``HeadServer``: ``/livez``; ``/readyz``, ``/healthz``, ``/health``
answering ``ok`` once ready). Under the 0.4 line an environment server is refused before anything
is built, and the head keeps the 0.4 line's ``/health``."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from gym_runtime.head.app import HeadBackend, create_app
from tests.helpers.daemon import kill_tree, read_ready_line, simple_env, up_process, write_fixture_package

AGENT = {
    "responses_api_agents": {"acme_agent": {"resources_server": {"type": "resources_servers", "name": "acme_math"}}}
}
ENV = {"environment_servers": {"acme_relay": {"agent_server": {"name": "acme_agent"}}}}


def env_package(root: Path) -> Path:
    return write_fixture_package(
        root,
        {
            "acme_math": {"resources_servers": {"acme_math": {"domain": "math"}}},
            "acme_agent": AGENT,
            "acme_environment_server": ENV,
        },
    )


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("envsrv")
    proc = up_process(env_package(tmp / "pkg"), tmp)
    try:
        yield json.loads(read_ready_line(proc)), tmp
    finally:
        kill_tree(proc)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gym_runtime.cli.main", *args], capture_output=True, text=True, timeout=60
    )


def test_the_environment_server_runs_and_is_listed_with_gyms_keys(daemon) -> None:
    ready, _ = daemon
    assert set(ready["servers"]) == {"acme_math", "acme_agent", "acme_environment_server"}
    rows = {r["process_name"]: r for r in httpx.get(ready["head_server"] + "/server_instances", trust_env=False).json()}
    env = rows["acme_environment_server"]
    assert (env["server_type"], env["name"], env["state"], env["entrypoint"]) == (
        "environment_servers",
        "acme_relay",
        "ready",
        "app.py",
    )
    assert env["url"] == ready["servers"]["acme_environment_server"] and env["pid"] and env["start_time"]
    assert httpx.get(env["url"] + "/", trust_env=False).status_code == 200


def test_status_and_logs_name_the_environment_server(daemon) -> None:
    ready, _ = daemon
    done = cli("status", "--head", ready["head_server"])
    assert done.returncode == 0, done.stderr
    assert any(
        "acme_environment_server" in line and "environment_servers/acme_relay" in line
        for line in done.stdout.splitlines()
    ), done.stdout
    logs = cli("logs", "acme_environment_server", "--head", ready["head_server"])
    assert logs.returncode == 0 and "acme_environment_server" in logs.stdout + logs.stderr


def test_the_head_answers_gyms_probes_of_the_0_7_line(daemon) -> None:
    head = daemon[0]["head_server"]
    with httpx.Client(base_url=head, trust_env=False) as c:
        assert (c.get("/livez").status_code, c.get("/livez").json()) == (200, {"status": "ok"})
        for path in ("/readyz", "/healthz", "/health"):
            r = c.get(path)
            assert r.status_code == 200 and r.json()["status"] == "ok" and "egress" in r.json()  # ours kept


def test_before_ready_the_readiness_probes_say_starting() -> None:
    """Gym's head answers 503 ``starting`` until every server is ready; ``/livez`` answers at once."""
    starting = (503, {"status": "starting", "phase": "building venvs"})
    app = create_app(
        HeadBackend(
            config_yaml=lambda: None,
            instances=list,
            health=lambda: starting,
            logs=lambda n, t: None,
            agents=dict,
            liveness_routes=("/livez",),
            readiness_routes=("/readyz", "/healthz", "/health"),
        )
    )

    async def probe() -> list[tuple[int, dict]]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://head") as c:
            return [((r := await c.get(p)).status_code, r.json()) for p in ("/livez", "/readyz", "/healthz", "/health")]

    assert asyncio.run(probe()) == [(200, {"status": "ok"}), *[starting] * 3]


def test_under_the_0_4_line_an_environment_server_is_refused_before_any_build(tmp_path: Path) -> None:
    proc = up_process(env_package(tmp_path / "pkg"), tmp_path, env={"GYM_RUNTIME_PIN_NEMO_GYM": "0.4.0"})
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        kill_tree(proc)
    assert proc.returncode == 1 and "GR-CONFIG-SERVER-TYPE" in err
    assert "'acme_environment_server' has server type environment_servers, but NeMo Gym 0.4.0" in err
    assert "GYM_RUNTIME_PIN_NEMO_GYM=0.7.0" in err and "building" not in err.lower()


def test_under_the_0_4_line_the_head_keeps_its_own_health(tmp_path: Path) -> None:
    proc = up_process(simple_env(tmp_path / "pkg"), tmp_path, env={"GYM_RUNTIME_PIN_NEMO_GYM": "0.4.0"})
    try:
        head = json.loads(read_ready_line(proc))["head_server"]
        with httpx.Client(base_url=head, trust_env=False) as c:
            assert c.get("/health").json()["status"] == "ready"
            assert c.get("/livez").json()["error"]["code"] == "GR-HEAD-NOT-FOUND"
    finally:
        kill_tree(proc)
