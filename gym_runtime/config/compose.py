"""Composition: a package's ``config_paths`` to the merged, unresolved config its Gym release's parser makes.

The one place where composition happens (docs/environment-packages.md, "Composition";
docs/architecture.md §4). Steps, in NeMo Gym's order (``nemo_gym/global_config.py``,
``GlobalConfigDictParser.parse``), each asked of the release profile (:mod:`gym_runtime.gym_release`)
where release lines differ:

1. the include tree of nested ``config_paths`` (:mod:`.nested`), merged in the release's order
   beneath the job's layers: ``KEY=VALUE`` overrides, then the policy values (Gym's command line);
   overrides naming an instance unbound-agent composition is about to create are held back for it;
2. templates: ``_inherit_from`` / ``_copy`` / ``_delete_key`` (:mod:`.inherit`); 0.7 follows a
   moved agent in its environment servers (:mod:`.relays`);
3. 0.6+: the unbound agent composed onto the others, with the ``allowed_agents`` pairing check, then
   legacy agent names (:mod:`.agents`);
4. 0.7: a ``legacy_agent`` relay for every agent no environment server names (:mod:`.relays`);
5. ``dummy_model`` merges (every line): a model instance holding ``dummy_model`` beside its real
   implementation gets the real one with ``dummy_model``'s keys beneath it;
6. 0.7: ``allowed_model_types``; 0.6+: ``skip_verification`` / ``skip_verification_reward`` copied
   into every agent that sets neither.

Every step's problems are collected and reported together (:class:`~gym_runtime.errors.ConfigError`),
a step with problems stopping the later ones. What the runtime adds on top (resolution, types,
instances, placement, secrets, escapes) is the rest of :func:`gym_runtime.config.build_config`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException, ValidationError
from omegaconf.nodes import BooleanNode

from gym_runtime.config import agents as agent_rules
from gym_runtime.config import relays
from gym_runtime.config.inherit import apply_templates
from gym_runtime.config.merge import PolicyValues, job_layers, merge_layers
from gym_runtime.config.nested import collect
from gym_runtime.config.sources import Sources
from gym_runtime.errors import ConfigError, Violation, ViolationList

if TYPE_CHECKING:
    from gym_runtime.gym_release import GymRelease
    from gym_runtime.package import Package


@dataclass
class Composed:
    """The composed, unresolved config (``cfg``), its provenance, the collected ``config_paths``
    entries (every file read, in collection order), the warnings of composition and ``files``: the
    label of every file read (its package-relative path, or where in a vendored wheel)."""

    cfg: DictConfig
    sources: Sources
    entries: list[str]
    warnings: list[Violation] = field(default_factory=list)
    files: list[str] = field(default_factory=list)


def compose(
    package: Package,
    overrides: list[str],
    policy: PolicyValues,
    release: GymRelease,
    defaults: dict[str, Any] | None = None,
    pairing_waived: bool = False,
    job_config: tuple[dict[str, Any], str] | None = None,
) -> Composed:
    """Compose ``package``'s configuration for ``release`` (module doc). ``defaults`` lie beneath
    every file; ``pairing_waived``: the runtime's ``NEMO_GYM_ALLOW_UNSUPPORTED_PAIRING``;
    ``job_config``: the job's global config layer, above the files and beneath the overrides
    (:func:`~gym_runtime.config.merge.job_layers`).

    Raises :class:`ConfigError` with every problem of the first step that has any.
    """
    v, warnings = ViolationList(), list[Violation]()
    tree = collect(package, release, v, warnings)
    job = job_layers(overrides, policy, v, job_config)
    v.raise_if_any(ConfigError, "configuration files cannot be merged")
    files = ([(defaults, "default")] if defaults else []) + tree.layers()
    held: dict[str, Any] = {}
    over = next((layer for layer, label in job if label == "override"), None)
    if release.composes_unbound_agent and over:
        base, _ = merge_layers(files)
        names = agent_rules.unbound_renames(_plain(base), release.reserved_keys)
        held = {k: over.pop(k) for k in list(over) if k in names}
    merged, sources = merge_layers(files + job)
    cfg = _plain(merged)
    if tree.nested:
        cfg["config_paths"] = tree.entries
        sources.by_key["config_paths"] = agent_rules.COMPOSITION

    reserved = release.reserved_keys
    moves = relays.inherited_agents(cfg, reserved) if release.has_environment_servers else {}
    errors, more = apply_templates(cfg, sources)
    warnings += more
    if release.has_environment_servers and not errors:
        errors += relays.follow_moves(cfg, moves, reserved, sources)
    _raise(errors, "templates (_inherit_from, _copy, _delete_key) cannot be applied")

    waived = pairing_waived or _flag(cfg, "allow_unsupported_pairing")
    if release.composes_unbound_agent:
        renames, errors = agent_rules.compose_unbound(
            cfg, sources, reserved, waived, "allowed_agents" in release.pairing_keys, held
        )
        if renames and release.has_environment_servers:
            relays.retarget(cfg, renames)
        _raise(errors, "the unbound agent cannot be composed")
        warnings += agent_rules.legacy_agent_names(cfg, dict(release.agent_aliases), sources)
    if release.relay_implementation:
        errors, more = relays.front_agents(
            cfg,
            reserved,
            release.relay_implementation,
            _flag(cfg, "error_on_agent_without_environment_server"),
            sources,
        )
        warnings += more
        _raise(errors, "agents have no environment server")
    _merge_dummy_models(cfg, sources)
    if "allowed_model_types" in release.pairing_keys and not waived:
        _raise(
            agent_rules.model_pairings(cfg, reserved, sources), "a model server is not one its resources server accepts"
        )
    if release.applies_skip_verification:
        _skip_verification(cfg, reserved, sources)
    return Composed(OmegaConf.create(cfg), sources, tree.entries, warnings, [f.label for f in tree.files])


def _plain(cfg: DictConfig) -> dict[str, Any]:
    return OmegaConf.to_container(cfg, resolve=False)  # type: ignore[return-value]  # to_container of a DictConfig is a dict


def _raise(errors: list[Violation], summary: str) -> None:
    ViolationList(errors).raise_if_any(ConfigError, summary)


def _flag(cfg: dict[str, Any], key: str) -> bool:
    """A top-level switch: its value resolved (an interpolation), a string read as OmegaConf reads a
    boolean; unset or unresolvable: False."""
    value = cfg.get(key)
    if isinstance(value, str) and "${" in value:
        try:
            value = OmegaConf.select(OmegaConf.create(cfg), key)
        except OmegaConfBaseException:
            return False
    if isinstance(value, str):
        try:
            return bool(BooleanNode(value)._value())
        except ValidationError:
            return bool(value)
    return bool(value)


def _merge_dummy_models(cfg: dict[str, Any], sources: Sources) -> None:
    """A model instance with ``dummy_model`` beside another implementation (or other keys): the other
    implementation over ``dummy_model``'s keys (NeMo Gym: the placeholder model of ``no model`` parses)."""
    for name, value in cfg.items():
        models = value.get(agent_rules.MODELS) if isinstance(value, dict) else None
        if not isinstance(models, dict) or "dummy_model" not in models or (len(value) == 1 and len(models) == 1):
            continue
        dummy = models.pop("dummy_model")
        if not models:
            continue
        real = next(iter(models))
        if isinstance(dummy, dict) and isinstance(models[real], dict):
            merged = OmegaConf.merge(OmegaConf.create(dummy), OmegaConf.create(models[real]))
            models[real] = OmegaConf.to_container(merged, resolve=False)
        sources.drop(f"{name}.{agent_rules.MODELS}.dummy_model")


def _skip_verification(cfg: dict[str, Any], reserved: frozenset[str], sources: Sources) -> None:
    for key in ("skip_verification", "skip_verification_reward"):
        if cfg.get(key) is None:
            continue
        for agent in agent_rules.agents(cfg, reserved):
            if key not in agent.config:
                agent.config[key] = cfg[key]
                sources.by_key[f"{agent.name}.{agent_rules.AGENTS}.{agent.agent_type}.{key}"] = sources.of(key) or "?"
