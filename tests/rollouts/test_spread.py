"""Rows over agent replicas (gym_runtime/rollouts/spread.py): the router names the replica that
answered (never the replica itself), the batch knows each row's replica, the counts per replica
and the default bound. Replicas are real HTTP servers on loopback behind the real router."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from rich.console import Console

from gym_runtime.placement.router import Router
from gym_runtime.rollouts.dispatch import run_rows
from gym_runtime.rollouts.report import print_report, replica_table
from gym_runtime.rollouts.spread import (
    REPLICA_HEADER,
    ROLLOUTS_PER_AGENT_REPLICA,
    default_max_rollouts,
    replica_counts,
    served_by,
)
from gym_runtime.rollouts.stats import RolloutResult, row_stats, summarize

REPLICAS = {"acme_agent": {"acme_agent.0": "10.0.0.7 (3f2a9c1e)", "acme_agent.1": "10.0.0.8 (77ab01cd)"}}


def agent_replica(index: int) -> ThreadingHTTPServer:
    """An agent replica answering ``/run`` with its index, and claiming to be replica 0 in the header."""

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            body = json.dumps({"reward": 1.0, "me": index}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.send_header(REPLICA_HEADER, "acme_agent.0")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


@pytest.fixture
def replicas():
    servers = [agent_replica(0), agent_replica(1)]
    yield servers
    for s in servers:
        s.shutdown()
        s.server_close()


def test_each_row_names_the_replica_the_router_sent_it_to(replicas) -> None:
    targets = [s.server_address[:2] for s in replicas]
    rows = [{"agent_ref": {"type": "responses_api_agents", "name": "acme_agent"}, "i": i} for i in range(10)]
    rows.append({"agent_ref": {"type": "responses_api_agents", "name": "ghost"}})

    async def scenario():
        router = Router("acme_agent", lambda: targets)
        host, port = await router.start("127.0.0.1")
        try:
            return await run_rows(rows, {"acme_agent": f"http://{host}:{port}"}, concurrency=4, replicas=REPLICAS)
        finally:
            await router.stop()

    batch = asyncio.run(scenario())
    answered = [r.get("me") for r in batch.results[:10]]
    assert set(answered) == {0, 1}  # spread
    assert batch.replicas[:10] == [f"acme_agent.{i}" for i in answered]  # the router's word, not the replica's
    assert batch.replicas[10] is None and batch.agents[10] is None and batch.agents[:10] == ["acme_agent"] * 10
    counts = replica_counts(
        zip(batch.agents, batch.replicas, ["error" in r for r in batch.results], strict=True), REPLICAS, batch.wall_s
    )
    assert [(c["replica"], c["rollouts"], c["node"]) for c in counts] == [
        ("acme_agent.0", answered.count(0), "10.0.0.7 (3f2a9c1e)"),
        ("acme_agent.1", answered.count(1), "10.0.0.8 (77ab01cd)"),
    ]
    assert all(c["failed"] == 0 and c["rollouts_per_s"] > 0 for c in counts)


def test_served_by_trusts_the_header_only_for_an_agent_with_several_replicas() -> None:
    one = {"acme_agent": {"acme_agent": "local"}}
    assert served_by("acme_agent", None, one) == "acme_agent"
    assert served_by("acme_agent", "acme_agent.1", one) == "acme_agent"  # no router in front: header ignored
    assert served_by("acme_agent", "acme_agent.1", REPLICAS) == "acme_agent.1"
    assert served_by("acme_agent", "other.0", REPLICAS) is None  # not one of its replicas
    assert served_by("acme_agent", None, REPLICAS) is None
    assert served_by("acme_agent", None, {}) == "acme_agent"  # nothing known: the agent alone


def test_counts_keep_idle_replicas_and_rollouts_no_replica_answered() -> None:
    served = [("acme_agent", "acme_agent.1", False), ("acme_agent", None, True), ("acme_agent", "acme_agent.1", True)]
    counts = replica_counts(served, REPLICAS, 2.0)
    assert [(c["replica"], c["rollouts"], c["failed"]) for c in counts] == [
        ("acme_agent.0", 0, 0),
        ("acme_agent.1", 2, 1),
        (None, 1, 1),
    ]
    assert counts[1]["rollouts_per_s"] == 1.0 and counts[2]["node"] is None


def test_the_default_bound_is_sized_to_the_agent_replicas() -> None:
    assert default_max_rollouts(REPLICAS) == 2 * ROLLOUTS_PER_AGENT_REPLICA
    assert default_max_rollouts({"a": {"a": "local"}, "b": {"b": "local"}}) == 2 * ROLLOUTS_PER_AGENT_REPLICA
    assert default_max_rollouts({}) == ROLLOUTS_PER_AGENT_REPLICA


def test_the_replica_table_shows_each_replica_its_node_and_rate() -> None:
    console = Console(width=120, record=True)
    console.print(replica_table(replica_counts([("acme_agent", "acme_agent.0", False)] * 3, REPLICAS, 1.5), 64))
    text = console.export_text()
    assert "at most 64 rollouts in flight" in text
    assert "acme_agent.0" in text and "10.0.0.7 (3f2a9c1e)" in text and "2.00" in text
    assert "acme_agent.1" in text and "10.0.0.8 (77ab01cd)" in text


def test_the_replica_table_is_printed_only_when_it_says_more_than_the_row_table() -> None:
    """One replica per agent on this host: the row table already says it all (``--json`` still has
    the counts); two replicas, or replicas on nodes, get the table."""
    results = [RolloutResult(0, k, 1, "acme_agent", 1.0, 0.1, None) for k in range(2)]
    stats = row_stats(results)
    summary = summarize(stats, results, 1.0)
    local = {"acme_agent": {"acme_agent": "local"}, "other_agent": {"other_agent": "local"}}
    served = [("acme_agent", "acme_agent", False), ("other_agent", "other_agent", False)]
    texts = []
    for replicas, rows in ((local, served), (REPLICAS, [("acme_agent", "acme_agent.0", False)] * 2)):
        console = Console(width=120, record=True)
        print_report(console, stats, summary, replicas=replica_counts(rows, replicas, 1.0), bound=64)
        texts.append(console.export_text())
    assert "agent replicas" not in texts[0] and "rows with GRPO signal" in texts[0]
    assert "agent replicas (at most 64 rollouts in flight)" in texts[1] and "acme_agent.1" in texts[1]
