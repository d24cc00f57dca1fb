"""Rows spread over agent replicas on a real three-node cluster (docs/rollouts.md, "Rollouts at
scale"): ``POST /rollouts/run`` and ``dry-run --placement ray`` send rows through an agent's
router to its two replicas (one per worker), at most ``--max-concurrent-rollouts`` in flight,
and count the rollouts of each replica; the dry-run leaves nothing on any node."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest

from tests.helpers.daemon import FIXTURE_APP, kill_tree, read_ready_line, up_process, wait_gone, write_fixture_package
from tests.placement.test_up_on_ray import instances

pytestmark = pytest.mark.slow

# The fixture agent, counting the /run calls it holds at once: each answer carries the count at its
# entry, its wall-clock start and end (every node is this host: one clock) and the name of its
# home directory (the replica's member name: gym_runtime/placement/replica.py). It also
# claims to be replica 0 in the router's header, which the router must not pass on.
COUNTING_AGENT = (
    FIXTURE_APP.replace(
        "class H(JSONHandler):",
        """import threading
lock, held = threading.Lock(), [0]

class H(JSONHandler):""",
    )
    .replace(
        """        time.sleep(float(row.get("sleep", 0)))
        self._send(200, {"reward": row.get("fixture_reward", 1.0), "instance": name, "row": row})""",
        """        with lock:
            held[0] += 1
            entry = held[0]
        start = time.time()
        time.sleep(float(row.get("sleep", 0)))
        end = time.time()
        with lock:
            held[0] -= 1
        self._send(200, {"reward": 1.0, "in_flight": entry, "start": start, "end": end,
                         "home": os.path.basename(os.environ["HOME"])})""",
    )
    .replace(
        """self.send_header("content-length", str(len(body))); self.end_headers()""",
        """self.send_header("content-length", str(len(body)))
        self.send_header("x-gym-runtime-replica", "acme_agent.0"); self.end_headers()""",
    )
)


def package(root: Path) -> Path:
    # 1.5 CPUs an agent replica: never the head (1 CPU), one per worker (2 CPUs each)
    return write_fixture_package(
        root,
        {
            "acme_math": {"resources_servers": {"acme_math": {"domain": "math", "placement": {"num_cpus": 0.25}}}},
            "acme_agent": {
                "responses_api_agents": {
                    "acme_agent": {
                        "resources_server": {"type": "resources_servers", "name": "acme_math"},
                        "placement": {"num_cpus": 1.5, "replicas": 2},
                    }
                }
            },
        },
        apps={"acme_agent": COUNTING_AGENT},
    )


def row(i: int, sleep: float) -> dict:
    return {
        "responses_create_params": {"input": [{"role": "user", "content": f"question {i}"}]},
        "agent_ref": {"type": "responses_api_agents", "name": "acme_agent"},
        "sleep": sleep,
    }


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The largest number of (start, end) intervals open at one instant."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])  # an end sorts before a start
    now = top = 0
    for _, step in events:
        now += step
        top = max(top, now)
    return top


def test_rows_spread_over_two_agent_replicas_within_the_bound(cluster, tmp_path: Path) -> None:
    proc = up_process(
        package(tmp_path / "pkg"),
        tmp_path,
        "--placement",
        "ray",
        "--ray-address",
        cluster.address,
        "--shutdown-grace",
        "2",
        "--max-concurrent-rollouts",
        "3",
        env=cluster.env,
    )
    try:
        info = json.loads(read_ready_line(proc, timeout=600))
        assert info["max_concurrent_rollouts"] == 3
        table = instances(info["head_server"])
        pids = [table[m]["remote_pid"] for m in ("acme_agent.0", "acme_agent.1")]
        node_of = {m: table[m]["node"] for m in ("acme_agent.0", "acme_agent.1")}
        assert {table[m]["node_id"] for m in node_of} == {cluster.node_ids["a"], cluster.node_ids["b"]}
        rows = [row(i, 0.4) for i in range(12)]
        out = httpx.post(
            info["head_server"] + "/rollouts/run", json={"examples": rows}, trust_env=False, timeout=300
        ).json()
        answers, served, summary = out["results"], out["replica"], out["summary"]
        assert [a["reward"] for a in answers] == [1.0] * 12
        # the replica named for each row is the one whose process answered (the router's header, not the agent's)
        assert served == [a["home"] for a in answers]
        assert summary["rollouts"] == 12 and summary["failed"] == 0 and summary["concurrency"] == 3
        assert summary["rollouts_per_s"] > 0 and summary["wall_s"] > 0
        counts = {r["replica"]: r for r in summary["replicas"]}
        assert set(counts) == {"acme_agent.0", "acme_agent.1"}
        assert sum(r["rollouts"] for r in counts.values()) == 12
        assert all(
            r["rollouts"] == served.count(m) > 0 and r["node"] == node_of[m] and r["agent"] == "acme_agent"
            for m, r in counts.items()
        )
        # the bound: never more than 3 rows in flight over both replicas together
        assert 2 <= most_at_once([(a["start"], a["end"]) for a in answers]) <= 3
        assert max(a["in_flight"] for a in answers) <= 3
        # the body's concurrency still bounds its own batch
        one = httpx.post(
            info["head_server"] + "/rollouts/run",
            json={"examples": rows[:4], "concurrency": 1},
            trust_env=False,
            timeout=300,
        ).json()
        assert one["summary"]["concurrency"] == 1
        assert most_at_once([(a["start"], a["end"]) for a in one["results"]]) == 1
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(90)
        assert code == 0, proc.stderr.read()[-4000:]
        assert wait_gone(pids, 30, zombies_count=False) == []
    finally:
        kill_tree(proc)


def ours(tmp: Path) -> list[psutil.Process]:
    """Processes of this test's environment on any node (every node is this host): replica actors
    and servers started from the package or the run directory."""
    left = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "ServerReplica" in cmd or str(tmp) in cmd:
            left.append(p)
    return left


def test_dry_run_on_ray_reports_replicas_and_leaves_nothing(cluster, tmp_path: Path) -> None:
    pkg = package(tmp_path / "pkg")
    dataset = tmp_path / "rows.jsonl"
    dataset.write_text("".join(json.dumps(row(i, 0.1)) + "\n" for i in range(6)))
    argv = [
        sys.executable,
        "-m",
        "gym_runtime.cli.main",
        "dry-run",
        str(pkg),
        "--dataset",
        str(dataset),
        "--samples",
        "2",
        "--json",
        "--out",
        str(tmp_path / "out.jsonl"),
        "--placement",
        "ray",
        "--ray-address",
        cluster.address,
        "--work-dir",
        str(tmp_path / "run"),
    ]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cluster.env, start_new_session=True
    )
    try:
        stdout, stderr = proc.communicate(timeout=900)
    finally:
        kill_tree(proc)
    assert proc.returncode == 0, stderr[-3000:]
    report = json.loads(stdout)
    assert report["placement"] == "ray" and report["max_concurrent_rollouts"] == 64  # 32 x 2 agent replicas
    assert report["summary"]["rollouts"] == 12 and report["summary"]["rollouts_per_s"] > 0
    counts = {r["replica"]: r for r in report["replicas"]}
    assert set(counts) == {"acme_agent.0", "acme_agent.1"}
    assert sum(r["rollouts"] for r in counts.values()) == 12 and all(r["rollouts"] > 0 for r in counts.values())
    assert len({r["node"] for r in counts.values()}) == 2
    assert all(
        r["node"].split(" (")[1].rstrip(")") in {i[:8] for i in cluster.node_ids.values()} for r in counts.values()
    )
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert sorted(r["replica"] for r in lines) == sorted(m for m, r in counts.items() for _ in range(r["rollouts"]))
    # nothing left on any node: no replica actor, no server of this package, once Ray has reaped them
    left = ours(tmp_path)
    assert wait_gone([p.pid for p in left], 60, zombies_count=False) == [], [p.info["cmdline"] for p in left]


def test_dry_run_refuses_a_conflicting_concurrency(tmp_path: Path) -> None:
    argv = [
        sys.executable,
        "-m",
        "gym_runtime.cli.main",
        "dry-run",
        str(package(tmp_path / "pkg")),
        "--dataset",
        str(tmp_path / "none.jsonl"),
        "--concurrency",
        "2",
        "--max-concurrent-rollouts",
        "3",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env={**os.environ})
    assert done.returncode == 2 and "GR-USAGE-CONFLICT" in done.stderr
