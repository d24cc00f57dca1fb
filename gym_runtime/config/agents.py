"""Agent composition in a merged config: the unbound agent, legacy agent names, pairing checks.

Rules of NeMo Gym 0.6 and later (``nemo_gym/global_config.py``: ``compose_unbound_agent``,
``apply_legacy_agent_aliases``, ``raise_on_unsupported_model_pairings``), each applied only when
the release profile says its line does (docs/environment-packages.md, "Composition"):

* **unbound agent** (:attr:`~gym_runtime.gym_release.GymRelease.composes_unbound_agent`): an agent
  whose ``resources_server.name`` is ``???`` is a harness to run every environment with. It
  replaces the agent of every other agent instance that has a ``resources_server``, keeping that
  instance's ``resources_server``, ``model_server`` and ``datasets``; the instance is renamed after
  the new agent type (``gpqa_simple_agent`` -> ``gpqa_hermes_agent``), the unbound instance is
  removed, and ``agent_map`` routes the old names to the new ones. ``KEY=VALUE`` overrides naming
  a renamed instance apply to it after the swap. Errors (``GR-CONFIG-COMPOSE``): two unbound agents,
  none to compose onto, two instances given one name, routing (``agent_name``, ``agent_map``,
  ``fan_out``) naming an instance the swap renamed, an override of a field the agent does not have;
* **pairing** (:attr:`~gym_runtime.gym_release.GymRelease.pairing_keys`): a resources server's
  ``allowed_agents`` refuses an unbound agent of another type, its ``allowed_model_types`` (0.7)
  an agent whose model server is of another type (``GR-CONFIG-PAIRING``, one violation per refused
  pairing); ``allow_unsupported_pairing: true`` in a config, or ``NEMO_GYM_ALLOW_UNSUPPORTED_PAIRING``
  set in the runtime's environment (:mod:`gym_runtime.settings`), waives both;
* **legacy agent names** (:attr:`~gym_runtime.gym_release.GymRelease.agent_aliases`): when only the
  new name of a renamed agent exists, ``agent_map`` routes the old one to it (warning
  ``GR-CONFIG-LEGACY-NAME``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gym_runtime.config.sources import Sources
from gym_runtime.errors import Violation

AGENTS, RESOURCES, MODELS, ENVIRONMENTS = (
    "responses_api_agents",
    "resources_servers",
    "responses_api_models",
    "environment_servers",
)
CARRIED = ("resources_server", "model_server", "datasets")
COMPOSITION = "composition"


@dataclass(frozen=True)
class Agent:
    """A top-level agent instance: ``name``, its one agent type and its (live) inner config."""

    name: str
    agent_type: str
    config: dict[str, Any]

    @property
    def resources_ref(self) -> dict[str, Any] | None:
        ref = self.config.get("resources_server")
        return ref if isinstance(ref, dict) else None

    @property
    def unbound(self) -> bool:
        ref = self.resources_ref
        return ref is not None and ref.get("name") == "???"


def agents(cfg: dict[str, Any], reserved: frozenset[str]) -> list[Agent]:
    """Every top-level instance of ``cfg`` holding exactly one agent with a mapping config."""
    out = []
    for name, value in cfg.items():
        if name in reserved or not isinstance(value, dict) or not isinstance(value.get(AGENTS), dict):
            continue
        inner = value[AGENTS]
        if len(inner) == 1 and isinstance(next(iter(inner.values())), dict):
            agent_type, config = next(iter(inner.items()))
            out.append(Agent(str(name), str(agent_type), config))
    return out


def _one_impl(cfg: dict[str, Any], name: Any, server_type: str) -> tuple[str, dict[str, Any]] | None:
    value = cfg.get(name) if isinstance(name, str) else None
    inner = value.get(server_type) if isinstance(value, dict) else None
    if not isinstance(inner, dict) or len(inner) != 1 or not isinstance(next(iter(inner.values())), dict):
        return None
    return next(iter(inner.items()))


def allowed(
    cfg: dict[str, Any], resources_server: Any, key: str, sources: Sources, errors: list[Violation]
) -> tuple[list[str], str] | None:
    """``(names, key path)`` a resources server declares under ``key`` (a string is one name), or None
    when it declares none (any pairing goes)."""
    impl = _one_impl(cfg, resources_server, RESOURCES)
    declared = impl[1].get(key) if impl else None
    if not declared:
        return None
    path = f"{resources_server}.{RESOURCES}.{impl[0]}.{key}"  # type: ignore[index]  # impl is set whenever declared is
    if isinstance(declared, str):
        return [declared], path
    if not isinstance(declared, list):
        errors.append(
            Violation(
                "GR-CONFIG-PAIRING",
                f"{key} must be a list of names, got a {type(declared).__name__}",
                file=sources.of(path),
                key=path,
            )
        )
        return None
    return [str(n) for n in declared], path


def composed_name(agent: Agent, new_type: str) -> str:
    """The name an instance gets when its agent becomes ``new_type``: the old agent type (or a
    trailing ``_agent``) replaced by the new one (``gpqa_simple_agent`` -> ``gpqa_hermes_agent``)."""
    stem = strip_agent_suffix(agent.name, agent.agent_type)
    return f"{stem}_{new_type}" if stem else new_type


def strip_agent_suffix(name: str, agent_type: str) -> str:
    """``name`` without its trailing agent type, else without a trailing ``_agent``."""
    stem = name.removesuffix(f"_{agent_type}").removesuffix(agent_type).rstrip("_")
    return name.removesuffix("_agent").rstrip("_") if stem == name else stem


def unbound_renames(cfg: dict[str, Any], reserved: frozenset[str]) -> set[str]:
    """The instance names unbound-agent composition will create (before it runs), for holding back
    overrides addressed to them."""
    found = agents(cfg, reserved)
    unbound = [a for a in found if a.unbound]
    if len(unbound) != 1:
        return set()
    return {composed_name(a, unbound[0].agent_type) for a in found if a.name != unbound[0].name}


def compose_unbound(
    cfg: dict[str, Any],
    sources: Sources,
    reserved: frozenset[str],
    pairing_waived: bool,
    check_agents: bool,
    held: dict[str, Any],
) -> tuple[dict[str, str], list[Violation]]:
    """Compose the unbound agent onto the other agents in place (module doc). ``held``: overrides
    by the instance name they address. Returns ``(old name -> new name, errors)``."""
    found = agents(cfg, reserved)
    unbound = [a for a in found if a.unbound]
    if not unbound:
        return {}, []
    if len(unbound) > 1:
        names = ", ".join(a.name for a in unbound)
        return {}, [
            Violation(
                "GR-CONFIG-COMPOSE",
                f"{len(unbound)} agent instances leave resources_server.name "
                f"unset ({names}), so no single agent can be composed onto the others",
                file=sources.of(a.name),
                key=f"{a.name}.{AGENTS}.{a.agent_type}.resources_server.name",
                hint="keep one standalone agent config in config_paths, or bind the others",
            )
            for a in unbound
        ]
    source = unbound[0]
    targets = [a for a in found if a.name != source.name and a.resources_ref is not None]
    where = {
        "file": sources.of(source.name),
        "key": f"{source.name}.{AGENTS}.{source.agent_type}.resources_server.name",
    }
    if not targets:
        return {}, [
            Violation(
                "GR-CONFIG-COMPOSE",
                f"agent instance {source.name!r} leaves resources_server.name "
                "unset, but no other agent instance is there to compose it onto",
                **where,
                hint="add an environment, benchmark or resources-server config to config_paths",
            )
        ]
    errors = _agent_pairings(cfg, source, targets, sources) if check_agents and not pairing_waived else []
    renames = {t.name: composed_name(t, source.agent_type) for t in targets}
    taken = set(cfg) - set(renames) - {source.name}
    clashes = sorted(
        f"{old} -> {new}" for old, new in renames.items() if new in taken or list(renames.values()).count(new) > 1
    )
    if clashes:
        errors.append(
            Violation(
                "GR-CONFIG-COMPOSE",
                f"composing {source.name!r} would give two instances one name: {', '.join(clashes)}",
                **where,
                hint="rename the environment's agent instance",
            )
        )
    if errors:
        return {}, errors
    template = sources.under(f"{source.name}.{AGENTS}.{source.agent_type}")
    del cfg[source.name]
    sources.drop(source.name)
    for target in targets:
        errors += _swap(
            cfg, sources, source, target, renames[target.name], template, held.pop(renames[target.name], None)
        )
    errors += [
        Violation(
            "GR-CONFIG-OVERRIDE",
            f"override names instance {name!r}, which composition did not produce",
            key=name,
            hint=f"use a name `gym-runtime config` lists: {', '.join(renames.values())}",
        )
        for name in held
    ]
    errors += _outdated_routes(cfg, renames, sources)
    declared = cfg.get("agent_map")
    cfg["agent_map"] = {**renames, **(declared if isinstance(declared, dict) else {})}
    sources.by_key.setdefault("agent_map", COMPOSITION)
    return renames, errors


def _swap(
    cfg: dict[str, Any],
    sources: Sources,
    source: Agent,
    target: Agent,
    new: str,
    template: dict[str, str],
    override: Any,
) -> list[Violation]:
    composed = copy.deepcopy(source.config)
    for key in CARRIED:
        if key in target.config:
            composed[key] = copy.deepcopy(target.config[key])
    inner_old = f"{target.name}.{AGENTS}.{target.agent_type}"
    carried = {s: f for s, f in sources.under(inner_old).items() if s and s[1:].split(".")[0].split("[")[0] in CARRIED}
    root = sources.by_key.get(target.name, COMPOSITION)
    instance = cfg.pop(target.name)
    sources.drop(target.name)
    instance[AGENTS] = {source.agent_type: composed}
    cfg[new] = instance
    inner_new = f"{new}.{AGENTS}.{source.agent_type}"
    sources.by_key.update({new: root, f"{new}.{AGENTS}": root})
    sources.by_key.update({inner_new + s: f for s, f in template.items()})
    sources.by_key.update({inner_new + s: f for s, f in carried.items()})
    sources.inherits[inner_new] = (f"{source.name}.{AGENTS}.{source.agent_type}", template.get("", COMPOSITION))
    if not isinstance(override, dict):
        return []
    fields = (override.get(AGENTS) or {}).get(source.agent_type) if isinstance(override.get(AGENTS), dict) else None
    unknown = sorted(set(fields or {}) - set(composed))
    if unknown:
        return [
            Violation(
                "GR-CONFIG-OVERRIDE",
                f"override sets {', '.join(unknown)} on {new!r}, whose agent {source.agent_type} has no such field",
                file="override",
                key=f"{inner_new}.{unknown[0]}",
                hint=f"set a field {source.agent_type} declares",
            )
        ]
    from omegaconf import OmegaConf

    merged = OmegaConf.merge(OmegaConf.create(composed), OmegaConf.create(fields or {}))
    instance[AGENTS][source.agent_type] = OmegaConf.to_container(merged, resolve=False)
    sources.record(fields or {}, "override", inner_new)
    return []


def _agent_pairings(cfg: dict[str, Any], source: Agent, targets: list[Agent], sources: Sources) -> list[Violation]:
    errors: list[Violation] = []
    for target in targets:
        rs = (target.resources_ref or {}).get("name")
        found = allowed(cfg, rs, "allowed_agents", sources, errors)
        if found is None or source.agent_type in found[0]:
            continue
        names, path = found
        errors.append(
            Violation(
                "GR-CONFIG-PAIRING",
                f"agent {source.name!r} ({source.agent_type}) would replace the "
                f"agent of {target.name!r}, but resources server {rs!r} accepts only "
                f"{', '.join(names)}",
                file=sources.of(path),
                key=path,
                hint=waive_hint(names),
            )
        )
    return errors


def waive_hint(names: list[str]) -> str:
    return (
        f"use one of: {', '.join(names)}; or set allow_unsupported_pairing: true in a config (or "
        "NEMO_GYM_ALLOW_UNSUPPORTED_PAIRING=1 for the runtime) to run the pairing anyway"
    )


def model_pairings(cfg: dict[str, Any], reserved: frozenset[str], sources: Sources) -> list[Violation]:
    """``allowed_model_types``: one violation per agent whose model server's type its resources server
    does not accept (the placeholder ``dummy_model`` never counts)."""
    errors: list[Violation] = []
    for agent in agents(cfg, reserved):
        rs, model = agent.resources_ref, agent.config.get("model_server")
        if not rs or rs.get("type") != RESOURCES or not isinstance(model, dict) or model.get("type") != MODELS:
            continue
        found = allowed(cfg, rs.get("name"), "allowed_model_types", sources, errors)
        impl = _one_impl(cfg, model.get("name"), MODELS)
        if found is None or impl is None or impl[0] == "dummy_model" or impl[0] in found[0]:
            continue
        errors.append(
            Violation(
                "GR-CONFIG-PAIRING",
                f"agent {agent.name!r} uses model server {model.get('name')!r} "
                f"({impl[0]}), but resources server {rs.get('name')!r} accepts only model types "
                f"{', '.join(found[0])}",
                file=sources.of(found[1]),
                key=found[1],
                hint=waive_hint(found[0]),
            )
        )
    return errors


def _routes(cfg: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """``(where, destination)`` of every routing destination: ``agent_name``, ``agent_map`` values,
    ``fan_out`` entries."""
    if "agent_name" in cfg:
        yield "agent_name", cfg["agent_name"]
    if isinstance(cfg.get("agent_map"), dict):
        yield from ((f"agent_map.{k}", v) for k, v in cfg["agent_map"].items())
    if isinstance(cfg.get("fan_out"), dict):
        for k, dests in cfg["fan_out"].items():
            yield from ((f"fan_out.{k}", d) for d in (dests if isinstance(dests, list) else []))


def _outdated_routes(cfg: dict[str, Any], renames: dict[str, str], sources: Sources) -> list[Violation]:
    return [
        Violation(
            "GR-CONFIG-COMPOSE",
            f"routes to {dest!r}, which composition renamed {renames[dest]!r}",
            file=sources.of(where),
            key=where,
            hint=f"write {renames[dest]}",
        )
        for where, dest in _routes(cfg)
        if isinstance(dest, str) and dest in renames
    ]


def legacy_agent_names(cfg: dict[str, Any], aliases: dict[str, str] | Any, sources: Sources) -> list[Violation]:
    """Route each old agent name to the instance of its new name when only that one exists
    (``agent_map``); rewrite routing that names the old one. Returns the warnings."""
    declared = cfg.get("agent_map")
    routes = dict(declared) if isinstance(declared, dict) else {}
    active = {
        old: routes.get(new, new) for old, new in aliases.items() if old not in cfg and routes.get(new, new) in cfg
    }
    if not active:
        return []
    used = sorted({str(d) for _, d in _routes(cfg) if isinstance(d, str) and d in active})
    if cfg.get("agent_name") in active:
        cfg["agent_name"] = active[cfg["agent_name"]]
    routes = {k: active.get(v, v) if isinstance(v, str) else v for k, v in routes.items()}
    for old, new in active.items():
        routes.setdefault(old, new)
    cfg["agent_map"] = routes
    sources.by_key.setdefault("agent_map", COMPOSITION)
    if isinstance(cfg.get("fan_out"), dict):
        cfg["fan_out"] = {
            k: [active.get(d, d) for d in v] if isinstance(v, list) else v for k, v in cfg["fan_out"].items()
        }
    return [
        Violation(
            "GR-CONFIG-LEGACY-NAME",
            f"routes to {old!r}, the old name of {active[old]!r}",
            key="agent_map",
            file=sources.of("agent_name"),
            hint=f"write {active[old]}",
        )
        for old in used
    ]
