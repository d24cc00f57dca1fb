"""The Gym global config a sandboxed Gym host is given in its environment (``up --host-mode nmp``).

Contract (docs/runtime.md, "Host mode"): the host's launcher puts the job's Gym global config, the
dict NeMo RL would hand to ``RunHelper`` (``config_paths``, ``policy_base_url``, ``policy_api_key``,
``policy_model_name``, ``port_range_low`` / ``port_range_high``, instance overrides...), as YAML or
JSON text into :data:`GLOBAL_CONFIG_VARS` (``NMP_GYM_GLOBAL_CONFIG``, as NMP's sandboxed Gym host
reads it; ``NHX_GYM_GLOBAL_CONFIG``, nemo-helix's name, when the first is unset). It becomes a
:class:`HostJob`:

* ``policy_base_url`` (one URL or a list of replicas), ``policy_api_key``, ``policy_model_name``:
  the job's policy values (command-line flags still win);
* ``port_range_low`` / ``port_range_high``: the range the head server's port is taken from
  (default 5000-5999, NeMo RL's ``DEFAULT_GYM_PORT_RANGE_LOW/HIGH``); the keys stay in the config,
  as Gym's servers read them;
* ``config_paths``: checked, not used: the environment package's manifest says which config files
  make the environment, and every entry given here must be one the manifest lists
  (``GR-HOST-CONFIG-PATHS``), so a host never runs a config the package does not hold;
* ``head_server``: dropped (the host chooses its own head server address, and says it on stdout);
* every other key: one config layer named after the variable, merged above the package's config
  files and beneath ``KEY=VALUE`` overrides (docs/architecture.md §4).

Errors: :class:`~gym_runtime.errors.SettingsError` ``GR-HOST-CONFIG`` (unset, empty, not YAML, not
a mapping, a bad port range), ``GR-HOST-CONFIG-PATHS``; each names the variable and the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from gym_runtime.config.merge import POLICY_KEYS, PolicyValues
from gym_runtime.errors import SettingsError
from gym_runtime.package.yamlfile import YamlProblem, check_structure, parse_yaml

GLOBAL_CONFIG_VARS = ("NMP_GYM_GLOBAL_CONFIG", "NHX_GYM_GLOBAL_CONFIG")
DEFAULT_PORT_RANGE = (5000, 5999)
MAX_TEXT = 4 * 1024 * 1024  # characters: a global config is a few KB; bound what is parsed
DROPPED = ("head_server",)


@dataclass(frozen=True)
class HostJob:
    """What a host's global config says: ``layer`` (the config layer, ``label`` its source name),
    ``policy`` (the policy values it holds), ``port_range`` (inclusive ``(low, high)`` of the head
    server's port) and ``config_paths`` (the entries it named, checked by :meth:`check_config_paths`)."""

    label: str
    layer: dict[str, Any]
    policy: PolicyValues
    port_range: tuple[int, int] = DEFAULT_PORT_RANGE
    config_paths: tuple[str, ...] = field(default_factory=tuple)

    def apply(self, manifest_paths: list[str], given: PolicyValues) -> tuple[PolicyValues, tuple[dict[str, Any], str]]:
        """What host mode makes of the job's policy values ``given`` and the package's manifest entries
        ``manifest_paths``: ``config_paths`` checked against them (:meth:`check_config_paths`), then
        ``(given completed by this config's policy values, (layer, label))``, the config layer
        :func:`gym_runtime.policy.values.configure` merges beneath the package's."""
        self.check_config_paths(manifest_paths)
        return given.completed_by(self.policy), (self.layer, self.label)

    def check_config_paths(self, manifest_paths: list[str]) -> None:
        """Raise ``GR-HOST-CONFIG-PATHS`` naming every entry of ``config_paths`` the package's
        manifest does not list (``manifest_paths``: the manifest's entries, package-relative)."""
        listed = {_norm(p) for p in manifest_paths}
        strays = [p for p in self.config_paths if _norm(p) not in listed]
        if strays:
            raise SettingsError(
                f"{self.label}: config_paths names {len(strays)} file(s) the environment package's manifest does not "
                f"list: {', '.join(repr(p) for p in strays)}",
                code="GR-HOST-CONFIG-PATHS",
                hint="in host mode the package's nemo-environment.yaml says which config files make the environment: "
                f"drop config_paths from {self.label}, or list only files the manifest lists "
                f"({', '.join(manifest_paths)})",
            )


def _norm(path: str) -> str:
    return PurePosixPath(path.strip()).as_posix().removeprefix("./")


def read_host_job(environ: Mapping[str, str]) -> HostJob:
    """The :class:`HostJob` of the first variable of :data:`GLOBAL_CONFIG_VARS` that is set (module
    doc); raises :class:`SettingsError` ``GR-HOST-CONFIG`` with one message naming the variable."""
    name = next((n for n in GLOBAL_CONFIG_VARS if environ.get(n) is not None), None)
    if name is None:
        raise SettingsError(
            f"host mode needs the job's Gym global config in {GLOBAL_CONFIG_VARS[0]}, which is not set",
            code="GR-HOST-CONFIG",
            hint=f'export {GLOBAL_CONFIG_VARS[0]}=\'{{"policy_base_url": ..., "policy_model_name": '
            f"...}}' (YAML or JSON text; {GLOBAL_CONFIG_VARS[1]} is read when it is unset)",
        )
    return parse_host_job(environ[name], name)


def parse_host_job(text: str, label: str) -> HostJob:
    """Parse ``text`` (YAML or JSON) from variable ``label`` into a :class:`HostJob`."""

    def bad(what: str, hint: str = "give a YAML or JSON mapping of Gym global config keys") -> SettingsError:
        return SettingsError(f"{label} {what}", code="GR-HOST-CONFIG", hint=hint)

    if not text.strip():
        raise bad("is set but empty")
    if len(text) > MAX_TEXT:
        raise bad(f"holds {len(text)} characters, more than the {MAX_TEXT} a global config may have")
    try:
        data = parse_yaml(text)
        check_structure(data, plain=True)
    except YamlProblem as e:
        raise bad(str(e)) from None
    if not isinstance(data, dict):
        raise bad(f"must be a mapping of config keys, got a {type(data).__name__}")
    if any(not isinstance(k, str) for k in data):
        raise bad(f"has a top-level key that is not a string: {next(k for k in data if not isinstance(k, str))!r}")
    layer = {k: v for k, v in data.items() if k not in DROPPED and k != "config_paths" and k not in POLICY_KEYS}
    paths = data.get("config_paths", [])
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise bad("key config_paths must be a list of file paths")
    policy = _policy(data, label, bad)
    return HostJob(label, layer, policy, _port_range(data, bad), tuple(paths))


def _policy(data: dict[str, Any], label: str, bad: Any) -> PolicyValues:
    url = data.get("policy_base_url")
    if url is not None and not (
        isinstance(url, str) or (isinstance(url, list) and url and all(isinstance(u, str) for u in url))
    ):
        raise bad("key policy_base_url must be a URL or a non-empty list of URLs (one per replica)")
    for key in ("policy_api_key", "policy_model_name"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise bad(f"key {key} must be a string")
    return PolicyValues(url, data.get("policy_api_key"), data.get("policy_model_name"), origin=label)


def _port_range(data: dict[str, Any], bad: Any) -> tuple[int, int]:
    low, high = data.get("port_range_low", DEFAULT_PORT_RANGE[0]), data.get("port_range_high", DEFAULT_PORT_RANGE[1])
    if not all(isinstance(p, int) and not isinstance(p, bool) for p in (low, high)) or not 1 <= low <= high <= 65535:
        raise bad(
            f"keys port_range_low/port_range_high must be ports with low <= high, got {low!r}-{high!r}",
            "e.g. port_range_low: 5000, port_range_high: 5999",
        )
    return low, high


def parse_port_range(text: str) -> tuple[int, int]:
    """``LOW-HIGH`` (``--head-port-range``) as an inclusive range; ``ValueError`` when it is not one."""
    low, sep, high = text.partition("-")
    if not sep:
        raise ValueError(f"{text!r} is not LOW-HIGH")
    lo, hi = int(low), int(high)
    if not 1 <= lo <= hi <= 65535:
        raise ValueError(f"{text!r} is not a range of ports with LOW <= HIGH")
    return lo, hi
