"""Which server a dataset row is sent to, under the Gym release the environment runs (docs/architecture.md §9).

The 0.4 line (NeMo Gym 0.4.0 ``nemo_gym/rollout_collection.py``): a row names its agent with
``agent_ref`` and goes to that agent's ``/run``. Later lines, asked of the release profile:

* ``task_source`` (0.6 and later, ``GymRelease.rows_name_task_source``): a row without ``agent_ref``
  may name the config instance that declares its dataset; it runs on that agent, or on the one
  agent whose ``resources_server`` is that resources server (a ``datasets[].agent`` pin on the
  declaring instance chooses among several). NeMo Gym 0.7.0 ``global_config.py``
  ``resolve_dataset_agent``, ``rollout_collection.py`` ``resolve_task_sources``.
* environment servers (0.7 and later, ``GymRelease.rows_through_environment_servers``): the
  collector reaches agents only through the environment server that fronts them (NeMo Gym 0.7.0
  ``rollout_collection.py``: ``_environment_servers_by_agent``,
  ``_environment_server_for_config_row``, ``_run_examples_with_metadata``). An environment server
  fronts every agent it references: its ``agent_server`` (whose ``type`` may be left out) and any
  top-level field ``{type: responses_api_agents, name}`` (``environment_server_agent_refs``). A row
  goes to

  1. the server a ``_ng_environment_server`` stamp names (the row's agent must be one of its agents);
  2. for a materialized task (``task_id: {taskset, task_id}`` plus ``task_input``), the server
     ``environment_server_routes[taskset]`` names, as an episode request (:mod:`.tasks`);
  3. for a flat row, by ``environment_routing_mode`` (a top-level key): ``agent`` (default) the one
     server fronting its agent (several: ambiguous, an error), ``legacy`` the server
     ``environment_server_name`` names, ``taskset`` none (flat rows are refused).

  An agent that no environment server fronts is sent its rows directly, which is what the
  ``legacy_agent`` relay Gym generates for such an agent does (it relays ``/run`` unread), unless
  the config sets ``error_on_agent_without_environment_server: true`` (Gym's switch): then the row is
  refused.

The run-level settings ``agent_name``, ``agent_map`` and ``fan_out`` may first re-route a row to
another agent, or run it on several, by the line's rules (:mod:`.rerouting`;
``GymRelease.rows_rerouted_by_agent_map``); under 0.7 a materialized task, and every flat row under
``environment_routing_mode: legacy``, is left as it is. A row ``fan_out`` would copy is refused by
:meth:`Routing.route` unless it is given the copy's agent (``/rollouts/run`` answers one result per
row: its caller sends one row per agent).

A row that cannot be routed is a :class:`RouteError` naming what is wrong and the fix: a dataset
error before ``dry-run`` starts anything (:mod:`.rows`), a row error of ``/rollouts/run``
(:mod:`.dispatch`).

The module is long because each Gym line's routing rules (``agent_ref``, ``task_source``,
environment servers in front of agents) are one decision, checked against each other before
anything starts.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gym_runtime.rollouts.rerouting import Problem, Rerouting, fan_copy, missing_agent_hint, violations
from gym_runtime.rollouts.tasks import ENVIRONMENT_SERVER_STAMP, TASK_SOURCE, is_materialized, materialized_taskset

AGENT_TYPE = "responses_api_agents"
RESOURCES_TYPE = "resources_servers"
ENVIRONMENT_TYPE = "environment_servers"
ROUTING_MODES = ("agent", "legacy", "taskset")
# the server types a row is POSTed to: its agent, or the environment server fronting it
ROLLOUT_TARGETS = (AGENT_TYPE, ENVIRONMENT_TYPE)


class RouteError(Exception):
    """A row that cannot be routed: ``kind`` is ``agent`` (its agent cannot be told: a bad
    ``agent_ref`` or ``task_source``) or ``environment`` (no environment server can take it); ``key``
    the row field at fault; ``hint`` the fix."""

    def __init__(self, kind: str, message: str, key: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.kind, self.message, self.key, self.hint = kind, message, key, hint


@dataclass(frozen=True)
class Route:
    """Where one row goes: ``server`` (the instance POSTed to: the agent, or the environment server
    fronting it), ``agent`` (the agent the result counts for; for a materialized task, the
    environment server's attributed agent, else the environment server itself), ``environment_server``
    and ``result_type`` (its implementation; both None when the row goes to an agent),
    ``episode`` (the body is an episode request, :func:`gym_runtime.rollouts.tasks.episode_request`)
    and ``agent_ref`` (a ``task_source`` row's resolved agent, stamped on the body as Gym's
    collector does; None when the row names its agent itself)."""

    server: str
    agent: str
    environment_server: str | None = None
    result_type: str | None = None
    episode: bool = False
    agent_ref: str | None = None


def _only(value: Any) -> tuple[str, Any] | None:
    """``(key, value)`` of a one-key mapping, else None."""
    if isinstance(value, dict) and len(value) == 1:
        return next(iter(value.items()))
    return None


def _inner(data: Mapping[str, Any], name: str) -> tuple[str, str, dict[str, Any]] | None:
    """``(server type, implementation, config)`` of top-level instance ``name`` in ``data``."""
    outer = _only(data.get(name))
    inner = _only(outer[1]) if outer else None
    if outer is None or inner is None or not isinstance(inner[1], dict):
        return None
    return outer[0], inner[0], inner[1]


def fronted_agents(config: Mapping[str, Any]) -> list[str]:
    """The agents an environment server's ``config`` references (NeMo Gym 0.7.0
    ``environment_server_agent_refs``): ``agent_server`` (its ``type`` may be left out) and every
    top-level field ``{type: responses_api_agents, name}``, in field order."""
    out = []
    for field, ref in config.items():
        if isinstance(ref, dict) and (
            ref.get("type") == AGENT_TYPE or (field == "agent_server" and ref.get("type") is None)
        ):
            if isinstance(ref.get("name"), str) and ref["name"] not in out:
                out.append(ref["name"])
    return out


def attributed_agent(config: Mapping[str, Any]) -> str | None:
    """The agent an environment server's results count for: its ``agent_server``, or the only
    agent it references (NeMo Gym 0.7.0 ``environment_server_attributed_agent``)."""
    ref = config.get("agent_server")
    if isinstance(ref, dict) and isinstance(ref.get("name"), str):
        return ref["name"]
    agents = fronted_agents(config)
    return agents[0] if len(agents) == 1 else None


class Routing:
    """The routing rules of one environment (see the module doc). ``data`` is the resolved config,
    ``task_source`` / ``environment_servers`` whether the release line has them, ``by_map`` whether
    it reads ``agent_map`` and ``fan_out`` (:meth:`from_config` asks the profile). ``problems``: the
    run-level settings it cannot use (:class:`~gym_runtime.rollouts.rerouting.Problem`, a setting
    routing to no configured agent included); while there are any, every row's route is refused."""

    def __init__(
        self,
        data: Mapping[str, Any],
        *,
        task_source: bool = False,
        environment_servers: bool = False,
        by_map: bool = False,
    ) -> None:
        self.data = data
        self.task_source, self.through_environment_servers = task_source, environment_servers
        typed = {n: t for n in data if isinstance(n, str) and (t := _inner(data, n)) is not None}
        self.agents = sorted(n for n, t in typed.items() if t[0] == AGENT_TYPE)
        self.environment = {n: t for n, t in typed.items() if t[0] == ENVIRONMENT_TYPE} if environment_servers else {}
        self.resources = {n for n, t in typed.items() if t[0] == RESOURCES_TYPE}
        self.fronting: dict[str, list[str]] = {}
        for name, (_, _, cfg) in self.environment.items():
            for agent in fronted_agents(cfg):
                self.fronting.setdefault(agent, []).append(name)
        self.mode = data.get("environment_routing_mode") or "agent"
        routes = data.get("environment_server_routes")
        self.routes: Mapping[str, Any] = routes if isinstance(routes, dict) else {}
        self.strict = data.get("error_on_agent_without_environment_server") is True
        self.rerouting = Rerouting.from_config(data, by_map)
        self.problems = self.rerouting.problems + tuple(
            Problem(
                where, f"routes to {agent!r}, which is not a configured {AGENT_TYPE} instance", self._agents_hint(agent)
            )
            for where, agent in self.rerouting.destinations()
            if agent not in self.agents
        )

    @classmethod
    def from_config(cls, merged: Any) -> Routing:
        """The routing of a :class:`~gym_runtime.config.MergedConfig`, under its release profile
        (the 0.4 line's rules when it has none)."""
        release = merged.release
        return cls(
            merged.data,
            task_source=bool(release and release.rows_name_task_source),
            environment_servers=bool(release and release.rows_through_environment_servers),
            by_map=bool(release and release.rows_rerouted_by_agent_map),
        )

    # ------------------------------------------------------------------ run-level re-routing
    def _left_alone(self, row: Mapping[str, Any]) -> bool:
        """True for a row an environment server takes whatever its agent (a materialized task; any
        flat row under ``environment_routing_mode: legacy``): re-routing leaves it as it is."""
        return self.through_environment_servers and (is_materialized(row) or self.mode == "legacy")

    def rerouted(self, row: Mapping[str, Any]) -> bool:
        """True when the run-level settings choose ``row``'s agent (``agent_name``, ``agent_map``,
        ``fan_out``), so its own ``agent_ref`` need not name a configured agent."""
        return not self._left_alone(row) and (
            self.rerouting.mapped(row) is not None or self.rerouting.fanned(row) is not None
        )

    def copies(self, row: Mapping[str, Any]) -> list[tuple[str | None, Mapping[str, Any]]]:
        """``(agent, body)`` of each run of ``row``: one per agent ``fan_out`` lists for it (0.6
        and later; :func:`~gym_runtime.rollouts.rerouting.fan_copy`, routed by ``route(body,
        agent)``), else ``[(None, row)]``."""
        agents = None if self._left_alone(row) else self.rerouting.fanned(row)
        return [(a, fan_copy(row, a)) for a in agents] if agents else [(None, row)]

    def violations(self, sources: Any) -> list[Any]:
        """The problems and unread keys of the run-level settings as ``GR-CONFIG-AGENT-ROUTING``
        violations (:func:`~gym_runtime.rollouts.rerouting.violations`; ``sources``: the merged
        config's)."""
        return violations(self.problems, self.rerouting.unread, sources)

    # ------------------------------------------------------------------ a row's agent
    def agent_of(self, row: Mapping[str, Any], agent: str | None = None) -> tuple[str | None, bool]:
        """``(agent, stamped)``: ``agent`` when given (a ``fan_out`` copy's, already on the row); the
        one ``agent_name`` / ``agent_map`` send the row to; the agent ``agent_ref`` names (checked by
        the caller); else the one its ``task_source`` resolves to; ``(None, False)`` when the row
        names none. ``stamped``: the row is sent with ``agent_ref: {name: agent}``, as Gym's
        collector stamps a re-routed or ``task_source`` row."""
        if agent is not None:
            return agent, False
        mapped = None if self._left_alone(row) else self.rerouting.mapped(row)
        if mapped is not None:
            return mapped, True
        ref = row.get("agent_ref")
        if isinstance(ref, dict) and ref.get("name") is not None:
            if ref.get("type", AGENT_TYPE) != AGENT_TYPE:
                raise RouteError(
                    "agent",
                    f"agent_ref.type must be {AGENT_TYPE!r}, got {ref.get('type')!r}",
                    "agent_ref.type",
                    "leave the type out, or write responses_api_agents",
                )
            return ref.get("name"), False
        if self.task_source and row.get(TASK_SOURCE) is not None:
            return self.resolve_task_source(row[TASK_SOURCE]), True
        return None, False

    def resolve_task_source(self, source: Any) -> str:
        """The agent a ``task_source`` runs on (module doc); raises :class:`RouteError`."""
        hint = (
            "name the agent with agent_ref, or make task_source an agent instance or a resources "
            "server exactly one agent references"
        )
        if not isinstance(source, str) or not source:
            raise RouteError("agent", f"task_source must name a config instance, got {source!r}", TASK_SOURCE, hint)
        kind = _inner(self.data, source)
        if kind is None:
            close = difflib.get_close_matches(source, [n for n in self.data if isinstance(n, str)], n=1)
            raise RouteError(
                "agent",
                f"task_source {source!r} is no server instance of this environment"
                + (f" (did you mean {close[0]!r}?)" if close else ""),
                TASK_SOURCE,
                hint,
            )
        pins = [
            d["agent"] for d in kind[2].get("datasets") or [] if isinstance(d, dict) and isinstance(d.get("agent"), str)
        ]
        pins = list(dict.fromkeys(pins))
        if len(pins) > 1:
            raise RouteError(
                "agent",
                f"task_source {source!r}: its datasets pin several agents ({', '.join(pins)})",
                TASK_SOURCE,
                "name the agent with agent_ref on these rows",
            )
        if kind[0] == AGENT_TYPE:
            if pins and pins[0] != source:
                raise RouteError(
                    "agent",
                    f"task_source {source!r} is an agent whose dataset pins agent {pins[0]!r}",
                    TASK_SOURCE,
                    "drop the dataset's `agent:` pin, or declare the dataset on the resources server",
                )
            return source
        if kind[0] != RESOURCES_TYPE:
            raise RouteError(
                "agent",
                f"task_source {source!r} is a {kind[0]} instance; it must be an agent or a resources server",
                TASK_SOURCE,
                hint,
            )
        users = [
            a
            for a in self.agents
            if isinstance(ref := (_inner(self.data, a) or ("", "", {}))[2].get("resources_server"), dict)
            and ref.get("name") == source
        ]
        if pins:
            if pins[0] not in users:
                raise RouteError(
                    "agent",
                    f"task_source {source!r}: its dataset pins agent {pins[0]!r}, which does not "
                    f"reference it (agents that do: {', '.join(users) or 'none'})",
                    TASK_SOURCE,
                    hint,
                )
            return pins[0]
        if len(users) != 1:
            what = "no agent references it" if not users else f"{len(users)} agents reference it ({', '.join(users)})"
            raise RouteError(
                "agent",
                f"task_source {source!r}: {what}",
                TASK_SOURCE,
                "name the agent with agent_ref, or pin it with `agent:` on the resources server's dataset"
                if users
                else hint,
            )
        return users[0]

    # ------------------------------------------------------------------ a row's server
    def route(self, row: Mapping[str, Any], agent: str | None = None) -> Route:
        """Where ``row`` goes (module doc); ``agent``: the agent of a ``fan_out`` copy
        (:meth:`copies`). The row's ``agent_ref`` type and the agent's existence are checked here
        too. Raises :class:`RouteError`, for every row while the run-level settings have problems."""
        if self.problems:
            first = self.problems[0]
            raise RouteError(
                "agent",
                f"{first.key} {first.message}",
                first.key,
                f"{first.hint}; then start the environment again (up said this at start)",
            )
        if agent is None and not self._left_alone(row) and (key := self.rerouting.fan_key(row)) is not None:
            fans = self.rerouting.fan_out[key]
            raise RouteError(
                "agent",
                f"fan_out.{key} runs this row on {len(fans)} agents ({', '.join(fans)}), and "
                "one row gets one result here",
                f"fan_out.{key}",
                "send one row per agent, each with its agent_ref (dry-run makes the copies itself)",
            )
        if self.through_environment_servers:
            stamped = row.get(ENVIRONMENT_SERVER_STAMP)
            if stamped is not None:
                return self._stamped(row, stamped, agent)
            taskset = materialized_taskset(row)
            if taskset is not None:
                return self._episode(taskset)
            if is_materialized(row):
                raise RouteError(
                    "environment",
                    "a materialized task needs task_id.taskset, a non-empty string",
                    "task_id.taskset",
                    'write "task_id": {"taskset": "<environment>:<taskset>", "task_id": "<id>"}',
                )
        agent, resolved = self.agent_of(row, agent)
        if agent is None:
            raise RouteError(
                "agent",
                "the row names no agent: agent_ref is missing"
                + (" and it has no task_source" if self.task_source else ""),
                "agent_ref",
                f"{missing_agent_hint(self.rerouting.overrides)}; configured agents: "
                f"{', '.join(self.agents) or '(none)'}",
            )
        self._check_agent(agent)
        ref = agent if resolved else None
        if not self.through_environment_servers:
            return Route(agent, agent, agent_ref=ref)
        if self.mode == "legacy":
            return self._via(
                self._named(self.data.get("environment_server_name"), "environment_server_name"), agent, ref
            )
        if self.mode == "taskset":
            raise RouteError(
                "environment",
                "environment_routing_mode is taskset, which takes materialized tasks "
                "(task_id {taskset, task_id} and task_input) only",
                "task_id",
                "materialize the row, or set environment_routing_mode: agent",
            )
        if self.mode != "agent":
            raise RouteError(
                "environment",
                f"environment_routing_mode {self.mode!r} is not one of {', '.join(ROUTING_MODES)}",
                "environment_routing_mode",
                "fix the config's environment_routing_mode",
            )
        servers = self.fronting.get(agent, [])
        if len(servers) > 1:
            raise RouteError(
                "environment",
                f"agent {agent!r} is fronted by several environment servers "
                f"({', '.join(sorted(servers))}), so a row routed by its agent cannot choose",
                "agent_ref",
                "stamp the row with _ng_environment_server, or set "
                "environment_routing_mode: legacy with environment_server_name",
            )
        if not servers:
            if self.strict:
                raise RouteError(
                    "environment",
                    f"no environment server fronts agent {agent!r}, and "
                    "error_on_agent_without_environment_server is set",
                    "agent_ref",
                    f"add an environment server whose agent_server names {agent!r} (Gym's "
                    "environment_servers/legacy_agent relays /run to it)",
                )
            return Route(agent, agent, agent_ref=ref)
        return self._via(servers[0], agent, ref)

    def _check_agent(self, agent: Any) -> None:
        if not isinstance(agent, str) or agent not in self.agents:
            raise RouteError(
                "agent",
                f"agent {agent!r} is not a configured {AGENT_TYPE} instance",
                "agent_ref.name",
                self._agents_hint(agent),
            )

    def _agents_hint(self, agent: Any) -> str:
        close = difflib.get_close_matches(str(agent), self.agents, n=1)
        return (
            f"did you mean {close[0]!r}? " if close else ""
        ) + f"configured agents: {', '.join(self.agents) or '(none)'}"

    def _named(self, name: Any, key: str) -> str:
        if not isinstance(name, str) or name not in self.environment:
            known = ", ".join(sorted(self.environment)) or "(none)"
            close = difflib.get_close_matches(str(name), list(self.environment), n=1)
            raise RouteError(
                "environment",
                f"{key} names {name!r}, which is not an environment server of this environment",
                key,
                (f"did you mean {close[0]!r}? " if close else "") + f"environment servers: {known}",
            )
        return name

    def _via(self, server: str, agent: str, ref: str | None) -> Route:
        return Route(server, agent, server, self.environment[server][1], agent_ref=ref)

    def _stamped(self, row: Mapping[str, Any], name: Any, fanned: str | None) -> Route:
        server = self._named(name, ENVIRONMENT_SERVER_STAMP)
        cfg = self.environment[server][2]
        agent, resolved = self.agent_of(row, fanned)
        agents = fronted_agents(cfg)
        if agent is not None and agents and agent not in agents:
            raise RouteError(
                "environment",
                f"agent {agent!r} is not an agent of environment server {server!r} ({', '.join(agents)})",
                "agent_ref.name",
                f"stamp the environment server that fronts {agent!r}, or drop the stamp",
            )
        label = agent if isinstance(agent, str) else attributed_agent(cfg) or server
        return Route(
            server,
            label,
            server,
            self.environment[server][1],
            materialized_taskset(row) is not None,
            agent_ref=agent if resolved else None,
        )

    def _episode(self, taskset: str) -> Route:
        if taskset not in self.routes:
            raise RouteError(
                "environment",
                f"no environment_server_routes entry for taskset {taskset!r}",
                "task_id.taskset",
                f"add `environment_server_routes: {{{taskset}: <environment "
                f"server>}}` to the config; environment servers: "
                f"{', '.join(sorted(self.environment)) or '(none)'}",
            )
        server = self._named(self.routes[taskset], f"environment_server_routes.{taskset}")
        cfg = self.environment[server][2]
        return Route(server, attributed_agent(cfg) or server, server, self.environment[server][1], True)
