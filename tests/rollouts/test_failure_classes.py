"""Every row error code of ``/rollouts/run`` and the dry-run carries the HTTP status a direct
``/run`` would have answered, and so the class a trainer retries it by (docs/rollouts.md, "Failure
classes"; ``gym_runtime/rollouts/failure_class.py``): one case per row of the table, each made by
a real agent answering over loopback HTTP the way that failure reaches the head server (the built-in
agents' typed 502s, a router's own answers, a connection refused, a deadline). The rows of the
environment servers' codes are in tests/rollouts/test_rows_07.py; the built-in servers' own
statuses, through NeMo Gym 0.7.0's collector, in tests/daemon/test_failure_classes_gym07.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from gym_runtime.head.app import HeadBackend, create_app, shutdown_body
from gym_runtime.host.rows import keyed_answer
from gym_runtime.rollouts.dispatch import run_rows
from gym_runtime.rollouts.failure_class import DATA, INFRASTRUCTURE, STATUS, failure_class, with_status
from tests.helpers.loopback_app import serving

AGENT = "acme_agent"


def _typed(kind: str) -> JSONResponse:
    """A built-in agent's typed 502 (``servers/_kit/server.py``)."""
    return JSONResponse({"error": {"type": kind, "message": f"model server 'policy_model' said {kind}"}}, 502)


ANSWERS: dict[str, Any] = {
    "ok": lambda: {"reward": 1.0},
    "http_422": lambda: JSONResponse({"detail": [{"loc": ["body", "responses_create_params"]}]}, 422),
    "http_400": lambda: JSONResponse({"error": {"type": "upstream_error", "message": "prompt too long"}}, 400),
    "http_500": lambda: JSONResponse({"error": {"type": "server_error", "message": "boom"}}, 500),
    "bad_json": lambda: Response("<html>oops</html>", 200, media_type="text/html"),
    "bad_reward": lambda: {"reward": None},
    "model_unavailable": lambda: _typed("model_unavailable"),
    "tool_parser_missing": lambda: _typed("tool_parser_missing"),
    "bad_token_ids": lambda: _typed("bad_token_ids"),
    "reasoning_field_rejected": lambda: _typed("reasoning_field_rejected"),
    "node_lost": lambda: JSONResponse(
        {"error": {"code": "GR-ROLLOUT-NODE-LOST", "message": f"{AGENT}: node 10.0.0.9 was lost"}}, 502
    ),
    "no_replica": lambda: JSONResponse(
        {"error": {"code": "GR-PLACE-NO-REPLICA", "message": f"{AGENT}: no replica is running (waited 30s)"}}, 503
    ),
}


def make_agent() -> FastAPI:
    app = FastAPI()

    @app.post("/run")
    async def run(request: Request) -> Any:
        case = (await request.json())["case"]
        if case == "slow":
            await asyncio.sleep(30)
        return ANSWERS[case]()

    return app


@pytest.fixture(scope="module")
def agent_url() -> Iterator[str]:
    with serving(make_agent()) as url:
        yield url


def row(case: str, agent: str = AGENT) -> dict[str, Any]:
    return {"responses_create_params": {"input": "2+2?"}, "agent_ref": {"name": agent}, "case": case}


# (row, code, status, class) for each case the agent answers
CASES = [
    ("http_422", "GR-ROLLOUT-HTTP", 422, DATA),  # a malformed row, refused by the agent's request model
    ("http_400", "GR-ROLLOUT-HTTP", 400, DATA),  # an upstream refused what the row sent
    ("http_500", "GR-ROLLOUT-HTTP", 500, INFRASTRUCTURE),
    ("bad_json", "GR-ROLLOUT-BAD-JSON", 502, INFRASTRUCTURE),
    ("bad_reward", "GR-ROLLOUT-BAD-REWARD", 502, INFRASTRUCTURE),
    ("model_unavailable", "GR-ROLLOUT-POLICY-UNAVAILABLE", 502, INFRASTRUCTURE),
    ("tool_parser_missing", "GR-ROLLOUT-TOOL-PARSER", 502, INFRASTRUCTURE),
    ("bad_token_ids", "GR-ROLLOUT-TOKEN-IDS", 502, INFRASTRUCTURE),
    ("reasoning_field_rejected", "GR-ROLLOUT-REASONING-FIELD", 502, INFRASTRUCTURE),
    ("node_lost", "GR-ROLLOUT-NODE-LOST", 502, INFRASTRUCTURE),
    ("no_replica", "GR-PLACE-NO-REPLICA", 503, INFRASTRUCTURE),
]


