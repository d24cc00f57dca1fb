"""Where a row goes under each Gym release line (gym_runtime/rollouts/routing.py), with NeMo Gym
0.7.0's rules (``rollout_collection.py``: ``_environment_servers_by_agent``,
``_environment_server_for_config_row``; ``global_config.py``: ``environment_server_agent_refs``,
``resolve_dataset_agent``): the environment server fronting the agent, a stamp, a materialized
task's taskset route, the routing modes, ``task_source``; and the 0.4 line's rule, the agent."""

from __future__ import annotations

import pytest

from gym_runtime.gym_release import release_for
from gym_runtime.rollouts.routing import Route, RouteError, Routing

AGENT_REF = {"type": "responses_api_agents", "name": "math_agent"}
ROW = {"responses_create_params": {"input": "2+2?"}, "agent_ref": AGENT_REF}


def agent(name: str, resources: str | None = None, **extra) -> dict:
    inner = {"entrypoint": "app.py", **extra}
    if resources:
        inner["resources_server"] = {"type": "resources_servers", "name": resources}
    return {name: {"responses_api_agents": {"simple_agent": inner}}}


def relay(name: str, agent_name: str, typed: bool = True) -> dict:
    """Gym 0.7.0's `environment_servers/legacy_agent/configs/legacy_agent.yaml` shape."""
    ref = {"type": "responses_api_agents", "name": agent_name} if typed else {"name": agent_name}
    return {
        name: {
            "environment_servers": {
                "legacy_agent": {"entrypoint": "app.py", "agent_server": ref, "max_concurrent_episodes": None}
            }
        }
    }


def config(*blocks: dict, **top) -> dict:
    out: dict = {"math": {"resources_servers": {"math_rs": {"entrypoint": "app.py", "domain": "math"}}}}
    for b in blocks:
        out.update(b)
    out.update(top)
    return out


def gym07(data: dict) -> Routing:
    return Routing(data, task_source=True, environment_servers=True)


def test_a_flat_row_goes_to_the_environment_server_fronting_its_agent() -> None:
    r = gym07(config(agent("math_agent", "math"), relay("math_env", "math_agent", typed=False)))
    assert r.route(ROW) == Route("math_env", "math_agent", "math_env", "legacy_agent")


def test_an_agent_several_servers_front_is_ambiguous_unless_legacy_mode_names_one() -> None:
    blocks = (agent("math_agent", "math"), relay("env_a", "math_agent"), relay("env_b", "math_agent"))
    with pytest.raises(RouteError) as ei:
        gym07(config(*blocks)).route(ROW)
    e = ei.value
    assert e.kind == "environment" and e.key == "agent_ref"
    assert "agent 'math_agent' is fronted by several environment servers (env_a, env_b)" in e.message
    assert "_ng_environment_server" in e.hint and "environment_routing_mode: legacy" in e.hint
    legacy = gym07(config(*blocks, environment_routing_mode="legacy", environment_server_name="env_b"))
    assert legacy.route(ROW).server == "env_b"
    assert gym07(config(*blocks)).route({**ROW, "_ng_environment_server": "env_a"}).server == "env_a"
    with pytest.raises(
        RouteError, match="environment_server_name names 'env_c', which is not an environment server"
    ) as ei:
        gym07(config(*blocks, environment_routing_mode="legacy", environment_server_name="env_c")).route(ROW)
    assert ei.value.hint.startswith("did you mean 'env_b'? environment servers: env_a, env_b")


def test_an_agent_no_server_fronts_is_reached_as_its_relay_would_unless_gym_is_told_to_refuse() -> None:
    assert gym07(config(agent("math_agent", "math"))).route(ROW) == Route("math_agent", "math_agent")
    with pytest.raises(RouteError) as ei:
        gym07(config(agent("math_agent", "math"), error_on_agent_without_environment_server=True)).route(ROW)
    assert ei.value.kind == "environment" and "no environment server fronts agent 'math_agent'" in ei.value.message
    assert "legacy_agent" in ei.value.hint


