"""What ``up`` does before its servers start, held to the work it needs: what the daemon imports
before it brings anything up, and what it makes more than once. How long it takes is measured by
``bench/up.py``, never here."""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import sys

import pytest

from gym_runtime.supervise import readiness

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
