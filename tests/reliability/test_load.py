"""Load, reduced for CI: correctness only, never speed (the figures come from ``bench/load.py``).

The bundled example with the stub model at full isolation (the best the host gives): 3 batches of
``/rollouts/run`` at concurrency 64, then the same rows through the agents' ``/run`` directly.
Every row is answered (a reward or a row error; with the stub, a reward), nothing is restarted,
and nothing leaks: after the first batch warmed the connection pools, the daemon's open file
descriptors and TCP connections stay within ``CONCURRENCY`` of where they were. The keep-alive
pools of the head server and of the servers in the sandbox keep whatever idle connections the
last burst left (measured: anywhere between 25 fewer and 25 more than the first batch left, held
without expiry), and a pool never holds more connections than requests ran at once; a leak grows
them by rows, ``ROWS * BATCHES`` here."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.helpers.environments import running_up, shared_venvs, stop_cleanly
from tests.helpers.load import EXAMPLES, example_rows, footprint, restarts, run_batch, run_direct, unanswered

pytestmark = [pytest.mark.pypi, pytest.mark.slow]
ROWS, BATCHES, CONCURRENCY = 150, 3, 64


def _settled(pid: int, limit: dict, timeout: float = 20) -> dict:
    """The daemon's footprint once it is back within ``limit`` (or after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        now = footprint(pid)
        if (now["fds"] <= limit["fds"] and now["connections"] <= limit["connections"]) or time.monotonic() > deadline:
            return now
        time.sleep(0.2)


def test_batches_answer_every_row_and_leak_nothing(tmp_path: Path) -> None:
    with running_up(EXAMPLES / "native-quickstart", tmp_path, env=shared_venvs()) as (proc, info):
        head = info["head_server"]
        warm = run_batch(head, example_rows(ROWS), CONCURRENCY)
        assert unanswered(warm.results, ROWS) == []
        time.sleep(1)
        base = footprint(proc.pid)
        slack = {"fds": base["fds"] + CONCURRENCY, "connections": base["connections"] + CONCURRENCY}
        for _ in range(BATCHES):
            batch = run_batch(head, example_rows(ROWS), CONCURRENCY)
            assert len(batch.results) == ROWS and unanswered(batch.results, ROWS) == []
            assert [r["error"] for r in batch.results if "error" in r] == []
            assert all(r["reward"] in (0.0, 1.0) for r in batch.results)
            assert len(batch.latency_s) == ROWS and all(x is not None and x > 0 for x in batch.latency_s)
        after = _settled(proc.pid, slack)
        assert after["fds"] <= slack["fds"] and after["connections"] <= slack["connections"], (base, after)
        direct = run_direct(info["servers"], example_rows(ROWS), CONCURRENCY)
        assert unanswered(direct.results, ROWS) == [] and [r for r in direct.results if "error" in r] == []
        after = _settled(proc.pid, slack)
        assert after["fds"] <= slack["fds"] and after["connections"] <= slack["connections"], (base, after)
        assert not any(restarts(head).values())
        code, err = stop_cleanly(proc)
        assert code == 0 and "Traceback" not in err
