"""Rows of NeMo Gym 0.7.0 (``task_source``, materialized tasks, ``_ng_*`` stamps) are checked before
anything starts, each routing problem a dataset error naming its line; then they are sent the way
0.7.0's collector sends them (``rollout_collection.py`` ``_run_examples_with_metadata``): a flat row
to the environment server fronting its agent, which relays it (Gym's ``legacy_agent``), a
materialized task as an episode request, over real loopback HTTP. ``mask_sample``,
``failure_kind`` and ``failure_reason`` stay in the result; a masked sample is out of the spread."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import Response

from gym_runtime.errors import DatasetError
from gym_runtime.rollouts.dispatch import run_rows
from gym_runtime.rollouts.routing import Routing
from gym_runtime.rollouts.rows import parse_rows
from gym_runtime.rollouts.sampler import sample_rows
from gym_runtime.rollouts.stats import row_stats, summarize
from tests.helpers.loopback_app import serving
from tests.rollouts.test_routing import agent, config, relay
from tests.rollouts.test_rows import AGENTS, Agent, jsonl

SEEN: dict[str, list] = {"agent": [], "env": []}
TASK = {"task_id": {"taskset": "math:test", "task_id": "7"}, "task_input": {"question": "2+2?", "kind": "ok"}}


def make_agent() -> FastAPI:
    """An agent whose verify answers carry 0.7.0's validity fields when the row asks."""
    app = FastAPI()

    @app.post("/run")
    async def run(body: dict) -> dict:
        SEEN["agent"].append(body)
        if body.get("kind") == "masked":
            return {
                "reward": 0.0,
                "mask_sample": True,
                "failure_kind": "judge_unavailable",
                "failure_reason": "the judge answered 503",
            }
        return {"reward": 1.0 if body.get("kind") != "zero" else 0.0}

    return app


def make_environment(agent_url: str) -> FastAPI:
    """An environment server: an episode request gets a `BaseEpisodeResponse`; anything else is
    relayed to the agent unread, as Gym 0.7.0's `environment_servers/legacy_agent` does."""
    app = FastAPI()

    @app.post("/run")
    async def run(request: Request) -> Response:
        raw = await request.body()
        body = json.loads(raw)
        SEEN["env"].append(body)
        if "episode_id" in body:
            task = body["task"]
            out = {"episode_id": body["episode_id"], "task_id": task["task_id"]}
            if task["task_input"]["kind"] == "fail":
                out["failure"] = {
                    "failure_reason": "sandbox never came up",
                    "terminal": True,
                    "failure_kind": "sandbox_unavailable",
                    "stage": "setup",
                }
            else:
                out["result"] = {"reward": 1.0, "resolved": True}
            return Response(json.dumps(out), media_type="application/json")
        async with httpx.AsyncClient(trust_env=False) as client:
            upstream = await client.post(agent_url + "/run", content=raw, headers={"content-type": "application/json"})
        return Response(upstream.content, status_code=upstream.status_code, media_type="application/json")

    return app


@pytest.fixture(scope="module")
def urls() -> Iterator[dict[str, str]]:
    with serving(make_agent()) as agent_url, serving(make_environment(agent_url)) as env_url:
        yield {"math_agent": agent_url, "math_env": env_url}


@pytest.fixture(autouse=True)
def _clear() -> None:
    SEEN["agent"].clear()
    SEEN["env"].clear()


ROUTING = Routing(
    config(
        agent("math_agent", "math"),
        relay("math_env", "math_agent"),
        environment_server_routes={"math:test": "math_env"},
    ),
    task_source=True,
    environment_servers=True,
)
SPECS = {**AGENTS, "math_agent": Agent("simple_agent")}
FLAT = {
    "responses_create_params": {"input": "2+2?"},
    "agent_ref": {"type": "responses_api_agents", "name": "math_agent"},
}


def test_07_rows_are_accepted_and_routed_when_checked() -> None:
    text = jsonl(
        FLAT,
        {"responses_create_params": {"input": "x"}, "task_source": "math"},
        TASK,
        {**FLAT, "_ng_task_index": 3, "_ng_rollout_id": "run7.task3", "_ng_future_stamp": {"x": 1}},
    )
    rows = parse_rows(text, "rows.jsonl", SPECS, routing=ROUTING)
    assert [(r.agent, r.route.server, r.route.episode) for r in rows] == [
        ("math_agent", "math_env", False),
        ("math_agent", "math_env", False),
        ("math_agent", "math_env", True),
        ("math_agent", "math_env", False),
    ]


