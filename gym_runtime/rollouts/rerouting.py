"""Run-level agent routing: the top-level config keys ``agent_name``, ``agent_map`` and ``fan_out``.

They are settings of a collection run, not of a server: Gym's collector reads them from its global
config (``ng_collect_rollouts +agent_name=...``), and a dry-run from the merged config, overrides
included (``gym-runtime dry-run ... agent_name=<agent>``). What they mean depends on the Gym release
line (``GymRelease.rows_rerouted_by_agent_map``):

* 0.2 to 0.5 (NeMo Gym 0.4.0 ``rollout_collection.py``): ``agent_name`` names the agent of every
  row that has no ``agent_ref``; a row that has one keeps it. ``agent_map`` and ``fan_out`` are not
  read.
* 0.6 and later (NeMo Gym 0.6.0 and 0.7.0 ``RolloutCollectionConfig``, ``_preprocess_raw_rows``):
  ``agent_name`` is shorthand for ``agent_map._default`` (both set to different agents: refused).
  A row's *basis* is its ``agent_ref.name``, else its ``task_source``. Precedence:
  ``agent_map[agent_ref.name]`` > ``agent_map[task_source]`` > ``agent_map._default`` > the row's
  own ``agent_ref`` > ``task_source`` resolution; a re-routed row is stamped
  ``agent_ref: {name: <agent>}``. ``fan_out[basis]`` (a non-empty list of distinct agents) runs the
  row once per listed agent, each copy stamped with its agent; it wins over ``agent_map``. Under 0.7
  a row an environment server takes by its taskset, or under ``environment_routing_mode: legacy``,
  is left as it is (:class:`gym_runtime.rollouts.routing.Routing` decides which rows those are).

``fan_out`` multiplies the rows of a dry-run (each copy is a row of the report, under its agent);
``/rollouts/run`` answers one result per row it is sent, so it applies ``agent_name`` and
``agent_map`` but not ``fan_out``: a caller sends one row per agent (docs/rollouts.md).

A setting that is not what the line reads (a wrong type, an empty or repeated ``fan_out`` list,
``agent_name`` against ``agent_map._default``, an agent that is not configured) is a
:class:`Problem`: the dry-run's configuration error before anything starts, ``up``'s warning at
start, and every ``/rollouts/run`` row's error (:func:`violations`). Under 0.2 to 0.5 an
``agent_map`` or ``fan_out`` that is set is said to be unread (:attr:`Rerouting.unread`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from gym_runtime.errors import Violation
from gym_runtime.rollouts.tasks import TASK_SOURCE

DEFAULT = "_default"
CODE = "GR-CONFIG-AGENT-ROUTING"


@dataclass(frozen=True)
class Problem:
    """A run-level routing setting the line cannot use: ``key`` (the config path), what is wrong, the fix."""

    key: str
    message: str
    hint: str
    also: str | None = None  # a second key at fault, whose file is named too


@dataclass(frozen=True)
class Rerouting:
    """The run-level routing of one environment (module doc). ``agent_map`` maps a basis (or
    :data:`DEFAULT`) to an agent; ``overrides``: the map re-routes rows that name an agent (0.6
    and later), else it only fills rows that name none; ``fan_out`` maps a basis to its agents."""

    agent_map: Mapping[str, str] = field(default_factory=dict)
    fan_out: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    overrides: bool = False
    problems: tuple[Problem, ...] = ()
    default_key: str = "agent_name"  # where the `_default` entry was set
    unread: tuple[str, ...] = ()  # keys set that the line does not read (0.2 to 0.5: agent_map, fan_out)

    @classmethod
    def from_config(cls, data: Mapping[str, Any], by_map: bool) -> Rerouting:
        """The settings of merged config ``data``; ``by_map``: the line reads ``agent_map`` and
        ``fan_out`` (0.6 and later), else ``agent_name`` alone."""
        problems: list[Problem] = []
        name = data.get("agent_name")
        if name is not None and not _agent(name):
            problems.append(
                Problem("agent_name", f"must name an agent instance, got {name!r}", "write agent_name=<agent instance>")
            )
            name = None
        if not by_map:
            unread = tuple(k for k in ("agent_map", "fan_out") if data.get(k) is not None)
            return cls({DEFAULT: name} if name else {}, {}, False, tuple(problems), unread=unread)
        default_key = "agent_name" if name is not None else f"agent_map.{DEFAULT}"
        routes: dict[str, str] = {}
        for key, agent in _mapping(data, "agent_map", problems).items():
            if _agent(agent):
                routes[key] = agent
            else:
                problems.append(
                    Problem(
                        f"agent_map.{key}",
                        f"must name an agent instance, got {agent!r}",
                        "write <row agent or task_source>: <agent instance>",
                    )
                )
        if name is not None:
            if routes.get(DEFAULT, name) != name:
                problems.append(
                    Problem(
                        "agent_name",
                        f"names {name!r}, while agent_map._default names {routes[DEFAULT]!r}",
                        "set only one of them",
                        also=f"agent_map.{DEFAULT}",
                    )
                )
            routes[DEFAULT] = name
        fans: dict[str, tuple[str, ...]] = {}
        for key, agents in _mapping(data, "fan_out", problems).items():
            where = f"fan_out.{key}"
            if not isinstance(agents, list) or not agents or not all(_agent(a) for a in agents):
                problems.append(
                    Problem(
                        where,
                        f"must be a non-empty list of agent instances, got {agents!r}",
                        "list the agents every matching row runs on; an empty list would drop every such row",
                    )
                )
            elif len(set(agents)) < len(agents):
                twice = sorted({a for a in agents if agents.count(a) > 1})
                problems.append(
                    Problem(
                        where,
                        f"lists the same agent more than once: {', '.join(twice)}",
                        "list each agent once (each runs every matching row already)",
                    )
                )
            else:
                fans[key] = tuple(agents)
        return cls(routes, fans, True, tuple(problems), default_key)

    def destinations(self) -> Iterator[tuple[str, str]]:
        """``(config path, agent)`` of every agent the settings route to."""
        for key, agent in self.agent_map.items():
            yield (self.default_key if key == DEFAULT else f"agent_map.{key}"), agent
        for key, agents in self.fan_out.items():
            yield from ((f"fan_out.{key}", a) for a in agents)

    def mapped(self, row: Mapping[str, Any]) -> str | None:
        """The agent the settings send ``row`` to, or None when the row keeps its own route."""
        if not self.overrides:  # 0.4.0: `row.setdefault("agent_ref", {"name": agent_name})`
            return self.agent_map.get(DEFAULT) if "agent_ref" not in row else None
        for key in (ref_name(row), row.get(TASK_SOURCE)):
            if isinstance(key, str) and key in self.agent_map:
                return self.agent_map[key]
        return self.agent_map.get(DEFAULT)

    def fan_key(self, row: Mapping[str, Any]) -> str | None:
        """The ``fan_out`` key ``row`` matches (its basis: ``agent_ref.name``, else ``task_source``), or None."""
        name = ref_name(row)
        basis = name if name is not None else row.get(TASK_SOURCE)
        return basis if isinstance(basis, str) and basis in self.fan_out else None

    def fanned(self, row: Mapping[str, Any]) -> tuple[str, ...] | None:
        """The agents ``row`` runs on once each (``fan_out`` of its :meth:`fan_key`), or None."""
        key = self.fan_key(row)
        return self.fan_out[key] if key is not None else None


def missing_agent_hint(by_map: bool) -> str:
    """The fix for a row without ``agent_ref``: name one, or the override ``agent_name`` (which
    from 0.6 on sends every row to that agent)."""
    return 'add "agent_ref": {"type": "responses_api_agents", "name": "<agent>"}' + (
        ' (or "task_source": "<the instance declaring its dataset>"), or run every row on one agent with '
        "the override agent_name=<agent>"
        if by_map
        else ", or give every row without one an agent with the override agent_name=<agent>"
    )


def fan_copy(row: Mapping[str, Any], agent: str) -> dict[str, Any]:
    """The copy of ``row`` that runs on ``agent``: the row itself when it names that agent already
    (its ``agent_ref`` kept whole, as Gym keeps it), else the row with ``agent_ref: {name: agent}``."""
    return dict(row) if ref_name(row) == agent else {**row, "agent_ref": {"name": agent}}


def ref_name(row: Mapping[str, Any]) -> Any:
    """``row``'s ``agent_ref.name``, or None."""
    ref = row.get("agent_ref")
    return ref.get("name") if isinstance(ref, dict) else None


def violations(problems: tuple[Problem, ...], unread: tuple[str, ...], sources: Any) -> list[Violation]:
    """``problems``, then one violation per key the line does not read (``unread``), as
    :data:`CODE` violations naming the file each key came from (``sources``: a
    :class:`~gym_runtime.config.sources.Sources`)."""
    out = [
        Violation(
            CODE,
            p.message + (f" (set in {sources.of(p.also)})" if p.also and sources.of(p.also) else ""),
            file=sources.of(p.key),
            key=p.key,
            hint=p.hint,
        )
        for p in problems
    ]
    return out + [
        Violation(
            CODE,
            "is not read by this Gym release line (0.6 and later read it)",
            file=sources.of(k),
            key=k,
            hint="route rows with agent_ref or agent_name",
        )
        for k in unread
    ]


def _agent(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


def _mapping(data: Mapping[str, Any], key: str, problems: list[Problem]) -> dict[str, Any]:
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        problems.append(
            Problem(
                key,
                f"must be a mapping, got {type(value).__name__}",
                f"write {key}: {{<row agent or task_source>: ...}}",
            )
        )
        return {}
    return {str(k): v for k, v in value.items()}
