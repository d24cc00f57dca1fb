"""k samples per row over real loopback HTTP: rewards, latencies, per-rollout errors, bounded concurrency."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from fastapi import FastAPI, HTTPException
from fastapi.responses import JSONResponse, Response

from gym_runtime.rollouts.rows import DatasetRow
from gym_runtime.rollouts.sampler import sample_rows
from gym_runtime.rollouts.verdict import BAD_REWARD, AgentFacts
from tests.helpers.loopback_app import serving

STATE = {"in_flight": 0, "peak": 0, "calls": 0}
# an upstream chain's message whose last words come after 500 characters of prefixes
LONG_WORDS = "model server 'policy_model' (http://x/v1/responses) answered HTTP 502: " * 8 + "VLLM'S OWN WORDS"
NODE_LOST_MESSAGE = (
    "a: node 10.0.0.7 (3f2a9c1e) was lost while replica 1 of server instance 'a' was answering "
    "POST /run; it got no answer"
)


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
            if kind.startswith("raw:"):  # a reward JSON can hold but a number cannot be: NaN, null, "1"
                return Response('{"reward": ' + kind[4:] + "}", media_type="application/json")
            if kind == "counted":
                return {
                    "reward": 5.0,
                    "unknown_tool_calls": 2,
                    "invalid_tool_arguments": 1,
                    "context_overflow_stops": 1,
                }
            if kind == "builtin_bad_reward":
                return JSONResponse(
                    {
                        "error": {
                            "type": "bad_reward",
                            "message": "upstream calc (http://x/verify) "
                            "answered /verify with an unusable reward: reward is NaN",
                        }
                    },
                    502,
                )
            if kind == "tool_parser":  # the built-in agent passing on its model server's named 502
                return JSONResponse(
                    {
                        "error": {
                            "type": "tool_parser_missing",
                            "message": LONG_WORDS,
                            "counters": {"aborted_calls": 2, "bogus": 9, "unknown_tool_calls": -1},
                        }
                    },
                    502,
                )
            if kind == "long_502":
                return JSONResponse({"error": {"type": "upstream_error", "message": LONG_WORDS}}, 502)
            if kind == "slow":
                await asyncio.sleep(5)
            if kind == "node_lost":  # the answer of the agent's stable address (placement ray) after a node's loss
                return JSONResponse(
                    {
                        "error": {
                            "code": "GR-ROLLOUT-NODE-LOST",
                            "message": NODE_LOST_MESSAGE,
                            "node": "10.0.0.7 (3f2a9c1e)",
                            "instance": "a",
                            "replica": 1,
                            "retried": False,
                        }
                    },
                    502,
                )
            return {"reward": float(STATE["calls"] % 2) if kind == "varies" else 1.0}
        finally:
            STATE["in_flight"] -= 1

    return app


@pytest.fixture(scope="module")
def agent_url() -> Iterator[str]:
    with serving(make_agent()) as url:
        yield url


def rows(*kinds: str, agent: str = "a") -> list[DatasetRow]:
    return [
        DatasetRow(i, i + 1, agent, {"kind": k, "agent_ref": {"type": "responses_api_agents", "name": agent}})
        for i, k in enumerate(kinds)
    ]


def test_samples_rewards_errors_and_bound(agent_url: str) -> None:
    seen = []
    STATE.update(peak=0, calls=0)
    results = asyncio.run(
        sample_rows(
            rows("const", "varies", "boom", "noreward"),
            {"a": agent_url},
            samples=3,
            concurrency=2,
            on_result=seen.append,
        )
    )
    assert len(results) == len(seen) == 12 and STATE["calls"] == 12
    assert [(r.row, r.sample) for r in results] == [(i, k) for i in range(4) for k in range(3)]
    assert STATE["peak"] <= 2
    assert all(r.reward == 1.0 and r.error is None and r.latency_s > 0 for r in results[:3])
    assert {r.error["code"] for r in results[6:9]} == {"GR-ROLLOUT-HTTP"}
    assert {r.error["code"] for r in results[9:]} == {BAD_REWARD} and results[9].reward is None
    assert results[9].error["message"] == "agent 'a' answered an unusable reward: the answer has no 'reward' field"
    assert results[6].line == 3 and results[6].agent == "a"


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        ("NaN", "reward is NaN, not a finite number"),
        ("Infinity", "reward is Infinity, not a finite number"),
        ("null", "reward is null"),
        ('"1.0"', "reward is str '1.0', not a number"),
        ("true", "reward is bool True, not a number"),
    ],
)
def test_an_unusable_reward_is_a_row_error_naming_the_server_and_value(agent_url: str, raw: str, said: str) -> None:
    facts = {"a": AgentFacts("calc", (0.0, 1.0))}
    [r] = asyncio.run(sample_rows(rows(f"raw:{raw}"), {"a": agent_url}, samples=1, concurrency=1, facts=facts))
    assert r.reward is None and r.error == {
        "code": BAD_REWARD,
        "message": f"agent 'a' (resources server 'calc') answered an unusable reward: {said}",
    }


def test_counters_overflow_range_and_the_builtin_agents_bad_reward(agent_url: str) -> None:
    facts = {"a": AgentFacts("calc", (0.0, 1.0))}
    counted, builtin = asyncio.run(
        sample_rows(rows("counted", "builtin_bad_reward"), {"a": agent_url}, samples=1, concurrency=1, facts=facts)
    )
    assert (
        counted.reward,
        counted.error,
        counted.unknown_tool_calls,
        counted.invalid_tool_arguments,
        counted.context_overflow,
        counted.out_of_range,
    ) == (5.0, None, 2, 1, True, True)
    assert builtin.error["code"] == BAD_REWARD and "reward is NaN" in builtin.error["message"]
    [plain] = asyncio.run(sample_rows(rows("const"), {"a": agent_url}, samples=1, concurrency=1))
    assert (plain.unknown_tool_calls, plain.context_overflow, plain.out_of_range) == (None, False, False)


def test_a_node_lost_under_the_agent_is_the_rows_error_with_the_message_intact(agent_url: str) -> None:
    from gym_runtime.rollouts.stats import row_stats, summarize

    results = asyncio.run(sample_rows(rows("node_lost", "const"), {"a": agent_url}, samples=1, concurrency=1))
    assert results[0].error == {"code": "GR-ROLLOUT-NODE-LOST", "message": NODE_LOST_MESSAGE}
    assert results[1].error is None
    assert summarize(row_stats(results), results, 1.0).failures_by_code == {"GR-ROLLOUT-NODE-LOST": 1}


def test_unknown_agent_is_a_per_rollout_error() -> None:
    [r] = asyncio.run(sample_rows(rows("const", agent="ghost"), {}, samples=1, concurrency=1))
    assert r.error["code"] == "GR-ROLLOUT-AGENT-REF" and r.reward is None


def test_an_agent_error_keeps_its_whole_message_its_class_and_its_counters(agent_url: str) -> None:
    """Case C40: a named 502 of the built-in agent is its own row class, with the upstream's words
    whole; the counters it reports beside the error are kept (known names, counts only)."""
    named, generic = asyncio.run(
        sample_rows(rows("tool_parser", "long_502"), {"a": agent_url}, samples=1, concurrency=2)
    )
    assert named.error == {"code": "GR-ROLLOUT-TOOL-PARSER", "message": f"a: {LONG_WORDS}"}
    assert named.aborted_calls == 2 and named.unknown_tool_calls is None
    assert generic.error["code"] == "GR-ROLLOUT-HTTP" and generic.error["message"].endswith("VLLM'S OWN WORDS")


def test_a_rollout_past_its_deadline_is_named(agent_url: str) -> None:
    [r] = asyncio.run(sample_rows(rows("slow"), {"a": agent_url}, samples=1, concurrency=1, timeout_s=0.5))
    assert r.error["code"] == "GR-ROLLOUT-DEADLINE" and "within the rollout deadline of 0.5s" in r.error["message"]
