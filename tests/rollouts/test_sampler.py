"""k samples per row over real loopback HTTP: rewards, latencies, per-rollout errors, bounded concurrency."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn
from fastapi import FastAPI, HTTPException

from gym_runtime.rollouts.rows import DatasetRow
from gym_runtime.rollouts.sampler import NO_REWARD, sample_rows

STATE = {"in_flight": 0, "peak": 0, "calls": 0}


def make_agent() -> FastAPI:
    app = FastAPI()

    @app.post("/run")
    async def run(body: dict) -> dict:
        STATE["calls"] += 1
        STATE["in_flight"] += 1
        STATE["peak"] = max(STATE["peak"], STATE["in_flight"])
        try:
            await asyncio.sleep(0.02)
            kind = body["kind"]
            if kind == "boom":
                raise HTTPException(500, "verify crashed")
            if kind == "noreward":
                return {"response": {}}
            return {"reward": float(STATE["calls"] % 2) if kind == "varies" else 1.0}
        finally:
            STATE["in_flight"] -= 1

    return app


@pytest.fixture(scope="module")
def agent_url() -> Iterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(make_agent(), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(5)


def rows(*kinds: str, agent: str = "a") -> list[DatasetRow]:
    return [DatasetRow(i, i + 1, agent, {"kind": k, "agent_ref": {"type": "responses_api_agents", "name": agent}})
            for i, k in enumerate(kinds)]


def test_samples_rewards_errors_and_bound(agent_url: str) -> None:
    seen = []
    STATE.update(peak=0, calls=0)
    results = asyncio.run(sample_rows(rows("const", "varies", "boom", "noreward"), {"a": agent_url}, samples=3,
                                      concurrency=2, on_result=seen.append))
    assert len(results) == len(seen) == 12 and STATE["calls"] == 12
    assert [(r.row, r.sample) for r in results] == [(i, k) for i in range(4) for k in range(3)]
    assert STATE["peak"] <= 2
    assert all(r.reward == 1.0 and r.error is None and r.latency_s > 0 for r in results[:3])
    assert {r.error["code"] for r in results[6:9]} == {"GR-ROLLOUT-HTTP"}
    assert {r.error["code"] for r in results[9:]} == {NO_REWARD} and results[9].reward is None
    assert results[6].line == 3 and results[6].agent == "a"


def test_unknown_agent_is_a_per_rollout_error() -> None:
    [r] = asyncio.run(sample_rows(rows("const", agent="ghost"), {}, samples=1, concurrency=1))
    assert r.error["code"] == "GR-ROLLOUT-AGENT-REF" and r.reward is None
