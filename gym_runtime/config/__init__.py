"""Configuration: merge, resolve, find server instances, check references (docs/architecture.md §4).

``build_config(package, overrides, policy)`` runs the stages in order:

1. compose the files (nested ``config_paths``, templates, agent composition: the Gym release's
   rules, :mod:`gym_runtime.config.compose`) with the overrides and policy values
   (``GR-CONFIG-YAML``, ``GR-CONFIG-OVERRIDE``, ``GR-CONFIG-NESTED-*``, ``GR-CONFIG-INHERIT*``, ...);
2. instance shape and names (``GR-CONFIG-INSTANCE-NAME``, ``GR-CONFIG-TWO-IMPLEMENTATIONS``);
3. missing values and interpolations (:class:`~gym_runtime.errors.MissingValuesError`), reported
   together with every server reference whose type and name are literal and name nothing, so a
   missing ``policy_base_url`` never hides a broken reference until the next run;
4. known field types (``GR-CONFIG-TYPE``, :mod:`gym_runtime.config.types`), nulls where a
   server's config class declares ``str`` (``GR-CONFIG-NULL``, :mod:`gym_runtime.config.null_fields`), server references
   (:class:`~gym_runtime.errors.ServerRefNotFoundError`), implementations, entrypoints, domains,
   ports, task-sandbox images an OpenSandbox server would get that the operator did not approve
   (``GR-CONFIG-TASK-IMAGE``, :mod:`gym_runtime.task_sandboxes.approval`) (``GR-CONFIG-*``): all
   in one error.

A stage with problems stops the later ones (their findings would be echoes of the same root
cause). Warnings (``MergedConfig.warnings``) never stop anything: a false-looking string from
``oc.env`` in a field of unknown type (``GR-CONFIG-TRUTHY``), egress settings in a package
config (``GR-CONFIG-NOT-A-SETTING``), a ``ray_enabled`` key in a server's block
(``GR-CONFIG-RAY-ENABLED``, :mod:`gym_runtime.ray.use`) and a ``simple_agent`` with no
``max_steps`` (``GR-CONFIG-NO-MAX-STEPS``, :mod:`gym_runtime.config.episodes`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from gym_runtime.config import token_capture
from gym_runtime.config.blocks import named_blocks
from gym_runtime.config.builtin_keys import builtin_key_problems
from gym_runtime.config.compose import compose
from gym_runtime.config.episodes import unbounded_agents
from gym_runtime.config.instances import (
    ServerInstance,
    build_instances,
    declare,
    find_instances,
    python_version_problems,
)
from gym_runtime.config.merge import POLICY_KEYS, PolicyValues
from gym_runtime.config.null_fields import null_field_problems
from gym_runtime.config.ray_enabled import ray_enabled_keys
from gym_runtime.config.refs import ServerRef, check_refs, literal_only
from gym_runtime.config.resolve import resolve_config
from gym_runtime.config.secrets import SecretMap, secret_key_names, secret_map, url_credential_warnings
from gym_runtime.config.sources import Sources
from gym_runtime.config.stand_in import refuse_what_stand_in_cannot_honour
from gym_runtime.config.types import apply_known_types
from gym_runtime.config.yaml_booleans import data_file_warnings, yaml_boolean_warnings
from gym_runtime.errors import ConfigError, MissingValuesError, ServerRefNotFoundError, Violation, ViolationList
from gym_runtime.gym_release import GymRelease, choose_release
from gym_runtime.package import Package
from gym_runtime.package.layout import find_server_dirs
from gym_runtime.settings import builtin_servers_dir, load_settings
from gym_runtime.task_sandboxes.approval import config_problems as task_image_problems


@dataclass(frozen=True)
class MergedConfig:
    """The resolved configuration of one environment.

    ``data``: the merged, fully resolved plain dict (no ``${...}``, no ``???``; known fields typed);
    ``instances``: server instances by name, in config order; ``refs``: every server reference;
    ``sources``: provenance of each key (and the lists a later file replaced); ``secrets``: which
    values are secrets and which server instance receives which (:mod:`gym_runtime.config.secrets`);
    ``warnings``: problems that do not stop a start (:class:`~gym_runtime.errors.Violation`);
    ``release``: the profile of the Gym release the environment runs (:mod:`gym_runtime.gym_release`),
    which every later stage asks what its release line does.
    """

    package: Package
    data: dict[str, Any]
    instances: dict[str, ServerInstance]
    refs: list[ServerRef] = field(default_factory=list)
    sources: Sources = field(default_factory=Sources)
    secrets: SecretMap = field(default_factory=SecretMap)
    warnings: list[Violation] = field(default_factory=list)
    release: GymRelease | None = None

    def of_type(self, server_type: str) -> list[ServerInstance]:
        return [i for i in self.instances.values() if i.server_type == server_type]

    def redacted(self, masked: list[str] | None = None) -> dict[str, Any]:
        """``data`` with every secret masked (:meth:`SecretMap.view`); ``masked`` receives their paths."""
        return self.secrets.view(self.data, None, masked)

    def to_yaml(self, *, redacted: bool = True) -> str:
        return yaml.safe_dump(self.redacted() if redacted else self.data, sort_keys=False)


def builtin_server_dirs(root: Path) -> dict:
    """Server trees under the runtime's built-in ``servers/`` directory."""
    dirs, _ = find_server_dirs(root, origin="builtin") if root.is_dir() else ({}, [])
    return dirs


