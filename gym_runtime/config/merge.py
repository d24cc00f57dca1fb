"""Merge a package's ``config_paths`` with OmegaConf, remembering which source set each key.

Order (later wins, DESIGN.md §4): the config files in manifest order, then ``key=value``
overrides, then the job's ``policy_base_url`` / ``policy_api_key`` / ``policy_model_name``.
OmegaConf's own errors carry ``full_key`` but no file name (case C02), so provenance is tracked
here: ``Sources.of("a.b.c")`` names the file (relative to the package) or flag that set it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from gym_runtime.errors import ConfigError, Violation, ViolationList

POLICY_KEYS = ("policy_base_url", "policy_api_key", "policy_model_name")


@dataclass(frozen=True)
class PolicyValues:
    """The job's model endpoint values; ``None`` = not given (the config may still define it).

    ``base_url`` is one URL or a list of replicas. ``origin`` says where they came from (for errors).
    """

    base_url: str | list[str] | None = None
    api_key: str | None = None
    model_name: str | None = None
    origin: str = "flags"

    def as_dict(self) -> dict[str, Any]:
        vals = dict(zip(POLICY_KEYS, (self.base_url, self.api_key, self.model_name)))
        return {k: v for k, v in vals.items() if v is not None}


@dataclass
class Sources:
    """Provenance: dotted key path -> where its value was last set (file or flag)."""

    by_key: dict[str, str] = field(default_factory=dict)

    def record(self, node: Any, source: str, prefix: str = "") -> None:
        if isinstance(node, dict):
            if prefix:
                self.by_key[prefix] = source
            for k, v in node.items():
                self.record(v, source, f"{prefix}.{k}" if prefix else str(k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                self.record(v, source, f"{prefix}[{i}]")
            self.by_key[prefix] = source
        else:
            self.by_key[prefix] = source

    def of(self, key: str) -> str | None:
        """The source of ``key`` or of its nearest recorded ancestor."""
        while key:
            if key in self.by_key:
                return self.by_key[key]
            cut = max(key.rfind("."), key.rfind("["))
            key = key[:cut] if cut > 0 else ""
        return None

    def files_defining(self, prefix: str) -> list[str]:
        """Every distinct source that set a key under ``prefix`` (in first-seen order)."""
        out: list[str] = []
        for k, s in self.by_key.items():
            if (k == prefix or k.startswith(prefix + ".")) and s not in out:
                out.append(s)
        return out


def _load_file(path: Path, rel: str, v: ViolationList) -> dict[str, Any] | None:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        v.add("GR-CONFIG-YAML", f"is not valid YAML{where}: {getattr(e, 'problem', None) or e}", file=rel)
        return None
    except (OSError, UnicodeDecodeError) as e:
        v.add("GR-CONFIG-YAML", f"cannot be read: {e}", file=rel)
        return None
    if data is None:
        return {}
    if not isinstance(data, dict):
        v.add("GR-CONFIG-YAML", f"must be a mapping at the top level, got {type(data).__name__}", file=rel)
        return None
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        v.add("GR-CONFIG-YAML", f"top-level keys must be strings, got {bad!r}", file=rel)
        return None
    return data


def parse_overrides(overrides: list[str]) -> tuple[dict[str, Any], list[Violation]]:
    """Parse ``key=value`` dotlist overrides (Gym's ``+key=`` / ``++key=`` prefixes accepted)."""
    out: DictConfig = OmegaConf.create({})
    v: list[Violation] = []
    for item in overrides:
        text = item.lstrip("+")
        if "=" not in text or not text.split("=", 1)[0].strip():
            v.append(Violation("GR-CONFIG-OVERRIDE", f"override {item!r} is not KEY=VALUE",
                               hint="write overrides as dotted.key=value, e.g. policy_model_name=my-model"))
            continue
        try:
            out = OmegaConf.merge(out, OmegaConf.from_dotlist([text]))  # type: ignore[assignment]
        except OmegaConfBaseException as e:
            v.append(Violation("GR-CONFIG-OVERRIDE", f"override {item!r} cannot be applied: {e}"))
    return OmegaConf.to_container(out, resolve=False), v  # type: ignore[return-value]


def merge_sources(files: list[tuple[Path, str]], overrides: list[str], policy: PolicyValues,
                  defaults: dict[str, Any] | None = None) -> tuple[DictConfig, Sources]:
    """Merge ``defaults`` (lowest priority, labelled ``default``), config files (``(path, label)``
    in order), overrides, then policy values.

    Returns the merged, **unresolved** config and its provenance. Raises :class:`ConfigError`
    listing every unreadable file and bad override.
    """
    v = ViolationList()
    sources = Sources()
    layers: list[DictConfig] = []
    if defaults:
        layers.append(OmegaConf.create(defaults))
        sources.record(defaults, "default")
    for path, label in files:
        data = _load_file(path, label, v)
        if data is None:
            continue
        try:
            layers.append(OmegaConf.create(data))
        except OmegaConfBaseException as e:
            v.add("GR-CONFIG-YAML", f"is not a valid OmegaConf config: {e}", file=label)
            continue
        sources.record(data, label)
    ov, ov_violations = parse_overrides(overrides)
    v.extend(ov_violations)
    if ov:
        layers.append(OmegaConf.create(ov))
        for k, val in ov.items():
            sources.record({k: val}, "override")
    pol = policy.as_dict()
    if pol:
        layers.append(OmegaConf.create(pol))
        for k, val in pol.items():
            sources.record({k: val}, f"--{k.replace('_', '-')} ({policy.origin})")
    v.raise_if_any(ConfigError, "configuration files cannot be merged")
    try:
        merged = OmegaConf.merge(*layers) if layers else OmegaConf.create({})
    except OmegaConfBaseException as e:
        raise ConfigError(f"configuration files cannot be merged: {e}",
                          hint="a key is a mapping in one file and a value in another") from None
    assert not isinstance(merged, ListConfig)
    return merged, sources
