"""Fault: the client of ``POST /rollouts/run`` disconnects in the middle of a batch.

Expected: the batch's work is cancelled at once, at every hop: the head server cancels every row
still running and closes its connections to the agent, and the agent (built-in ``simple_agent``)
cancels those rollouts, so none of them calls the policy model or ``/verify`` afterwards; the
daemon's and the agent's open file descriptors and connections fall back to what they were."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.helpers.environments import mixed_env, row_for, running_up, shared_venvs, stop_cleanly
from tests.helpers.load import builds_quiet, footprint, instance, run_batch

pytestmark = [pytest.mark.pypi, pytest.mark.slow]
SEED_SLEEP = 4.0


def _stats(info: dict) -> tuple[int, dict]:
    stub = httpx.get(
        instance(info["head_server"], "stub_model")["url"] + "/stub/stats",
        trust_env=False,
        headers={"authorization": "Bearer stub-key"},
    ).json()  # the key the daemon gives its stub
    slow = httpx.get(info["servers"]["slow"] + "/stats", trust_env=False).json()
    return stub["chat_completions"], slow


def _settled(pid: int, baseline: dict, slack: int = 4, timeout: float = 15) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        now = footprint(pid)
        if now["fds"] <= baseline["fds"] + slack and now["connections"] <= baseline["connections"] + slack:
            return now
        if time.monotonic() > deadline:
            return now
        time.sleep(0.2)


def test_client_disconnect_cancels_the_batch_everywhere(tmp_path: Path) -> None:
    pkg = mixed_env(tmp_path / "pkg", {"slow": ("slow_resources.py", {"seed_sleep": SEED_SLEEP})})
    with running_up(pkg, tmp_path, env=shared_venvs()) as (proc, info):
        head = info["head_server"]
        warm = run_batch(head, [row_for("slow_agent", i=i) for i in range(4)], concurrency=4)
        assert [r.get("reward") for r in warm.results] == [1.0] * 4
        agent = psutil.Process(instance(head, "slow_agent")["pid"])
        builds_quiet(head)
        daemon_before, agent_before = footprint(proc.pid), footprint(agent.pid)
        chats_before, slow_before = _stats(info)

        rows = [row_for("slow_agent", i=i) for i in range(30)]
        with httpx.Client(trust_env=False, timeout=1.5) as client:  # gives up while every row sleeps in seed_session
            with pytest.raises(httpx.ReadTimeout):
                client.post(head + "/rollouts/run", json={"examples": rows, "concurrency": 30})
        assert _stats(info)[1]["/seed_session"] == slow_before["/seed_session"] + 30  # all 30 had started

        time.sleep(SEED_SLEEP + 3)  # their seed_session calls are long over
        chats_after, slow_after = _stats(info)
        assert chats_after == chats_before, "cancelled rollouts still called the policy model"
        assert slow_after.get("/verify") == slow_before.get("/verify"), "cancelled rollouts still called /verify"
        daemon_after, agent_after = _settled(proc.pid, daemon_before), _settled(agent.pid, agent_before)
        assert daemon_after["fds"] <= daemon_before["fds"] + 4, (daemon_before, daemon_after)
        assert daemon_after["connections"] <= daemon_before["connections"] + 4, (daemon_before, daemon_after)
        assert agent_after["fds"] <= agent_before["fds"] + 4, (agent_before, agent_after)

        again = run_batch(head, [row_for("slow_agent", i=i) for i in range(4)], concurrency=4)
        assert [r.get("reward") for r in again.results] == [1.0] * 4  # the daemon serves on
        code, err = stop_cleanly(proc)
        assert code == 0 and "Traceback" not in err
