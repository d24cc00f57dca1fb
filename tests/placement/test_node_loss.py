"""Rows in flight on a node that is lost (docs/scale-out.md "Node loss"), on a real three-node
cluster: a worker's raylet is SIGKILLed while the agent's replica on it holds rows. Those rows get
``GR-ROLLOUT-NODE-LOST`` naming the node, the server instance and the replica, or succeed after
one retry when the agent declares its ``/run`` safe to repeat; the agent's address answers again
from the other worker, later rows succeed, and nothing is left on any node after the stop."""

from __future__ import annotations

import json
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.helpers.daemon import kill_tree, read_ready_line, wait_gone, write_fixture_package
from tests.placement.conftest import restore
from tests.placement.test_up_on_ray import instances, up_on

pytestmark = pytest.mark.slow

HOLD_S = 20.0  # each row's /run holds this long (the fixture agent's row "sleep")


def package(root: Path, agent_placement: dict) -> Path:
    return write_fixture_package(
        root,
        {
            "acme_math": {"resources_servers": {"acme_math": {"domain": "math", "placement": {"num_cpus": 0.25}}}},
            "acme_agent": {
                "responses_api_agents": {
                    "acme_agent": {
                        "resources_server": {"type": "resources_servers", "name": "acme_math"},
                        "placement": agent_placement,
                    }
                }
            },  # 1.5 CPUs: only a worker (2 CPUs) fits, never the head (1 CPU)
        },
    )


def rows(n: int, hold: float) -> list[dict]:
    return [
        {"agent_ref": {"type": "responses_api_agents", "name": "acme_agent"}, "n": i, "sleep": hold} for i in range(n)
    ]


def lose_the_agents_node_under_rows(cluster, head: str) -> tuple[dict, list[dict]]:
    """Send 3 rows that hold :data:`HOLD_S`, kill the raylet of the agent's node while they are in
    flight; returns the agent's entry before the loss and the rows' results."""
    first = instances(head)["acme_agent"]
    name = next(n for n, i in cluster.node_ids.items() if i == first["node_id"])
    with ThreadPoolExecutor(1) as pool, httpx.Client(trust_env=False, timeout=600) as c:
        batch = pool.submit(c.post, head + "/rollouts/run", json={"examples": rows(3, HOLD_S)})
        time.sleep(5)  # the rows reach the agent's replica within milliseconds; they hold 20 s there
        assert not batch.done()
        cluster.kill_raylet(name)
        return first, batch.result(300).json()["results"]


def wait_moved(head: str, first: dict, within_s: float = 240) -> dict:
    deadline = time.monotonic() + within_s
    while True:
        now = instances(head)["acme_agent"]
        if now["state"] == "ready" and now["node_id"] not in (None, first["node_id"]):
            return now
        assert time.monotonic() < deadline, now
        time.sleep(0.5)


def stop_and_check_nothing_left(proc, pids: list[int]) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(90) == 0
    assert wait_gone(pids, 60, zombies_count=False) == []


def test_rows_on_a_lost_node_get_an_error_naming_it_and_later_rows_succeed(cluster, tmp_path: Path) -> None:
    proc = up_on(cluster, package(tmp_path / "pkg", {"num_cpus": 1.5}), tmp_path)
    try:
        info = json.loads(read_ready_line(proc, timeout=600))
        head = info["head_server"]
        before = [t["remote_pid"] for t in instances(head).values()]
        first, results = lose_the_agents_node_under_rows(cluster, head)
        node = f"{first['node'].split(' ')[0]} ({first['node_id'][:8]})"
        assert [r.get("error", {}).get("code") for r in results] == ["GR-ROLLOUT-NODE-LOST"] * 3, results
        for r in results:
            assert r["error"]["message"].startswith(
                f"acme_agent: node {node} was lost while replica 0 of "
                "server instance 'acme_agent' was answering POST /run"
            )
            assert "retry_run_on_node_loss" in r["error"]["message"]
        now = wait_moved(head, first)
        assert now["moves"] == 1 and now["restarts"] == 1 and first["node_id"][:8] in now["last_exit"]["detail"]
        out = httpx.post(head + "/rollouts/run", json={"examples": rows(3, 0)}, trust_env=False, timeout=120).json()
        assert [r["reward"] for r in out["results"]] == [1.0] * 3
        stop_and_check_nothing_left(proc, [*before, *(t["remote_pid"] for t in instances(head).values())])
    finally:
        kill_tree(proc)
        restore(cluster, "a")
        restore(cluster, "b")


def test_a_run_declared_safe_to_repeat_is_sent_once_more_and_succeeds(cluster, tmp_path: Path) -> None:
    pkg = package(tmp_path / "pkg", {"num_cpus": 1.5, "retry_run_on_node_loss": True})
    proc = up_on(cluster, pkg, tmp_path)
    try:
        info = json.loads(read_ready_line(proc, timeout=600))
        head = info["head_server"]
        before = [t["remote_pid"] for t in instances(head).values()]
        first, results = lose_the_agents_node_under_rows(cluster, head)
        assert [r.get("reward") for r in results] == [1.0] * 3, results
        assert [r["row"]["n"] for r in results] == [0, 1, 2]
        now = wait_moved(head, first, 30)  # it answered the retries: it was already there
        assert now["moves"] == 1
        stop_and_check_nothing_left(proc, [*before, *(t["remote_pid"] for t in instances(head).values())])
    finally:
        kill_tree(proc)
        restore(cluster, "a")
        restore(cluster, "b")
