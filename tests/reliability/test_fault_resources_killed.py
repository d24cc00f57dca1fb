"""Fault: a resources server is SIGKILLed in the middle of a ``/rollouts/run`` batch.

Expected (docs/reliability.md, "Retries and deadlines"): the rows it held (waiting in its
``/verify``) get a per-row error naming it; the batch finishes, nothing hangs; the daemon restarts
it; the rows that reach it while it restarts wait (their connections are refused, which the agent
retries for up to ``connect_retry_seconds``) and succeed; a later batch succeeds completely."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.helpers.environments import mixed_env, row_for, running_up, shared_venvs, stop_cleanly
from tests.helpers.load import instance, restarts, run_batch, unanswered, wait_state

pytestmark = [pytest.mark.pypi, pytest.mark.slow]


def test_resources_server_sigkilled_mid_batch(tmp_path: Path) -> None:
    pkg = mixed_env(tmp_path / "pkg", {"slow": ("slow_resources.py", {"verify_sleep": 2})})
    with running_up(pkg, tmp_path, env=shared_venvs()) as (proc, info):
        head = info["head_server"]
        rows = [row_for("slow_agent", i=i) for i in range(40)]
        out: dict = {}
        client = threading.Thread(target=lambda: out.update(batch=run_batch(head, rows, concurrency=20, timeout=300)))
        client.start()
        victim = instance(head, "slow")["pid"]
        _wait_for_verify(info["servers"]["slow"])  # a row waits in /verify now (for verify_sleep s)
        os.kill(victim, signal.SIGKILL)
        client.join(240)
        assert not client.is_alive(), "the batch did not finish"
        results = out["batch"].results
        assert len(results) == 40 and unanswered(results, 40) == []
        failed = [r["error"] for r in results if "error" in r]
        assert failed, "no row was held by the killed server"
        for e in failed:
            assert e["code"] == "GR-ROLLOUT-HTTP" and "resources server 'slow' (" in e["message"], e
        assert len(failed) < 40 and all(r["reward"] == 1.0 for r in results if "error" not in r)
        entry = wait_state(head, "slow", "ready")
        assert entry["restarts"] == 1 and entry["pid"] != victim
        assert {n: k for n, k in restarts(head).items() if k} == {"slow": 1}
        later = run_batch(head, [row_for("slow_agent", i=i) for i in range(10)], concurrency=10)
        assert [r.get("reward") for r in later.results] == [1.0] * 10
        code, err = stop_cleanly(proc)
        assert code == 0 and "Traceback" not in err


def _wait_for_verify(url: str, timeout: float = 120.0) -> None:
    """Poll the slow server's ``/stats`` until a ``/verify`` call has arrived (it counts before sleeping)."""
    deadline = time.monotonic() + timeout
    while httpx.get(url + "/stats", timeout=30, trust_env=False).json().get("/verify", 0) < 1:
        assert time.monotonic() < deadline, "no row reached /verify"
        time.sleep(0.02)
