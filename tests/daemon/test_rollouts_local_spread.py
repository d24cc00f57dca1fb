"""Rollouts at scale on placement ``local`` (docs/rollouts.md, "Rollouts at scale"): the
``max_concurrent_rollouts`` of the Python API bounds a ``/rollouts/run`` batch and shows in the
ready info, the body's ``concurrency`` still sets its own batch's bound, and the answer counts the
rollouts of the agent's one replica on this host; a bound below 1 is a usage error."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from gym_runtime import Runtime
from gym_runtime.errors import UsageError
from tests.daemon.conftest import fast_options
from tests.helpers.daemon import simple_env

REF = {"type": "responses_api_agents", "name": "acme_agent"}


def test_the_bound_and_the_counts_of_one_local_agent(tmp_path: Path) -> None:
    with Runtime(
        simple_env(tmp_path / "pkg"),
        policy_base_url="http://127.0.0.1:9/v1",
        work_dir=tmp_path / "run",
        options=fast_options(),
        max_concurrent_rollouts=2,
    ) as rt:
        assert rt.ready_info["max_concurrent_rollouts"] == 2
        rows = [{"agent_ref": REF, "i": i} for i in range(5)] + [{"agent_ref": {**REF, "name": "ghost"}}]
        with httpx.Client(trust_env=False, timeout=60) as c:
            out = json.loads(c.post(rt.head_url + "/rollouts/run", json={"examples": rows}).text)
            own = json.loads(c.post(rt.head_url + "/rollouts/run", json={"examples": rows[:2], "concurrency": 7}).text)
    assert out["replica"] == ["acme_agent"] * 5 + [None]
    s = out["summary"]
    assert s["rollouts"] == 6 and s["failed"] == 1 and s["concurrency"] == 2 and s["rollouts_per_s"] > 0
    assert s["replicas"] == [
        {
            "agent": "acme_agent",
            "replica": "acme_agent",
            "node": "local",
            "rollouts": 5,
            "failed": 0,
            "rollouts_per_s": s["replicas"][0]["rollouts_per_s"],
        }
    ]
    assert own["summary"]["concurrency"] == 7


def test_a_bound_below_one_is_refused_before_anything_starts(tmp_path: Path) -> None:
    rt = Runtime(
        simple_env(tmp_path / "pkg"),
        policy_base_url="http://127.0.0.1:9/v1",
        work_dir=tmp_path / "run",
        max_concurrent_rollouts=0,
    )
    with pytest.raises(UsageError, match="--max-concurrent-rollouts must be at least 1"), rt:
        pass
