"""``gym_runtime.Runtime``: the Python API training frameworks use, on stdlib fixture servers.

Async (``async with`` / ``await start()``) and sync (``with``) forms: start, ``head_url``,
``servers``, ``health()``, rollouts through the head, stop with no process left; a failed start
raises a ``GymRuntimeError`` and leaves nothing running.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import psutil
import pytest

from gym_runtime import Runtime
from gym_runtime.errors import GymRuntimeError
from tests.daemon.conftest import fast_options
from tests.helpers.daemon import SIMPLE_SERVERS, simple_env, wait_gone, write_fixture_package

REF = {"type": "responses_api_agents", "name": "acme_agent"}


def tree_pids(rt: Runtime) -> list[int]:
    """Every process of the environment (members and their descendants)."""
    pids = []
    for m in rt.env.supervisor.members.values():
        if m.proc is not None and m.proc.poll() is None:
            pids.append(m.proc.pid)
            try:
                pids += [c.pid for c in psutil.Process(m.proc.pid).children(recursive=True)]
            except psutil.Error:
                pass
    return pids


def check_running(rt: Runtime, info: dict) -> None:
    assert info["status"] == "ready" and info == rt.ready_info
    assert rt.head_url == info["head_server"]
    assert set(rt.servers) == SIMPLE_SERVERS and rt.servers == info["servers"]
    code, body = rt.health()
    assert code == 200 and body["status"] == "ok" and body["egress"]  # Gym 0.7's head status (the default line)
    with httpx.Client(trust_env=False, timeout=10) as c:
        assert c.get(rt.head_url + "/health").json() == body
        for url in rt.servers.values():
            assert c.get(url).json() == {"status": "ok"}
        r = c.post(rt.head_url + "/rollouts/run", json={"examples": [{"agent_ref": REF, "i": 0}]})
        assert json.loads(r.text)["results"][0]["reward"] == 1.0


def test_async_context_manager(tmp_path: Path) -> None:
    pkg = simple_env(tmp_path / "pkg")

    async def main() -> tuple[list[int], int, tuple]:
        rt = Runtime(pkg, policy_base_url="http://127.0.0.1:9/v1", work_dir=tmp_path / "run", options=fast_options())
        async with rt:
            await asyncio.to_thread(check_running, rt, rt.ready_info)  # blocking clients off the loop
            pids = tree_pids(rt)
        return pids, await rt.stop(), rt.health()

    pids, code, health = asyncio.run(main())
    assert pids and code == 0
    assert health[0] == 503 and health[1]["status"] == "stopped"
    assert wait_gone(pids, 2.0) == []


def test_sync_context_manager_with_the_stub_model(tmp_path: Path) -> None:
    lines: list[str] = []
    pkg = simple_env(tmp_path / "pkg", judge_base_url="${policy_base_url}")  # uses the policy: a stub is started
    with Runtime(pkg, work_dir=tmp_path / "run", progress=lines.append, options=fast_options()) as rt:
        check_running(rt, rt.ready_info)
        assert rt.ready_info["policy_model"]["stub"] is True
        pids = tree_pids(rt)
        assert len(rt.env.supervisor.members) == len(SIMPLE_SERVERS) + 1  # the servers + the stub model
    assert any("built-in stub model" in line for line in lines)
    assert wait_gone(pids, 2.0) == []


def test_explicit_start_and_failed_start(tmp_path: Path) -> None:
    pkg = write_fixture_package(
        tmp_path / "pkg", {"acme_math": {"resources_servers": {"acme_math": {"domain": "math", "fixture_exit": 2}}}}
    )
    rt = Runtime(
        pkg, policy_base_url="http://127.0.0.1:9/v1", work_dir=tmp_path / "run", options=fast_options(max_restarts=0)
    )
    with pytest.raises(GymRuntimeError) as e:
        asyncio.run(rt.start())
    assert e.value.code == "GR-START-CRASH" and "acme_math" in e.value.message
    assert all(m.proc is None or m.proc.poll() is not None for m in rt.env.supervisor.members.values())