def test_routing_and_stamp_problems_are_dataset_errors_naming_the_line() -> None:
    routing = Routing(
        config(agent("math_agent", "math"), relay("env_a", "math_agent"), relay("env_b", "math_agent")),
        task_source=True,
        environment_servers=True,
    )
    text = jsonl(
        FLAT,
        {"responses_create_params": {"input": "x"}, "task_source": "nowhere"},
        {**TASK, "task_id": {"taskset": "math:test"}},
        {**FLAT, "_ng_rollout_index": -1},
        {**TASK, "task_id": {"taskset": "other", "task_id": "1"}},
    )
    with pytest.raises(DatasetError) as ei:
        parse_rows(text, "rows.jsonl", SPECS, routing=routing)
    got = [(v.code, v.file, v.key) for v in ei.value.violations]
    assert got == [
        ("GR-DATASET-ENVIRONMENT-SERVER", "rows.jsonl:1", "agent_ref"),
        ("GR-DATASET-TASK-SOURCE", "rows.jsonl:2", "task_source"),
        ("GR-DATASET-FIELD", "rows.jsonl:3", "task_id.task_id"),
        ("GR-DATASET-FIELD", "rows.jsonl:4", "_ng_rollout_index"),  # routed once its fields are good
        ("GR-DATASET-ENVIRONMENT-SERVER", "rows.jsonl:5", "task_id.taskset"),
    ]
    first = ei.value.violations[0]
    assert "fronted by several environment servers (env_a, env_b)" in first.message and first.hint


def test_without_routing_a_row_still_needs_its_agent_ref() -> None:
    with pytest.raises(DatasetError) as ei:
        parse_rows(jsonl(TASK), "rows.jsonl", SPECS)
    assert {v.key for v in ei.value.violations} == {"responses_create_params", "agent_ref"}


def test_rollouts_go_through_the_environment_server(urls: dict[str, str]) -> None:
    rows = [
        FLAT,
        {"responses_create_params": {"input": "x"}, "task_source": "math", "kind": "masked"},
        TASK,
        {**TASK, "task_input": {"kind": "fail"}},
        {**TASK, "_ng_task_index": 4, "_ng_rollout_index": 2, "_ng_attempt_index": 1},
    ]
    batch = asyncio.run(run_rows(rows, urls, routing=ROUTING))
    flat, masked, episode, failed, stamped = batch.results
    assert flat == {"reward": 1.0, "_ng_environment_server": "math_env", "_ng_result_type": "legacy_agent"}
    assert (
        masked["mask_sample"] is True
        and masked["failure_kind"] == "judge_unavailable"
        and masked["failure_reason"] == "the judge answered 503"
    )
    assert episode == {
        "reward": 1.0,
        "resolved": True,
        "_ng_task_id": TASK["task_id"],
        "_ng_environment_server": "math_env",
        "_ng_result_type": "legacy_agent",
    }
    assert failed["error"] == {
        "code": "GR-ROLLOUT-EPISODE-FAILED",
        "message": "math_env: the episode failed (sandbox_unavailable): sandbox never came up",
        "status": 422,  # terminal: Gym's collector must not try it again, so the row's data
    }
    assert (failed["failure_kind"], failed["failure_reason"], failed["terminal"], failed["stage"]) == (
        "sandbox_unavailable",
        "sandbox never came up",
        True,
        "setup",
    )
    assert stamped["reward"] == 1.0 and batch.agents == ["math_agent"] * 5
    assert len(SEEN["env"]) == 5 and len(SEEN["agent"]) == 2  # every row entered the environment server
    (resolved,) = [b for b in SEEN["agent"] if "task_source" in b]
    assert resolved["agent_ref"] == {"name": "math_agent"}  # task_source resolved and stamped, as Gym does
    episodes = sorted((b for b in SEEN["env"] if "episode_id" in b), key=lambda b: b["episode_id"]["rollout_id"])
    assert [e["episode_id"] for e in episodes] == [
        {"rollout_id": "2-0", "attempt": 0},
        {"rollout_id": "3-0", "attempt": 0},
        {"rollout_id": "4-2", "attempt": 1},
    ]
    assert episodes[0]["task"] == {"task_id": TASK["task_id"], "task_input": TASK["task_input"]}


