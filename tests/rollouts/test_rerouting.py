"""The run-level agent routing a collection reads (gym_runtime/rollouts/rerouting.py): ``agent_name``,
``agent_map``, ``fan_out``, with each Gym line's rules. NeMo Gym 0.4.0 ``rollout_collection.py``:
``agent_name`` fills the rows without ``agent_ref``. NeMo Gym 0.6.0 and 0.7.0
``RolloutCollectionConfig`` / ``_preprocess_raw_rows``: ``agent_name`` is ``agent_map._default``;
``agent_map[agent_ref.name] > agent_map[task_source] > _default > agent_ref > task_source``;
``fan_out[basis]`` runs a row once per agent, ahead of ``agent_map``; a row an environment server
takes by its taskset, or under ``environment_routing_mode: legacy``, is left alone. Rows are then
sent over real loopback HTTP, stamped as Gym's collector stamps them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from fastapi import FastAPI

from gym_runtime.dryrun.run import DryRunRequest, prepare
from gym_runtime.errors import ConfigError, DatasetError
from gym_runtime.gym_release import release_for
from gym_runtime.rollouts.dispatch import run_rows
from gym_runtime.rollouts.routing import Route, RouteError, Routing
from gym_runtime.rollouts.rows import parse_rows
from tests.helpers.loopback_app import serving
from tests.rollouts.test_routing import agent, config, relay
from tests.rollouts.test_rows import Agent, jsonl

PARAMS = {"responses_create_params": {"input": "2+2?"}}
BARE = dict(PARAMS)  # Gym's own example rows: no agent_ref
OLD = {**PARAMS, "agent_ref": {"type": "responses_api_agents", "name": "old_agent"}}
A1 = {**PARAMS, "agent_ref": {"type": "responses_api_agents", "name": "a1"}}
SPECS = {"a1": Agent("simple_agent"), "a2": Agent("simple_agent")}


def two_agents(**top) -> dict:
    return config(agent("a1", "math"), agent("a2", "math"), **top)


def line04(**top) -> Routing:
    return Routing(two_agents(**top))


def line06(**top) -> Routing:
    return Routing(two_agents(**top), task_source=True, by_map=True)


def test_the_04_line_fills_rows_without_an_agent_and_reads_no_map() -> None:
    r = line04(agent_name="a2", agent_map={"a1": "nowhere"}, fan_out={"a1": []})
    assert r.problems == ()  # agent_map and fan_out are not read before 0.6, and said to be unread
    assert r.rerouting.unread == ("agent_map", "fan_out")
    assert r.route(BARE) == Route("a2", "a2", agent_ref="a2")  # stamped, as 0.4.0's setdefault does
    assert r.route(A1) == Route("a1", "a1")  # a row that names its agent keeps it
    assert r.copies(A1) == [(None, A1)]
    with pytest.raises(RouteError) as ei:
        line04().route(BARE)
    assert "give every row without one an agent with the override agent_name=<agent>" in ei.value.hint
    assert "configured agents: a1, a2" in ei.value.hint
    with pytest.raises(RouteError) as ei:
        line06().route(BARE)
    assert "run every row on one agent with the override agent_name=<agent>" in ei.value.hint


def test_from_06_agent_name_re_routes_every_row() -> None:
    r = line06(agent_name="a2")
    assert r.route(A1) == Route("a2", "a2", agent_ref="a2")
    assert r.route(BARE) == Route("a2", "a2", agent_ref="a2")
    assert r.route(OLD) == Route("a2", "a2", agent_ref="a2")  # an agent not configured is re-routed too


def test_agent_map_precedence_row_agent_then_task_source_then_default() -> None:
    r = line06(agent_map={"old_agent": "a1", "math": "a2", "_default": "a1"})
    assert r.route(OLD).agent == "a1"
    both = {**OLD, "task_source": "math"}
    assert r.route(both).agent == "a1"  # the agent name wins over the task_source
    assert r.route({**PARAMS, "task_source": "math"}).agent == "a2"
    assert r.route({**PARAMS, "agent_ref": {"name": "a2"}}).agent == "a1"  # _default re-routes named rows
    no_default = line06(agent_map={"old_agent": "a2"})
    assert no_default.route(A1) == Route("a1", "a1")  # no entry, no _default: the row's own agent


def test_fan_out_runs_a_row_on_each_agent_ahead_of_agent_map() -> None:
    r = line06(fan_out={"old_agent": ["a1", "a2"], "a1": ["a1", "a2"]}, agent_map={"old_agent": "a1"})
    assert r.copies(OLD) == [("a1", {**OLD, "agent_ref": {"name": "a1"}}), ("a2", {**OLD, "agent_ref": {"name": "a2"}})]
    rows = parse_rows(jsonl(OLD, A1), "rows.jsonl", SPECS, routing=r)
    assert [(r.index, r.line, r.agent, r.data["agent_ref"]) for r in rows] == [
        (0, 1, "a1", {"name": "a1"}),
        (1, 1, "a2", {"name": "a2"}),
        (2, 2, "a1", A1["agent_ref"]),
        (3, 2, "a2", {"name": "a2"}),
    ]  # its own agent's copy keeps its agent_ref
    assert all(row.route.agent_ref is None for row in rows)  # each copy carries its agent already
    with pytest.raises(RouteError) as ei:  # /rollouts/run: one result per row, so no copies
        r.route(OLD)
    assert ei.value.key == "fan_out.old_agent" and "runs this row on 2 agents (a1, a2)" in ei.value.message
    assert "send one row per agent" in ei.value.hint


@pytest.mark.parametrize(
    "top, key, words",
    [
        (
            {"agent_name": "a1", "agent_map": {"_default": "a2"}},
            "agent_name",
            "names 'a1', while agent_map._default names 'a2'",
        ),
        ({"fan_out": {"old_agent": []}}, "fan_out.old_agent", "must be a non-empty list"),
        ({"fan_out": {"old_agent": ["a1", "a1"]}}, "fan_out.old_agent", "lists the same agent more than once: a1"),
        ({"agent_map": ["a1"]}, "agent_map", "must be a mapping"),
        ({"agent_map": {"x": 3}}, "agent_map.x", "must name an agent instance"),
        ({"agent_name": "a3"}, "agent_name", "routes to 'a3', which is not a configured"),
        ({"agent_map": {"_default": "a3"}}, "agent_map._default", "routes to 'a3'"),
        ({"fan_out": {"x": ["a1", "b2"]}}, "fan_out.x", "routes to 'b2'"),
    ],
)
def test_settings_the_line_cannot_use_refuse_every_row(top: dict, key: str, words: str) -> None:
    r = line06(**top)
    assert r.problems and r.problems[0].key == key and words in r.problems[0].message
    with pytest.raises(RouteError) as ei:
        r.route(A1)
    assert ei.value.key == key and ei.value.hint.startswith(r.problems[0].hint)


def test_a_re_routed_row_must_still_hold_a_mapping_agent_ref() -> None:
    with pytest.raises(DatasetError) as ei:
        parse_rows(jsonl({**PARAMS, "agent_ref": "a1"}), "rows.jsonl", SPECS, routing=line06(agent_name="a2"))
    (v,) = ei.value.violations
    assert (v.code, v.key, v.message) == ("GR-DATASET-FIELD", "agent_ref", "must be a mapping {type, name}, got str")


def test_an_unknown_destination_under_04_is_named_as_agent_name() -> None:
    (problem,) = line04(agent_name="a11").problems
    assert problem.key == "agent_name" and "did you mean 'a1'?" in problem.hint


def test_rows_an_environment_server_takes_by_taskset_or_legacy_mode_are_left_alone() -> None:
    blocks = (agent("a1", "math"), agent("a2", "math"), relay("env1", "a1"), relay("env2", "a2"))
    data = config(*blocks, environment_server_routes={"math:test": "env1"}, agent_name="a2")
    r = Routing(data, task_source=True, environment_servers=True, by_map=True)
    assert r.route(A1) == Route("env2", "a2", "env2", "legacy_agent", agent_ref="a2")
    task = {"task_id": {"taskset": "math:test", "task_id": "7"}, "task_input": {}}
    assert not r.rerouted(task) and r.route(task).server == "env1"
    legacy = Routing(
        {**data, "environment_routing_mode": "legacy", "environment_server_name": "env1"},
        task_source=True,
        environment_servers=True,
        by_map=True,
    )
    assert not legacy.rerouted(A1) and legacy.route(A1) == Route("env1", "a1", "env1", "legacy_agent")


def test_the_profile_says_which_rules_hold() -> None:
    data = two_agents(agent_name="a2")

    class Merged:
        def __init__(self, version: str) -> None:
            self.data, self.release = data, release_for(version, "the test")

    assert Routing.from_config(Merged("0.4.0")).route(A1).agent == "a1"
    assert Routing.from_config(Merged("0.6.0")).route(A1).agent == "a2"
    assert Routing.from_config(Merged("0.7.0")).route(A1).agent == "a2"


def test_a_re_routed_row_reaches_its_agent_stamped_as_gyms_collector_stamps_it() -> None:
    seen: list[dict] = []
    app = FastAPI()

    @app.post("/run")
    async def run(body: dict) -> dict:
        seen.append(body)
        return {"reward": 1.0}

    with serving(app) as url:
        batch = asyncio.run(run_rows([BARE, OLD], {"a2": url}, routing=line06(agent_name="a2")))
    assert [r.get("reward") for r in batch.results] == [1.0, 1.0] and batch.agents == ["a2", "a2"]
    assert [b["agent_ref"] for b in seen] == [{"name": "a2"}, {"name": "a2"}]


def test_a_dry_run_refuses_bad_settings_before_the_rows_and_limits_input_rows(tmp_path: Path) -> None:
    pkg = Path(__file__).resolve().parents[2] / "examples" / "native-quickstart"
    rows = tmp_path / "rows.jsonl"
    rows.write_text(jsonl(*[{"responses_create_params": {"input": f"q{i}"}} for i in range(3)]))
    with pytest.raises(DatasetError):  # the bundled example's rows need an agent
        prepare(DryRunRequest(pkg, rows))
    name, got, _ = prepare(DryRunRequest(pkg, rows, ["agent_name=arithmetic_agent"], limit=2))
    assert [(r.line, r.agent) for r in got] == [(1, "arithmetic_agent"), (2, "arithmetic_agent")]
    with pytest.raises(ConfigError) as ei:
        prepare(DryRunRequest(pkg, rows, ["agent_name=arithmetic_agnet"]))
    (v,) = ei.value.violations
    assert v.code == "GR-CONFIG-AGENT-ROUTING" and v.key == "agent_name"
    assert v.hint.startswith("did you mean 'arithmetic_agent'?")
    assert v.file is not None and "override" in v.file
    assert ei.value.hint == "fix the keys named, in their file or override; no row was run"
    with pytest.raises(ConfigError) as ei:  # a conflict names where the other key was set too
        prepare(DryRunRequest(pkg, rows, ["agent_name=arithmetic_agent", "agent_map._default=code_lookup_agent"]))
    (v,) = ei.value.violations
    assert (
        v.message == f"names 'arithmetic_agent', while agent_map._default names 'code_lookup_agent' (set in {v.file})"
    )
