"""The bundled example on a real three-node cluster loses the worker that hosts most of its
servers, twice in one run (docs/scale-out.md "Node loss"): every lost server is placed again and
its stable address answers, and every dataset row run after each loss succeeds. A replica that
cannot be placed again says why within seconds instead of waiting out its deadline silently.

Regression: with the environment servers (the runtime's relays) placed too, the seven instances
reserved 3.5 CPUs; after a worker's loss the survivors (3 CPUs, partly used) had no room for one
lost server, which waited 180 s and then failed (``start-failed``) while its rows failed. The
relays now reserve no CPU (``placement.default_num_cpus``).

Regression: a relay placed again after a loss can be sent by Ray to the lost node (Ray still holds
it alive) and its actor dies when Ray declares that node dead; that was taken for another loss of
the replica, and with two losses in one run the environment failed (a start-up exit repeating
itself, restarts used up) and the daemon stopped: ``_all_back`` got "connection refused" from the
head server. The placement now asks again, and a node's loss never counts toward the restarts."""

from __future__ import annotations

import json
import selectors
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.helpers.daemon import kill_tree, read_ready_line, wait_gone, write_fixture_package
from tests.placement.conftest import restore
from tests.placement.test_node_loss import stop_and_check_nothing_left
from tests.placement.test_up_on_ray import instances, up_on

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "native-quickstart"
ROWS = [
    json.loads(line)
    for line in (ROOT / "examples" / "native-quickstart.jsonl").read_text().splitlines()
    if line.strip()
]


def _drain(proc) -> list[str]:
    """Read the daemon's stderr in a thread from now on; the lines so far (a list that grows)."""
    lines: list[str] = []

    def pump() -> None:
        for line in proc.stderr:
            lines.append(line)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _busiest_worker(cluster, table: dict[str, dict]) -> tuple[str, int]:
    """The worker (``a`` or ``b``) hosting most replicas, and how many."""
    names = {i: n for n, i in cluster.node_ids.items()}
    count = Counter(names.get(t.get("node_id")) for t in table.values())
    worker = max(("a", "b"), key=lambda n: count[n])
    return worker, count[worker]


def _all_back(head: str, servers: dict[str, str], lost_id: str, within_s: float = 600) -> float:
    """Seconds until every instance is ready on a live node and every stable address answers."""
    t0 = time.monotonic()
    while True:
        table = instances(head)
        if all(t["state"] == "ready" and t.get("node_id") not in (None, lost_id) for t in table.values()):
            try:
                if all(httpx.get(url + "/", trust_env=False, timeout=5).status_code < 500 for url in servers.values()):
                    return time.monotonic() - t0
            except httpx.HTTPError:
                pass
        assert time.monotonic() - t0 < within_s, {n: (t["state"], t.get("last_exit")) for n, t in table.items()}
        time.sleep(0.2)


def test_losing_the_busiest_worker_twice_every_server_answers_again_and_every_row_succeeds(
    cluster, tmp_path: Path
) -> None:
    proc = up_on(cluster, EXAMPLE, tmp_path)
    try:
        info = json.loads(read_ready_line(proc, timeout=900))
        said = _drain(proc)  # the daemon's lines after ready: never left to fill the pipe, shown on a failure
        head, servers = info["head_server"], info["servers"]
        pids = [t["remote_pid"] for t in instances(head).values()]
        for round_ in (1, 2):
            worker, hosted = _busiest_worker(cluster, instances(head))
            assert hosted >= 2, instances(head)
            lost_id = cluster.node_ids[worker]
            cluster.kill_raylet(worker)
            try:
                took = _all_back(head, servers, lost_id)
            except (AssertionError, httpx.HTTPError) as e:
                raise AssertionError(
                    f"round {round_}: {e!r}; exit {proc.poll()}; the daemon said:\n" + "".join(said[-80:])
                ) from e
            sent_back = sum("lost before it ran there" in line for line in said)
            print(
                f"round {round_}: worker {worker} with {hosted} replicas lost; every server answered again "
                f"after {took:.1f}s ({sent_back} replica(s) so far given a lost node by Ray)"
            )
            out = httpx.post(head + "/rollouts/run", json={"examples": ROWS}, trust_env=False, timeout=600).json()
            assert len(out["results"]) == len(ROWS)
            assert [r.get("error") for r in out["results"]] == [None] * len(ROWS), out["results"]
            assert all(isinstance(r.get("reward"), float) for r in out["results"])
            pids += [t["remote_pid"] for t in instances(head).values()]
            restore(cluster, worker)
        stop_and_check_nothing_left(proc, pids)
    finally:
        kill_tree(proc)
        restore(cluster, "a")
        restore(cluster, "b")


def test_a_replica_with_no_room_left_says_why_within_seconds(cluster, tmp_path: Path) -> None:
    pkg = write_fixture_package(
        tmp_path / "pkg",
        {
            "acme_math": {
                "resources_servers": {"acme_math": {"domain": "math", "placement": {"resources": {"node_a": 1}}}}
            },
            "acme_agent": {
                "responses_api_agents": {
                    "acme_agent": {
                        "resources_server": {"type": "resources_servers", "name": "acme_math"},
                        "placement": {"num_cpus": 0.25},
                    }
                }
            },
        },
    )
    proc = up_on(cluster, pkg, tmp_path)
    try:
        info = json.loads(read_ready_line(proc, timeout=600))
        table = instances(info["head_server"])
        assert table["acme_math"]["node_id"] == cluster.node_ids["a"]
        pids = [t["remote_pid"] for t in table.values()]
        cluster.kill_raylet("a")
        said = selectors.DefaultSelector()
        said.register(proc.stderr, selectors.EVENT_READ)
        deadline = time.monotonic() + 120
        seen = []
        while True:  # the daemon's progress lines, until the reason is said
            assert said.select(max(0.0, deadline - time.monotonic())), f"no reason said within 120 s: {seen}"
            seen.append(line := proc.stderr.readline())
            assert line, f"the daemon ended without saying why: {seen}"
            if "acme_math: waiting for a node" in line and "no node has room" in line:  # not a start-up line
                break
        assert "no node has room: it asks node_a 1 (free 0 of " in line and "lost this run: 127.0.0.1 (" in line, seen
        stop_and_check_nothing_left(proc, pids)
        assert wait_gone(pids, 30, zombies_count=False) == []
    finally:
        kill_tree(proc)
        restore(cluster, "a")
        restore(cluster, "b")
