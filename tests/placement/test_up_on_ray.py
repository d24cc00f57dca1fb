"""``gym-runtime up --placement ray`` on a real three-node cluster (docs/scale-out.md): servers
placed by their ``placement:`` blocks, replicas spread over both workers behind one address,
node and replica in ``/server_instances``, rollouts through the head server, a worker's loss
survived, and nothing left on any node after a stop or a SIGKILL of the daemon."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.helpers.daemon import (
    SIMPLE_RELAY,
    SIMPLE_SERVERS,
    kill_tree,
    read_ready_line,
    up_process,
    wait_gone,
    write_fixture_package,
)
from tests.placement.conftest import restore

pytestmark = pytest.mark.slow


def package(root: Path, math_placement: dict, agent_placement: dict | None = None) -> Path:
    return write_fixture_package(
        root,
        {
            "acme_math": {"resources_servers": {"acme_math": {"domain": "math", "placement": math_placement}}},
            "acme_agent": {
                "responses_api_agents": {
                    "acme_agent": {
                        "resources_server": {"type": "resources_servers", "name": "acme_math"},
                        "placement": agent_placement or {"num_cpus": 0.25},
                    }
                }
            },
        },
    )


def up_on(cluster, pkg: Path, tmp: Path, *args: str):
    return up_process(
        pkg,
        tmp,
        "--placement",
        "ray",
        "--ray-address",
        cluster.address,
        "--shutdown-grace",
        "2",
        *args,
        env=cluster.env,
    )


def instances(head: str) -> dict[str, dict]:
    return {i["process_name"]: i for i in httpx.get(head + "/server_instances", trust_env=False, timeout=10).json()}


def test_replicas_spread_over_both_workers_behind_one_address_and_rollouts_run(cluster, tmp_path: Path) -> None:
    # 1.5 CPUs a replica: never the head (1 CPU), one per worker (2 CPUs each)
    pkg = package(tmp_path / "pkg", {"num_cpus": 1.5, "replicas": 2}, {"num_cpus": 0.25, "labels": {"gr-pool": "a"}})
    proc = up_on(cluster, pkg, tmp_path)
    try:
        info = json.loads(read_ready_line(proc, timeout=600))
        assert info["placement"] == "ray" and info["ray"]["mode"] == "join"
        assert set(info["servers"]) == SIMPLE_SERVERS
        table = instances(info["head_server"])
        assert set(table) == {"acme_math.0", "acme_math.1", "acme_agent", SIMPLE_RELAY}  # no row for the instance
        said = httpx.get(info["head_server"] + "/servers/acme_math/logs", trust_env=False, timeout=10).json()
        assert said["log_file"] is None and "acme_math.0, acme_math.1" in said["lines"][0]
        reps = [table["acme_math.0"], table["acme_math.1"]]
        assert {r["node_id"] for r in reps} == {cluster.node_ids["a"], cluster.node_ids["b"]}
        assert [r["replica"] for r in reps] == [0, 1] and all(r["state"] == "ready" for r in reps)
        assert table["acme_agent"]["node_id"] == cluster.node_ids["a"]  # its label selector
        assert all(r["instance"] == r["config_path"] == "acme_math" and r["isolation"] for r in reps)
        pids = [r["remote_pid"] for r in [*reps, table["acme_agent"]]]
        seen = {
            httpx.get(info["servers"]["acme_math"] + "/", trust_env=False, timeout=10).json()["status"]
            for _ in range(4)
        }
        assert seen == {"ok"}
        rows = [{"agent_ref": {"type": "responses_api_agents", "name": "acme_agent"}, "n": i} for i in range(6)]
        out = httpx.post(
            info["head_server"] + "/rollouts/run", json={"examples": rows}, trust_env=False, timeout=120
        ).json()
        assert [r["reward"] for r in out["results"]] == [1.0] * 6
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(90) == 0
        assert wait_gone(pids, 30, zombies_count=False) == []
    finally:
        kill_tree(proc)


def test_a_sigkilled_daemon_leaves_no_server_on_any_node(cluster, tmp_path: Path) -> None:
    pkg = package(tmp_path / "pkg", {"num_cpus": 0.5, "labels": {"gr-pool": "b"}})
    proc = up_on(cluster, pkg, tmp_path)
    try:
        info = json.loads(read_ready_line(proc, timeout=600))
        table = instances(info["head_server"])
        assert table["acme_math"]["node_id"] == cluster.node_ids["b"]
        pids = [t["remote_pid"] for t in table.values() if t.get("remote_pid")]
        assert len(pids) == len(SIMPLE_SERVERS)  # the relay in front of the agent is placed too
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        assert (
            wait_gone(pids, 60, zombies_count=False) == []
        )  # Ray ends the actors the dead driver owned; their servers die with them
    finally:
        kill_tree(proc)


def test_a_lost_worker_is_survived_and_the_address_keeps_answering(cluster, tmp_path: Path) -> None:
    pkg = package(tmp_path / "pkg", {"num_cpus": 1.5})
    proc = up_on(cluster, pkg, tmp_path)
    try:
        info = json.loads(read_ready_line(proc, timeout=600))
        head, url = info["head_server"], info["servers"]["acme_math"]
        first = instances(head)["acme_math"]
        name = next(n for n, i in cluster.node_ids.items() if i == first["node_id"])
        t0 = time.monotonic()
        cluster.kill_raylet(name)
        deadline = t0 + 240
        while True:  # the replica is placed again on the surviving worker, behind the same address
            now = instances(head)["acme_math"]
            if now["state"] == "ready" and now["node_id"] not in (None, first["node_id"]):
                break
            assert time.monotonic() < deadline, now
            time.sleep(0.5)
        assert now["restarts"] == 1 and "node-lost" in json.dumps(now["last_exit"])
        assert first["node_id"][:8] in now["last_exit"]["detail"]
        assert httpx.get(url + "/", trust_env=False, timeout=10).json() == {"status": "ok"}
        rows = [{"agent_ref": {"type": "responses_api_agents", "name": "acme_agent"}, "n": i} for i in range(3)]
        out = httpx.post(head + "/rollouts/run", json={"examples": rows}, trust_env=False, timeout=120).json()
        assert [r["reward"] for r in out["results"]] == [1.0] * 3
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(90) == 0
    finally:
        kill_tree(proc)
        restore(cluster, "a")
        restore(cluster, "b")
