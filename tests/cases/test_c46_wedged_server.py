"""Case C46 (cases README, group G): a wedged server (its port open, nothing answering) held rollouts
until the batch deadline, and ``status`` / ``/health`` said ready while ``GET /`` timed out.
Inputs built here: a package whose resources server (``tests/cases/apps/wedged_resources.py``)
runs ``time.sleep(10_000)`` in its one serving thread on ``/verify``, so its ``GET /`` stops
answering too; the built-in agent and stub model.

Expected: a default per-call read deadline for agent -> resources calls (distinct from the model's
long generations) whose row error says "resources server X did not answer ... within Ns"; a
liveness probe after ready (``GET /`` with a deadline; N misses: the server is named wedged in
``status`` and ``/health`` and restarted), so the rows waiting on it fail at once, naming it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.examples.conftest import ROOT
from tests.helpers.environments import mixed_env, row_for, running_up, shared_venvs, stop_cleanly
from tests.helpers.load import run_batch, wait_state
from tests.helpers.trust import APPS, dry

pytestmark = [pytest.mark.pypi, pytest.mark.slow]
FAST_LIVENESS = ("--liveness-interval", "0.5", "--liveness-timeout", "1", "--liveness-misses", "2")


def package(tmp: Path, **agent: object) -> Path:
    return mixed_env(tmp / "pkg", {"stuck": (APPS / "wedged_resources.py", {})}, agent=agent)


def test_c46_the_agents_read_deadline_names_the_resources_server_and_the_call(tmp_path: Path) -> None:
    """Liveness off: the agent's ``resources_timeout_seconds`` alone bounds the rollout."""
    run, results = dry(
        tmp_path,
        [row_for("stuck_agent")],
        "--liveness-interval",
        "0",
        pkg=package(tmp_path, resources_timeout_seconds=2),
        samples=2,
        env=shared_venvs(),
    )
    assert run.code == 3, run.stderr
    messages = [r["error"]["message"] for r in results]
    assert [r["error"]["code"] for r in results] == ["GR-ROLLOUT-HTTP"] * 2
    assert all(
        "resources server 'stuck' (http://" in m and "did not answer within 2s (resources_timeout_seconds)" in m
        for m in messages
    ), messages
    assert any("/verify) did not answer" in m for m in messages)  # the other waited behind it (one thread)
    assert max(r["latency_s"] for r in results) < 60


def test_c46_a_wedged_server_is_named_in_status_and_health_restarted_and_its_rows_fail_at_once(tmp_path: Path) -> None:
    with running_up(package(tmp_path), tmp_path, *FAST_LIVENESS, env=shared_venvs()) as (proc, info):
        head = info["head_server"]
        out: dict = {}
        client = threading.Thread(target=lambda: out.update(batch=run_batch(head, [row_for("stuck_agent")] * 2)))
        t0 = time.monotonic()
        client.start()
        health = {}
        while time.monotonic() - t0 < 60 and not health.get("wedged"):
            r = httpx.get(head + "/health", timeout=10, trust_env=False)
            health = r.json() if r.status_code == 503 else {}
            time.sleep(0.2)
        assert health.get("status") == "degraded" and "stuck" in health["wedged"], health
        assert "did not answer GET / 2 times in a row" in health["wedged"]["stuck"]
        status = subprocess.run(
            [sys.executable, "-m", "gym_runtime.cli.main", "status", "--head", head, "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        stuck = next(s for s in json.loads(status.stdout)["servers"] if s["process_name"] == "stuck")
        assert status.returncode == 3 and stuck["wedged"] and stuck["state"] in ("wedged", "restarting", "starting")
        client.join(120)
        assert not client.is_alive(), "the rows waiting on the wedged server were not released"
        for r in out["batch"].results:
            assert r["error"]["code"] == "GR-ROLLOUT-HTTP" and "resources server 'stuck'" in r["error"]["message"], r
        entry = wait_state(head, "stuck", "ready")
        assert entry["restarts"] == 1 and entry["wedged"] is None
        assert httpx.get(head + "/health", timeout=10, trust_env=False).status_code == 200
        code, err = stop_cleanly(proc)
    assert "stuck: wedged: did not answer GET / 2 times in a row" in err and "restart" in err
    assert code == 0, err
