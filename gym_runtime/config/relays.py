"""Environment servers in composition (NeMo Gym 0.7 and later): retargeting and generated relays.

Rules of NeMo Gym 0.7.0 ``nemo_gym/global_config.py`` (docs/environment-packages.md,
"Composition"), for a release whose profile has ``environment_servers``:

* an environment server references its agents by every top-level field of its config whose value
  is ``{type: responses_api_agents, name: ...}``, and by ``agent_server`` even without ``type``;
* an agent moved by a **top-level** ``_inherit_from`` (``b: {_inherit_from: a}`` with ``a`` an
  agent; ``a`` is gone afterwards) is followed by every environment server naming ``a``, when
  exactly one block inherited it; several blocks inheriting it while a reference still names ``a``
  is ``GR-CONFIG-INHERIT-AMBIGUOUS``. The same retargeting follows unbound-agent composition's renames;
* every agent with an ``entrypoint`` that no environment server names gets a generated relay, an
  instance ``<environment>_environment_server: {environment_servers: {legacy_agent: {entrypoint:
  app.py, agent_server: {type: responses_api_agents, name: <agent>}}}}`` named after the agent
  without its agent type (warning ``GR-CONFIG-RELAY``, which lists the blocks to declare, when the
  config declares environment servers for other agents; a config that declares none, written for
  Gym before 0.7, gets its relays without a warning, and ``gym-runtime config`` shows them); with
  ``error_on_agent_without_environment_server: true`` such an agent is an error
  (``GR-CONFIG-NO-ENVIRONMENT-SERVER``).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import yaml

from gym_runtime.config.agents import AGENTS, ENVIRONMENTS, agents, strip_agent_suffix
from gym_runtime.config.inherit import directive
from gym_runtime.config.sources import Sources
from gym_runtime.errors import Violation

SUFFIX = "_environment_server"


def agent_refs(cfg: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """``(key path, reference)`` of every agent reference of every environment server in ``cfg``."""
    out = []
    for name, value in cfg.items():
        servers = value.get(ENVIRONMENTS) if isinstance(value, dict) else None
        for impl, server in servers.items() if isinstance(servers, dict) else ():
            for field, ref in server.items() if isinstance(server, dict) else ():
                if isinstance(ref, dict) and (
                    ref.get("type") == AGENTS or (field == "agent_server" and ref.get("type") is None)
                ):
                    out.append((f"{name}.{ENVIRONMENTS}.{impl}.{field}", ref))
    return out


def retarget(cfg: dict[str, Any], renames: dict[str, str]) -> None:
    """Point every environment server's agent reference named in ``renames`` at the new name."""
    for _, ref in agent_refs(cfg):
        if ref.get("name") in renames:
            ref["name"] = renames[ref["name"]]


def inherited_agents(cfg: dict[str, Any], reserved: frozenset[str]) -> dict[str, list[str]]:
    """Before templates apply: agent name -> the top-level blocks that ``_inherit_from`` it."""
    names = {a.name for a in agents(cfg, reserved)}
    out: dict[str, list[str]] = defaultdict(list)
    for name, value in cfg.items():
        d = directive(value)
        if d and d[0] == "inherit" and d[1] in names:
            out[d[1]].append(name)
    return dict(out)


def follow_moves(
    cfg: dict[str, Any], moves: dict[str, list[str]], reserved: frozenset[str], sources: Sources
) -> list[Violation]:
    """After templates apply: retarget references to each agent a single block inherited (module doc);
    one violation per reference left naming an agent several blocks inherited."""
    final = {a.name for a in agents(cfg, reserved)}
    moves = {src: [t for t in targets if t in final] for src, targets in moves.items() if src not in cfg}
    retarget(cfg, {src: targets[0] for src, targets in moves.items() if len(targets) == 1})
    return [
        Violation(
            "GR-CONFIG-INHERIT-AMBIGUOUS",
            f"references agent {ref['name']!r}, which "
            f"{', '.join(moves[ref['name']])} all inherit, so which one this environment server "
            "fronts is not known",
            file=sources.of(f"{path}.name"),
            key=f"{path}.name",
            hint="give each inheriting agent its own environment server, or name one of them here",
        )
        for path, ref in agent_refs(cfg)
        if isinstance(ref.get("name"), str) and len(moves.get(ref["name"], [])) > 1
    ]


def front_agents(
    cfg: dict[str, Any], reserved: frozenset[str], implementation: str, required: bool, sources: Sources
) -> tuple[list[Violation], list[Violation]]:
    """Generate a relay for every agent no environment server names (module doc); ``required``:
    ``error_on_agent_without_environment_server`` is set. Returns ``(errors, warnings)``."""
    fronted = {ref.get("name") for _, ref in agent_refs(cfg) if ref.get("name") is not None}
    found = {a.name: a for a in agents(cfg, reserved)}
    alone = sorted(
        n for n, a in found.items() if not a.unbound and n not in fronted and a.config.get("entrypoint") is not None
    )
    if not alone:
        return [], []
    if required:
        return [
            Violation(
                "GR-CONFIG-NO-ENVIRONMENT-SERVER",
                f"agent {n!r} has no environment server, so rollouts cannot reach it",
                file=sources.of(n),
                key=n,
                hint=f"declare one naming it in agent_server: {_block_text(_relay_name(n, found[n].agent_type), implementation, n)}"
                "; or unset error_on_agent_without_environment_server to have one generated",
            )
            for n in alone
        ], []
    declares = any(isinstance(v, dict) and ENVIRONMENTS in v for v in cfg.values())
    generated: dict[str, str] = {}
    for n in alone:
        name = _relay_name(n, found[n].agent_type)
        if name in cfg or name in generated.values():
            name = f"{n}{SUFFIX}"
        while name in cfg:
            name += SUFFIX
        cfg[name] = _block(implementation, n)
        sources.record(cfg[name], f"generated: {implementation} relay for agent {n}", name)
        generated[n] = name
    if not declares:  # a config written before environment servers: every agent relayed, as intended
        return [], []
    listing = "; ".join(_block_text(s, implementation, a) for a, s in generated.items())
    return [], [
        Violation(
            "GR-CONFIG-RELAY",
            f"agent{'s' if len(generated) > 1 else ''} "
            f"{', '.join(generated)} {'have' if len(generated) > 1 else 'has'} no environment server; "
            f"generated {', '.join(generated.values())} ({implementation}, which relays /run unchanged)",
            hint=f"declare them in a config (NeMo Gym will refuse such configs): {listing}; set "
            "error_on_agent_without_environment_server: true to make this an error",
        )
    ]


def _relay_name(agent: str, agent_type: str) -> str:
    return f"{strip_agent_suffix(agent, agent_type) or agent_type}{SUFFIX}"


def _block(implementation: str, agent: str) -> dict[str, Any]:
    return {ENVIRONMENTS: {implementation: {"entrypoint": "app.py", "agent_server": {"type": AGENTS, "name": agent}}}}


def _block_text(name: str, implementation: str, agent: str) -> str:
    return yaml.safe_dump({name: _block(implementation, agent)}, default_flow_style=True, sort_keys=False).strip()
