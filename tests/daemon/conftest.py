"""Fixtures for daemon tests: a real sandbox (best level this host offers) and member factories."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gym_runtime.supervise import LogSink, Member, SuperviseOptions, Supervisor


@pytest.fixture
def run():
    """Run a coroutine on a fresh event loop (the supervisor's one loop)."""
    return lambda coro: asyncio.run(coro)


async def start_sandbox(work: Path, level: str | None = None):
    from sandbox import EgressPolicy, Sandbox

    return await Sandbox.start(EgressPolicy.from_environ({}, policy_endpoints=[]), work, level=level)


async def add_member(
    sup: Supervisor,
    sb,
    name: str,
    argv: list[str],
    cwd: Path,
    logs: Path,
    port: int | None = None,
    probe_path: str | None = "/",
    env: dict | None = None,
    kind: str = "server",
) -> Member:
    """A member running ``argv`` (``{port}`` substituted) with the daemon's own interpreter; ``kind``
    as the daemon gives it (``server``, ``model`` for the stub model, ``ray`` for the Ray head)."""
    from sandbox import ProcessSpec

    port = port or sb.allocate_port()
    argv = [a.replace("{port}", str(port)) for a in argv]
    spec = ProcessSpec(
        name,
        argv,
        cwd,
        {"PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1", "HOME": str(cwd), **(env or {})},
        read_only_paths=[cwd, Path(sys.prefix)],
    )
    m = Member(name, kind, spec, sb, LogSink(logs / f"{name}.log"), port=port, probe_path=probe_path)
    m.public = tuple(await sb.publish(port))
    sup.add(m)
    return m


def fast_options(**kw) -> SuperviseOptions:
    base = {
        "server_ready_timeout_s": 20,
        "startup_timeout_s": 60,
        "backoff_s": 0.1,
        "backoff_max_s": 0.4,
        "shutdown_grace_s": 2,
        "max_restarts": 2,
    }
    base.update(kw)
    return SuperviseOptions(**base)


@contextlib.contextmanager
def running_stub(model: str = "acme-policy-7b", *extra: str, api_key: str | None = None) -> Iterator[str]:
    """The built-in stub model as an outside policy endpoint (``extra``: more CLI flags;
    ``api_key``: required bearer key, given through its environment, never its command line);
    yields its ``/v1`` base URL and stops it afterwards."""
    import socket
    import subprocess
    import time

    import httpx

    from tests.helpers.daemon import kill_tree

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "gym_runtime.stub_model", "--port", str(port), "--model", model, *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, **({"STUB_MODEL_API_KEY": api_key} if api_key else {})},
    )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(url + "/models", trust_env=False, timeout=1)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline and proc.poll() is None, "stub model did not start"
                time.sleep(0.05)
        yield url
    finally:
        kill_tree(proc)


@pytest.fixture
def stub_endpoint(tmp_path: Path):
    """The built-in stub model as an outside policy endpoint: ``(base_url, served model name)``."""
    with running_stub("acme-policy-7b") as url:
        yield url, "acme-policy-7b"