def test_a_materialized_task_goes_by_its_taskset_route_as_an_episode() -> None:
    data = config(
        agent("math_agent", "math"),
        relay("math_env", "math_agent"),
        environment_server_routes={"math:test": "math_env"},
    )
    task = {"task_id": {"taskset": "math:test", "task_id": "7"}, "task_input": {"question": "2+2?"}}
    assert gym07(data).route(task) == Route("math_env", "math_agent", "math_env", "legacy_agent", episode=True)
    with pytest.raises(RouteError) as ei:
        gym07(data).route({**task, "task_id": {"taskset": "math:train", "task_id": "7"}})
    assert (
        ei.value.key == "task_id.taskset"
        and "no environment_server_routes entry for taskset 'math:train'" in ei.value.message
        and "environment servers: math_env" in ei.value.hint
    )
    with pytest.raises(RouteError, match="needs task_id.taskset, a non-empty string"):
        gym07(data).route({**task, "task_id": {"task_id": "7"}})
    with pytest.raises(RouteError, match="takes materialized tasks"):
        gym07({**data, "environment_routing_mode": "taskset"}).route(ROW)


def test_a_stamp_must_name_an_environment_server_of_the_rows_agent() -> None:
    data = config(agent("math_agent", "math"), agent("other_agent", "math"), relay("math_env", "math_agent"))
    with pytest.raises(RouteError, match="_ng_environment_server names 'math', which is not an environment server"):
        gym07(data).route({**ROW, "_ng_environment_server": "math"})
    with pytest.raises(RouteError, match="agent 'other_agent' is not an agent of environment server 'math_env'"):
        gym07(data).route({**ROW, "agent_ref": {"name": "other_agent"}, "_ng_environment_server": "math_env"})


@pytest.mark.parametrize(
    ("blocks", "source", "want"),
    [
        ((agent("math_agent", "math"),), "math", "math_agent"),  # the one agent of the resources server
        ((agent("math_agent"),), "math_agent", "math_agent"),  # the declaring agent itself
        ((agent("a1", "math"), agent("a2", "math")), "math", "2 agents reference it (a1, a2)"),
        ((agent("a1"),), "math", "no agent references it"),
        ((agent("a1", "math"),), "maths", "is no server instance of this environment (did you mean 'math'?)"),
    ],
)
def test_task_source_resolves_to_the_agent_of_its_dataset(blocks: tuple, source: str, want: str) -> None:
    r = gym07(config(*blocks))
    row = {"responses_create_params": {"input": "2+2?"}, "task_source": source}
    if " " not in want:
        assert r.route(row) == Route(want, want, agent_ref=want)  # stamped on the body, as Gym's collector does
        return
    with pytest.raises(RouteError) as ei:
        r.route(row)
    assert ei.value.key == "task_source" and want in ei.value.message


def test_a_dataset_pin_picks_among_the_agents_of_a_resources_server() -> None:
    data = config(agent("a1", "math"), agent("a2", "math"))
    data["math"]["resources_servers"]["math_rs"]["datasets"] = [{"name": "train", "agent": "a2"}]
    assert gym07(data).route({"responses_create_params": {"input": "x"}, "task_source": "math"}).server == "a2"


def test_the_profile_decides_and_the_04_line_sends_rows_to_their_agent() -> None:
    data = config(agent("math_agent", "math"), relay("math_env", "math_agent"))
    line04 = Routing(data)
    assert line04.route(ROW) == Route("math_agent", "math_agent")
    with pytest.raises(RouteError, match="agent_ref is missing$"):  # no task_source before 0.6
        line04.route({"responses_create_params": {"input": "x"}, "task_source": "math"})

    class Merged:
        def __init__(self, version: str) -> None:
            self.data, self.release = data, release_for(version, "the test")

    assert Routing.from_config(Merged("0.4.0")).route(ROW).server == "math_agent"
    assert Routing.from_config(Merged("0.6.0")).route({"task_source": "math"}).server == "math_agent"
    assert Routing.from_config(Merged("0.7.0")).route(ROW).server == "math_env"
