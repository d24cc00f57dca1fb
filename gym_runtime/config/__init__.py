"""Configuration: merge, resolve, find server instances, check references (DESIGN.md §4).

``build_config(package, overrides, policy)`` runs the stages in order and stops at the first
stage with problems, so the user sees the root causes, not their echoes:

1. merge the files, overrides and policy values (``GR-CONFIG-YAML``, ``GR-CONFIG-OVERRIDE``);
2. instance shape and names (``GR-CONFIG-INSTANCE-NAME``, ``GR-CONFIG-TWO-IMPLEMENTATIONS``);
3. missing values and interpolations (:class:`~gym_runtime.errors.MissingValuesError`);
4. server references (:class:`~gym_runtime.errors.ServerRefNotFoundError`);
5. implementations, entrypoints, domains, ports (``GR-CONFIG-*``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from gym_runtime.config.instances import python_version_problems
from gym_runtime.config.instances import ServerInstance, build_instances, find_instances
from gym_runtime.config.merge import POLICY_KEYS, PolicyValues, Sources, merge_sources
from gym_runtime.config.refs import ServerRef, check_refs
from gym_runtime.config.resolve import resolve_config
from gym_runtime.config.secrets import SecretMap, secret_key_names, secret_map
from gym_runtime.errors import ConfigError, ServerRefNotFoundError, ViolationList
from gym_runtime.package import Package
from gym_runtime.package.layout import find_server_dirs


@dataclass(frozen=True)
class MergedConfig:
    """The resolved configuration of one environment.

    ``data``: the merged, fully resolved plain dict (no ``${...}``, no ``???``);
    ``instances``: server instances by name, in config order; ``refs``: every server reference;
    ``sources``: provenance of each key; ``secrets``: which values are secrets and which server
    instance receives which (:mod:`gym_runtime.config.secrets`).
    """

    package: Package
    data: dict[str, Any]
    instances: dict[str, ServerInstance]
    refs: list[ServerRef] = field(default_factory=list)
    sources: Sources = field(default_factory=Sources)
    secrets: SecretMap = field(default_factory=SecretMap)

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


def build_config(package: Package, overrides: list[str] | None = None, policy: PolicyValues | None = None,
                 builtin_root: Path | None = None, defaults: dict[str, Any] | None = None) -> MergedConfig:
    """Merge and check the package's configuration; raises a :class:`ConfigError` subclass.

    ``defaults`` are merged beneath the files (e.g. placeholders for ``validate``);
    ``builtin_root`` defaults to the runtime's ``servers/``.
    """
    from gym_runtime.settings import builtin_servers_dir

    files = [(p, package.rel(p)) for p in package.config_files]
    cfg, sources = merge_sources(files, list(overrides or []), policy or PolicyValues(), defaults)
    raw: dict[str, Any] = OmegaConf.to_container(cfg, resolve=False)  # type: ignore[assignment]
    v = ViolationList(find_instances(raw, sources))
    v.raise_if_any(ConfigError, "server instances are malformed")
    data = resolve_config(cfg, sources)
    # an interpolation can copy a whole instance block (`x.y: ${acme_math}`): check the resolved shape too
    ViolationList(find_instances(data, sources)).raise_if_any(ConfigError, "server instances are malformed")
    builtin = builtin_server_dirs(builtin_root or builtin_servers_dir())
    instances, declared, inst_violations = build_instances(data, sources, package.server_dirs, builtin)
    inst_violations += python_version_problems(data.get("python_version"), "python_version",
                                               sources.of("python_version"))
    extra_secrets, secret_violations = secret_key_names(raw, sources)
    inst_violations += secret_violations
    refs, ref_violations = check_refs(declared, sources)
    if ref_violations:
        n = len(ref_violations)
        raise ServerRefNotFoundError(f"ServerRefNotFoundError: {n} server reference{'s name' if n > 1 else ' names'} "
                                     "no defined instance", violations=ref_violations,
                                     hint="define the missing instance (e.g. add its config to config_paths) "
                                     "or fix the name")
    ViolationList(inst_violations).raise_if_any(ConfigError, "server instances are invalid")
    if not instances:
        raise ConfigError("no server instances are configured, so there is nothing to run", code="GR-CONFIG-NO-INSTANCES",
                          hint="config_paths must define at least one `<name>: {<server_type>: {<impl>: "
                          "{entrypoint: app.py}}}` block")
    return MergedConfig(package, data, instances, refs, sources, secret_map(raw, data, list(instances), extra_secrets))


__all__ = ["POLICY_KEYS", "MergedConfig", "PolicyValues", "ServerInstance", "ServerRef", "build_config"]
