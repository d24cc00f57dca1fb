"""The preloaded parent of a group's sandbox on CPython 3.13, against a real OpenSandbox server
(``opensandbox_server``): what it imported is immortal in the servers it forks (PEP 683's count,
as ``None`` has it: ``sandbox/_immortal.py``, as the ``local`` parent does, docs/runtime.md "One
sandbox per venv") and frozen, so a server's reference counts and collections leave those pages
shared; an object a server makes after the fork counts as usual. The venv is one of the interpreter
``gym_python()`` answers (the image's own Python 3.11 has no immortal objects: there the parent
makes none, and the groups of the other tests run on it, test_backend.py)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest

from sandbox.launch import ProcessSpec
from sandbox.opensandbox.environment import OpenSandboxEnvironment
from sandbox.zygote import Preload
from tests.helpers.egress_targets import make_venv
from tests.helpers.gym_python import gym_python
from tests.helpers.opensandbox.runs import connection
from tests.opensandbox.test_many_sandboxes import _with_env

pytestmark = [pytest.mark.opensandbox, pytest.mark.slow]
IMMORTAL = 2**32 - 1  # sys.getrefcount of an immortal object on a 64-bit CPython 3.12 / 3.13
# a server: what it sees of a module the parent imported (and of a class of it), of None and of an
# object of its own, and of the collector's frozen generation; one JSON line, then it waits
APP = """
import gc, json, sys, time
preloaded = "email.mime.text" in sys.modules
import email.mime.text
own = object()
print(json.dumps({"preloaded": preloaded, "version": list(sys.version_info[:2]),
                  "inherited": sys.getrefcount(email.mime.text), "inherited_class": sys.getrefcount(email.mime.text.MIMEText),
                  "none": sys.getrefcount(None), "own": sys.getrefcount(own), "frozen": gc.get_freeze_count()}), flush=True)
time.sleep(600)
"""


def _seen(path: Path) -> dict | None:
    """The server's JSON line in its log (the launcher's lines aside), or None before it came."""
    for line in path.read_text().splitlines():
        if line.startswith("{"):
            return json.loads(line)
    return None


def test_what_the_parent_imported_is_immortal_in_the_servers_it_forks(opensandbox_server, tmp_path: Path) -> None:
    server = opensandbox_server
    python = make_venv(tmp_path / "v313", python=str(gym_python()))
    (tmp_path / "app.py").write_text(APP)
    conn = connection(server)
    logs = [tmp_path / f"server-{i}.log" for i in range(2)]
    seen: dict = {}

    async def body(env: OpenSandboxEnvironment) -> None:
        ports = [env.allocate_port() for _ in range(2)]
        for port in ports:
            await env.publish(port)
        fds = [os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600) for p in logs]
        try:
            specs = [
                ProcessSpec(
                    name=f"server-{i}",
                    argv=[str(python), str(tmp_path / "app.py")],
                    cwd=tmp_path,
                    env={},
                    stdout_fd=fds[i],
                    ports=(ports[i],),
                    preload=Preload(("email.mime.text",)),
                )
                for i in range(2)
            ]
            await env.prepare(specs)
            procs = [env.spawn(spec) for spec in specs]
            deadline = time.monotonic() + 300
            while not all(_seen(p) for p in logs):
                assert all(p.poll() is None for p in procs), [p.exit_info() for p in procs]
                assert time.monotonic() < deadline, [p.read_text()[-2000:] for p in logs]
                await asyncio.sleep(0.2)
            seen["boxes"] = {p.box.id for p in procs}
        finally:
            for fd in fds:
                os.close(fd)

    asyncio.run(_with_env(conn, tmp_path, body))
    assert len(seen["boxes"]) == 1  # one venv: one sandbox, one parent
    for log in logs:
        got = _seen(log)
        assert got is not None and got["version"][0] == 3 and got["version"][1] in (12, 13), got
        assert got["preloaded"] is True and got["frozen"] > 0, got  # forked by the parent, after its imports
        assert got["inherited"] == got["inherited_class"] == got["none"] == IMMORTAL, got
        assert got["own"] < 100, got