def build_config(
    package: Package,
    overrides: list[str] | None = None,
    policy: PolicyValues | None = None,
    builtin_root: Path | None = None,
    defaults: dict[str, Any] | None = None,
    release: GymRelease | None = None,
    job_config: tuple[dict[str, Any], str] | None = None,
) -> MergedConfig:
    """Merge and check the package's configuration; raises a :class:`ConfigError` subclass.

    ``defaults`` are merged beneath the files (e.g. placeholders for ``validate``);
    ``builtin_root`` defaults to the runtime's ``servers/``; ``release`` is the Gym release profile
    (default: :func:`~gym_runtime.gym_release.choose_release` under the current settings);
    ``job_config``: ``(data, label)``, the job's global config layer (a sandboxed host's,
    :mod:`gym_runtime.host.global_config`), merged above the files and beneath the overrides.
    """
    settings = load_settings()
    release = release or choose_release(package, settings)

    composed = compose(
        package,
        list(overrides or []),
        policy or PolicyValues(),
        release,
        defaults,
        settings.allow_unsupported_pairing,
        job_config,
    )
    cfg, sources = composed.cfg, composed.sources
    raw: dict[str, Any] = OmegaConf.to_container(cfg, resolve=False)  # type: ignore[assignment]  # to_container of a DictConfig is a dict
    v = ViolationList(find_instances(raw, sources))
    v.raise_if_any(ConfigError, "server instances are malformed")
    try:
        data = resolve_config(cfg, sources)
    except MissingValuesError as e:
        _, broken = check_refs(declare(literal_only(raw)), sources)
        if broken:
            e.violations += broken
            e.message = e.args[0] + f"; {_refs_summary(len(broken))}"
        raise
    # an interpolation can copy a whole instance block (`x.y: ${acme_math}`): check the resolved shape too
    ViolationList(find_instances(data, sources)).raise_if_any(ConfigError, "server instances are malformed")
    data, problems, warnings = apply_known_types(data, raw, sources)
    capture_errors, capture_warnings = token_capture.apply(
        data, sources, settings.token_capture_dir, job_config[1] if job_config else None
    )
    problems, warnings = problems + capture_errors, warnings + capture_warnings
    builtin = builtin_server_dirs(builtin_root or builtin_servers_dir())
    instances, declared, inst_violations = build_instances(
        data, sources, package.server_dirs, builtin, package.root, release
    )
    refuse_what_stand_in_cannot_honour(release, raw, sources, instances, package)
    problems += inst_violations + builtin_key_problems(instances, sources)
    problems += null_field_problems(instances, raw, sources, package.root)
    problems += python_version_problems(data.get("python_version"), "python_version", sources.of("python_version"))
    problems += task_image_problems(data, instances, sources, settings)
    extra_secrets, secret_violations = secret_key_names(raw, sources)
    problems += secret_violations
    refs, ref_violations = check_refs(declared, sources)
    if ref_violations:
        raise ServerRefNotFoundError(
            f"ServerRefNotFoundError: {_refs_summary(len(ref_violations))}",
            violations=ref_violations + problems,
            hint="define the missing instance (e.g. add its config to config_paths) or fix the name",
        )
    ViolationList(problems).raise_if_any(ConfigError, "server instances are invalid")
    if not instances:
        raise ConfigError(
            "no server instances are configured, so there is nothing to run",
            code="GR-CONFIG-NO-INSTANCES",
            hint="config_paths must define at least one `<name>: {<server_type>: {<impl>: "
            "{entrypoint: app.py}}}` block",
        )
    named = named_blocks(data, instances, release.block_reference_keys)
    secrets = secret_map(raw, data, list(instances), extra_secrets, named)
    warnings += yaml_boolean_warnings(package.root, composed.files, data, instances, sources)
    warnings += data_file_warnings(package.root, instances, composed.files)
    return MergedConfig(
        package,
        data,
        instances,
        refs,
        sources,
        secrets,
        composed.warnings
        + warnings
        + url_credential_warnings(secrets, data, sources)
        + _settings_in_config(raw, sources, named)
        + ray_enabled_keys(instances, sources)
        + unbounded_agents(instances),
        release,
    )


def _refs_summary(n: int) -> str:
    return f"{n} server reference{'s name' if n > 1 else ' names'} no defined instance"


def _settings_in_config(raw: dict[str, Any], sources: Sources, named: dict[str, tuple[str, ...]]) -> list[Violation]:
    """A warning for a top-level ``sandbox`` block: egress is the operator's setting, never the
    package's (docs/environment-packages.md), so nothing in it widens what the sandbox allows.
    None when a server names the block by string (``sandbox_provider: sandbox``): then it is Gym's
    sandbox provider block, the server's own input (:mod:`gym_runtime.config.blocks`)."""
    if not isinstance(raw.get("sandbox"), dict) or any("sandbox" in blocks for blocks in named.values()):
        return []
    return [
        Violation(
            "GR-CONFIG-NOT-A-SETTING",
            "gym-runtime does not read sandbox or egress settings from a "
            "package config: the sandbox allows what the operator sets (this key only reaches the "
            "servers' config)",
            file=sources.of("sandbox"),
            key="sandbox",
            hint="ask the operator to add the hosts to NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW (with "
            "NMP_RL_SANDBOX_ALLOW_INTERNET=true); `gym-runtime doctor` prints the effective allowlist",
        )
    ]


__all__ = ["POLICY_KEYS", "MergedConfig", "PolicyValues", "ServerInstance", "ServerRef", "build_config"]
