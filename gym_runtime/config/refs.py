"""Server references: any mapping ``{type: <server_type>, name: <instance>}`` (docs/architecture.md §4).

Gym checks only direct fields of an instance's config; we walk the whole instance config
(nested mappings and lists too), so a reference hidden one level down fails early as well.
An environment server's agent references follow NeMo Gym 0.7.0 ``nemo_gym/global_config.py``
``environment_server_agent_refs``: any top-level field ``{type: responses_api_agents, name}`` (found
by the walk like every reference), and ``agent_server``, whose ``type`` may be left out
(``agent_server: {name: my_agent}`` references the agent ``my_agent``).
Each unknown reference is a violation in :class:`ServerRefNotFoundError` naming the referring
instance, key path and file, the missing ``type/name``, the defined instances of that type, and a
did-you-mean (case C03a).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from gym_runtime.config.instances import Declared
from gym_runtime.config.sources import Sources
from gym_runtime.errors import Violation
from gym_runtime.package.layout import SERVER_TYPES


@dataclass(frozen=True)
class ServerRef:
    """A reference found in ``instance``'s config at ``key`` pointing to ``server_type/name``."""

    instance: str
    key: str
    server_type: str
    name: str


ENVIRONMENT_SERVERS = "environment_servers"
AGENTS = "responses_api_agents"
# the field an environment server names its agent in (its `type` may be left out)
AGENT_SERVER_FIELD = "agent_server"


def find_refs(instance: Declared) -> list[ServerRef]:
    """All server references inside one declared instance's config."""
    base = f"{instance.name}.{instance.server_type}.{instance.implementation}"
    out: list[ServerRef] = []
    if instance.server_type == ENVIRONMENT_SERVERS:
        agent = instance.config.get(AGENT_SERVER_FIELD)
        if (
            isinstance(agent, dict)
            and set(agent) <= {"type", "name"}
            and agent.get("type") is None
            and isinstance(agent.get("name"), str)
        ):
            out.append(ServerRef(instance.name, f"{base}.{AGENT_SERVER_FIELD}", AGENTS, agent["name"]))

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            if set(node) == {"type", "name"} and node.get("type") in SERVER_TYPES and isinstance(node["name"], str):
                out.append(ServerRef(instance.name, path, node["type"], node["name"]))
                return
            for k, v in node.items():
                walk(v, f"{path}.{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}[{i}]")

    walk(instance.config, base)
    return out


def literal_only(node: Any) -> Any:
    """A copy of an unresolved config with every string holding ``${`` replaced by None, so the
    references whose type and name are literal can be checked before (or without) resolution."""
    if isinstance(node, dict):
        return {k: literal_only(v) for k, v in node.items()}
    if isinstance(node, list):
        return [literal_only(v) for v in node]
    return None if isinstance(node, str) and "${" in node else node


def check_refs(instances: dict[str, Declared], sources: Sources) -> tuple[list[ServerRef], list[Violation]]:
    """Resolve every reference; return them and a violation per reference that names nothing."""
    refs = [r for inst in instances.values() for r in find_refs(inst)]
    out: list[Violation] = []
    for r in refs:
        target = instances.get(r.name)
        if target is not None and target.server_type == r.server_type:
            continue
        same_type = sorted(n for n, i in instances.items() if i.server_type == r.server_type)
        close = difflib.get_close_matches(r.name, same_type, n=3, cutoff=0.6)
        available = f"Available {r.server_type}: {', '.join(same_type) if same_type else '(none)'}"
        hint = f"Did you mean {' or '.join(repr(c) for c in close)}? {available}" if close else available
        if target is not None:
            hint = f"{r.name!r} is a {target.server_type} instance, not {r.server_type}. " + hint
        out.append(
            Violation(
                "GR-CONFIG-REF",
                f"In server instance {r.instance!r}, field {r.key.split('.')[-1]!r} "
                f"references {r.server_type}/{r.name}, which is not defined in the merged config",
                file=sources.of(r.key),
                key=r.key,
                hint=hint,
            )
        )
    return refs, out