def test_flat_rows_reach_the_environment_server_with_gym_s_index_stamps(urls: dict[str, str]) -> None:
    """Gym's collector stamps `_ng_task_index` / `_ng_rollout_index` on every row it sends, and
    0.7.0's `single_agent_turn_legacy` reads both (a row without them was a 500, KeyError)."""
    own = {**FLAT, "_ng_task_index": 9, "_ng_rollout_index": 4}
    batch = asyncio.run(run_rows([FLAT, FLAT, own], urls, routing=ROUTING))
    assert [r["reward"] for r in batch.results] == [1.0, 1.0, 1.0]
    sent = sorted((b["_ng_task_index"], b["_ng_rollout_index"]) for b in SEEN["env"])
    assert sent == [(0, 0), (1, 0), (9, 4)]  # row i is task i, rollout 0; a row's own stamps are kept
    SEEN["env"].clear()
    rows = parse_rows(jsonl(FLAT), "rows.jsonl", SPECS, routing=ROUTING)
    asyncio.run(sample_rows(rows, urls, samples=2, concurrency=2))
    assert sorted((b["_ng_task_index"], b["_ng_rollout_index"]) for b in SEEN["env"]) == [(0, 0), (0, 1)]


def test_an_unroutable_row_is_a_row_error_and_the_batch_goes_on(urls: dict[str, str]) -> None:
    rows = [
        {**TASK, "task_id": {"taskset": "nope", "task_id": "1"}},
        FLAT,
        {**FLAT, "agent_ref": {"name": "missing_agent"}},
    ]
    batch = asyncio.run(run_rows(rows, urls, routing=ROUTING))
    nope, ok, missing = batch.results
    assert nope["error"]["code"] == "GR-ROLLOUT-ENVIRONMENT-SERVER" and "math:test" not in nope["error"]["message"]
    assert "no environment_server_routes entry for taskset 'nope'" in nope["error"]["message"]
    assert ok["reward"] == 1.0
    assert missing["error"]["code"] == "GR-ROLLOUT-AGENT-REF" and "'missing_agent'" in missing["error"]["message"]
    gone = asyncio.run(run_rows([FLAT], {"math_agent": urls["math_agent"]}, routing=ROUTING)).results[0]
    assert gone["error"] == {
        "code": "GR-ROLLOUT-ENVIRONMENT-SERVER",
        "message": "the row goes to environment server 'math_env', which is not configured (servers: math_agent)",
        "status": 422,
    }
    down = asyncio.run(run_rows([FLAT], {**urls, "math_env": None}, routing=ROUTING)).results[0]
    assert down["error"]["code"] == "GR-ROLLOUT-NOT-RUNNING" and down["error"]["status"] == 503
    assert "environment server 'math_env', which has no address now" in down["error"]["message"]


def test_dry_run_samples_are_episodes_and_masked_rewards_stay_out_of_the_spread(urls: dict[str, str]) -> None:
    text = jsonl(TASK, {**FLAT, "kind": "masked"}, FLAT)
    rows = parse_rows(text, "rows.jsonl", SPECS, routing=ROUTING)
    results = asyncio.run(sample_rows(rows, urls, samples=2, concurrency=4))
    assert sorted(e["episode_id"]["rollout_id"] for e in SEEN["env"] if "episode_id" in e) == ["0-0", "0-1"]
    masked = [r for r in results if r.row == 1]
    assert all(r.ok and r.mask_sample and r.failure_kind == "judge_unavailable" for r in masked)
    assert {r.environment_server for r in results} == {"math_env"}
    stats = row_stats(results)
    assert (stats[1].masked, stats[1].rewards, stats[1].mean, stats[1].signal) == (2, [], None, None)
    assert (stats[2].masked, stats[2].rewards) == (0, [1.0, 1.0])
    summary = summarize(stats, results, 1.0)
    assert (summary.succeeded, summary.failures, summary.masked, summary.reward_mean) == (6, 0, 2, 1.0)
    line = results[2].to_dict()
    assert (line["mask_sample"], line["failure_reason"], line["environment_server"]) == (
        True,
        "the judge answered 503",
        "math_env",
    )
