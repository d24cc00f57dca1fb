"""What ``up`` does before its servers start, held to the work it needs: what the daemon imports
before it brings anything up, and what it makes more than once. How long it takes is measured by
``bench/up.py``, never here."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from gym_runtime import Runtime
from gym_runtime.errors import GymRuntimeError
from gym_runtime.supervise import readiness
from tests.daemon.conftest import fast_options
from tests.helpers.daemon import simple_env

ROOT = Path(__file__).resolve().parents[2]

UP_IMPORTS = """
import json, sys
import gym_runtime.cli.main, gym_runtime.cli.up, gym_runtime.runtime.api, gym_runtime.runtime.bringup
print(json.dumps(sorted(sys.modules)))
"""


def _loaded_by_up() -> set[str]:
    r = subprocess.run([sys.executable, "-c", UP_IMPORTS], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return set(json.loads(r.stdout.strip().splitlines()[-1]))


@pytest.fixture(scope="module")
def loaded_by_up() -> set[str]:
    return _loaded_by_up()


def test_the_daemon_loads_dnspython_at_the_first_lookup_not_with_up(loaded_by_up: set[str]) -> None:
    assert "sandbox.core" in loaded_by_up  # the local sandbox, with its DNS stub, is on the path
    assert not {m for m in loaded_by_up if m == "dns" or m.startswith("dns.")}


def test_probe_clients_share_one_verifying_tls_context() -> None:
    async def made() -> list:
        async with readiness.probe_client() as a, readiness.probe_client() as b:
            return [a, b]

    a, b = asyncio.run(made())
    ctx = a._transport._pool._ssl_context
    assert b._transport._pool._ssl_context is ctx
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert not a._trust_env  # proxy variables are not read for probes of loopback servers


SPAWN_PROBE = """
import json, sys
from pathlib import Path

import httpx

from gym_runtime import Runtime
from gym_runtime.runtime import bringup
from tests.daemon.conftest import fast_options
from tests.helpers.daemon import simple_env

bringup.HEAD_DUE_S = 600.0  # its latest start, for a slow phase; here the servers' spawn must start it
tmp, seen = Path(sys.argv[1]), {}


def progress(line):
    if line.startswith("starting "):  # said once the servers' processes are placed, before their spawn
        seen["web_at_spawn"] = sorted(m for m in sys.modules if m.split(".")[0] in ("fastapi", "starlette"))


pkg = simple_env(tmp / "pkg")
opts = fast_options()
with Runtime(pkg, policy_base_url="http://127.0.0.1:9/v1", work_dir=tmp / "run", progress=progress, options=opts) as rt:
    with httpx.Client(trust_env=False, timeout=30) as c:
        seen["health"] = c.get(rt.head_url + "/health").status_code
        seen["task_api"] = c.get(rt.env.task_sandboxes.url + "/no-such-route").status_code
    seen["head_url"] = rt.ready_info["head_server"] == rt.head_url
print(json.dumps(seen))
"""


def test_the_daemon_s_web_services_start_beside_the_servers_not_before_them(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-c", SPAWN_PROBE, str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-3000:]
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    # neither the head server nor the task-sandbox API had made its app (Starlette) when the servers were spawned
    assert seen["web_at_spawn"] == []
    # and both serve by the ready line: /health, and the API's own 404 for a route it does not have
    assert seen == {"web_at_spawn": [], "health": 200, "task_api": 404, "head_url": True}


def test_a_start_that_fails_before_the_spawn_leaves_no_head_server_listening(tmp_path: Path) -> None:
    lines: list[str] = []
    rt = Runtime(
        simple_env(tmp_path / "pkg"),
        policy_base_url="http://127.0.0.1:9/v1",
        work_dir=tmp_path / "run",
        python=str(tmp_path / "no-such-python"),
        progress=lines.append,
        options=fast_options(),
    )
    with pytest.raises(GymRuntimeError) as e:
        asyncio.run(rt.start())
    assert e.value.code == "GR-BUILD-PYTHON"
    said = next(line for line in lines if line.startswith("head server at "))  # bound, never served
    port = int(said.split()[3].rsplit(":", 1)[1])
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