def test_each_agent_answer_keeps_the_status_of_its_class(agent_url: str) -> None:
    batch = asyncio.run(run_rows([row(case) for case, *_ in CASES] + [row("ok")], {AGENT: agent_url}))
    *failed, ok = batch.results
    assert ok == {"reward": 1.0}  # a result is never given a status
    got = [(r["error"]["code"], r["error"]["status"], failure_class(r["error"]["status"])) for r in failed]
    assert got == [(code, status, cls) for _, code, status, cls in CASES]


def test_rows_naming_no_running_agent(agent_url: str) -> None:
    rows = [{"responses_create_params": {"input": "x"}}, row("ok", "nobody"), row("ok"), row("ok", "starting_agent")]
    agents = {AGENT: "http://127.0.0.1:1", "starting_agent": None}  # nothing listens on port 1
    no_ref, unknown, refused, starting = asyncio.run(run_rows(rows, agents)).results
    assert (no_ref["error"]["code"], no_ref["error"]["status"]) == ("GR-ROLLOUT-AGENT-REF", 422)
    assert (unknown["error"]["code"], unknown["error"]["status"]) == ("GR-ROLLOUT-AGENT-REF", 422)
    assert "agent 'nobody', which is not configured" in unknown["error"]["message"]
    assert (refused["error"]["code"], refused["error"]["status"]) == ("GR-ROLLOUT-CONNECT", 502)
    assert (starting["error"]["code"], starting["error"]["status"]) == ("GR-ROLLOUT-NOT-RUNNING", 503)
    assert failure_class(starting["error"]["status"]) == INFRASTRUCTURE
    assert "'starting_agent', which has no address now" in starting["error"]["message"]


def test_a_row_past_the_batch_deadline_is_a_504(agent_url: str) -> None:
    slow, ok = asyncio.run(run_rows([row("slow"), row("ok")], {AGENT: agent_url}, deadline_s=1.0)).results
    assert (slow["error"]["code"], slow["error"]["status"]) == ("GR-ROLLOUT-DEADLINE", 504) and ok["reward"] == 1.0


class _Broken(dict):
    def get(self, *_: Any) -> Any:
        raise RuntimeError("a bug")


def test_a_row_that_cannot_be_dispatched_is_a_500(agent_url: str) -> None:
    (result,) = asyncio.run(run_rows([row("ok")], {AGENT: agent_url}, facts=_Broken({AGENT: None}))).results
    assert (result["error"]["code"], result["error"]["status"]) == ("GR-INTERNAL", 500)


def test_rows_cut_by_the_shutdown_or_the_host_deadline() -> None:
    cut = json.loads(shutdown_body([{"reward": 1.0}, None]))["results"][1]["error"]
    assert (cut["code"], cut["status"]) == ("GR-ROLLOUT-SHUTDOWN", 503)
    rows = [{"_rowidx": 1}, {"_rowidx": 2}]
    for shutdown, code, status in ((True, "GR-ROLLOUT-SHUTDOWN", 503), (False, "GR-ROLLOUT-DEADLINE", 504)):
        (unfinished,) = keyed_answer(rows, [1, 2], [{"reward": 0.0}, None], 60.0, None, shutdown)["unfinished"]
        assert (unfinished["error"]["code"], unfinished["error"]["status"]) == (code, status)


def test_a_body_that_is_no_batch_is_a_400() -> None:
    backend = HeadBackend(
        config_yaml=lambda: None, instances=list, health=lambda: (200, {}), logs=lambda *_: None, agents=dict
    )
    transport = httpx.ASGITransport(app=create_app(backend))

    async def post() -> httpx.Response:
        async with httpx.AsyncClient(transport=transport, base_url="http://head") as client:
            return await client.post("/rollouts/run", json={"rows": []})

    r = asyncio.run(post())
    assert r.status_code == 400 and r.json()["error"]["code"] == "GR-ROLLOUT-BAD-REQUEST"
    assert failure_class(STATUS["GR-ROLLOUT-BAD-REQUEST"]) == DATA


def test_an_episode_failure_is_data_only_when_terminal() -> None:
    error = {"code": "GR-ROLLOUT-EPISODE-FAILED", "message": "math_env: the episode failed: Episode timed out"}
    assert with_status({"error": error, "terminal": False})["error"]["status"] == 502
    assert with_status({"error": error, "terminal": True})["error"]["status"] == 422


@pytest.mark.parametrize("status", [500, 502, 503, 504, 520, 408, 429])
def test_statuses_a_trainer_retries_as_infrastructure(status: int) -> None:
    assert failure_class(status) == INFRASTRUCTURE


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422])
def test_statuses_that_are_the_rows_data(status: int) -> None:
    assert failure_class(status) == DATA
