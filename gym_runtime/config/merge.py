"""Merge a package's ``config_paths`` with OmegaConf, remembering which source set each key.

Order (later wins, docs/architecture.md §4): the config files in manifest order, then ``key=value``
overrides, then the job's ``policy_base_url`` / ``policy_api_key`` / ``policy_model_name``.
Mappings merge key by key; a list in a later source **replaces** the earlier list whole (OmegaConf's
rule, so a package means the same under Gym's own launcher), and every such replacement is
recorded (``Sources.replaced_lists``) so ``gym-runtime config`` can say which file won (case C19).
OmegaConf's own errors carry ``full_key`` but no file name (case C02), so provenance is tracked
here: ``Sources.of("a.b.c")`` names the file (relative to the package) or flag that set it.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from gym_runtime.config.override_values import is_container, parse_container
from gym_runtime.config.redact import KEYLESS_API_KEY, is_secret_key
from gym_runtime.config.sources import Sources
from gym_runtime.errors import ConfigError, Violation, ViolationList
from gym_runtime.package.yamlfile import YamlProblem, check_structure, load_yaml_file

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

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> PolicyValues:
        """The job's policy values from ``GYM_RUNTIME_POLICY_BASE_URL`` (comma-separated: replicas),
        ``GYM_RUNTIME_POLICY_API_KEY`` and ``GYM_RUNTIME_POLICY_MODEL_NAME`` of ``environ`` (default
        ``os.environ``); ``None`` where unset or empty; ``origin`` is ``environment``."""
        env = os.environ if environ is None else environ
        url = env.get("GYM_RUNTIME_POLICY_BASE_URL") or None
        urls: str | list[str] | None = url
        if url and "," in url:
            urls = [u.strip() for u in url.split(",") if u.strip()]
        return cls(
            urls,
            env.get("GYM_RUNTIME_POLICY_API_KEY") or None,
            env.get("GYM_RUNTIME_POLICY_MODEL_NAME") or None,
            origin="environment",
        )

    def with_overrides(self, overrides: list[str]) -> PolicyValues:
        """These values completed by ``policy_base_url=`` / ``policy_api_key=`` / ``policy_model_name=``
        overrides (Gym's own way to pass them, e.g. ``ng_run ... policy_base_url=URL``) where no flag or
        variable gave them: a job's endpoint is the same whichever way it is written. The overrides stay
        in the config's override layer (their source reads ``override``); this object only decides
        whether the stub model starts and whether the keyless key applies. Unparseable overrides are
        ignored here (the merge reports them)."""
        given, _ = parse_overrides([o for o in overrides if o.lstrip("+").split("=", 1)[0].strip() in POLICY_KEYS])
        values: dict[str, Any] = dict(zip(POLICY_KEYS, (self.base_url, self.api_key, self.model_name), strict=True))
        for key in POLICY_KEYS:
            if values[key] is None and given.get(key) is not None:
                values[key] = given[key]
        return PolicyValues(
            values["policy_base_url"], values["policy_api_key"], values["policy_model_name"], origin=self.origin
        )

    def completed_by(self, other: PolicyValues) -> PolicyValues:
        """These values, each one not given taken from ``other`` (its ``origin`` then names both)."""
        mine = (self.base_url, self.api_key, self.model_name)
        if all(v is not None for v in mine) or not other.as_dict():
            return self
        origin = other.origin if not self.as_dict() else f"{self.origin} and {other.origin}"
        return PolicyValues(
            other.base_url if self.base_url is None else self.base_url,
            other.api_key if self.api_key is None else self.api_key,
            other.model_name if self.model_name is None else self.model_name,
            origin=origin,
        )

    def keyless_defaults(self) -> dict[str, Any] | None:
        """Config defaults for a base URL given without an API key: ``policy_api_key: EMPTY``
        (merged beneath every file and override, so a key set there still wins); else None."""
        return {"policy_api_key": KEYLESS_API_KEY} if self.base_url and not self.api_key else None

    def as_dict(self) -> dict[str, Any]:
        vals = dict(zip(POLICY_KEYS, (self.base_url, self.api_key, self.model_name), strict=True))
        return {k: v for k, v in vals.items() if v is not None}


def load_layer(path: Path, rel: str, v: ViolationList) -> dict[str, Any] | None:
    """One config file as a plain mapping (bounded, :mod:`gym_runtime.package.yamlfile`); a file that
    cannot be used adds a ``GR-CONFIG-YAML`` violation naming ``rel`` and returns None."""
    try:
        data = load_yaml_file(path, plain=True)
    except YamlProblem as e:
        v.add("GR-CONFIG-YAML", str(e), file=rel)
        return None
    except OSError as e:
        v.add("GR-CONFIG-YAML", f"cannot be read: {e.strerror or e}", file=rel)
        return None
    return _check_top(data, rel, v)


def _check_top(data: Any, rel: str, v: ViolationList) -> dict[str, Any] | None:
    if data is None:
        return {}
    if not isinstance(data, dict):
        v.add("GR-CONFIG-YAML", f"must be a mapping at the top level, got a {type(data).__name__}", file=rel)
        return None
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        v.add(
            "GR-CONFIG-YAML",
            f"top-level keys must be strings (instance or setting names), got {bad[0]!r}",
            file=rel,
            hint="quote the key",
        )
        return None
    return data


_OVERRIDE_KEY = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+|\[[0-9]+\])*")


def parse_overrides(overrides: list[str]) -> tuple[dict[str, Any], list[Violation]]:
    """Parse ``key=value`` dotlist overrides (Gym's ``+key=`` / ``++key=`` prefixes accepted).

    Values are YAML (OmegaConf's dotlist rules), except a dict or list, read in the syntax of Gym's
    Hydra (``fan_out={K:[A,B]}``, :mod:`gym_runtime.config.override_values`). Returns the nested overrides and one violation
    per override that is not ``dotted.key=value``, whose value cannot be parsed, or that gives a
    secret's value on the command line (``GR-CONFIG-OVERRIDE-SECRET``).
    """
    out: DictConfig = OmegaConf.create({})
    v: list[Violation] = []
    hint = "write overrides as dotted.key=value, e.g. policy_model_name=my-model"
    for item in overrides:
        text = item.lstrip("+")
        key = text.split("=", 1)[0].strip()
        if "=" not in text or not _OVERRIDE_KEY.fullmatch(key):
            v.append(
                Violation(
                    "GR-CONFIG-OVERRIDE",
                    f"override {item!r} is not KEY=VALUE with a dotted key of letters, digits, '_' and '-'",
                    hint=hint,
                )
            )
            continue
        secret = _secret_on_argv(key, text.split("=", 1)[1])
        if secret:
            v.append(secret)
            continue
        value = text.split("=", 1)[1]
        try:
            if is_container(value):  # a dict or list in Hydra's syntax, as Gym's command line reads it
                one = OmegaConf.create({})
                OmegaConf.update(one, key, parse_container(value), merge=True)
            else:
                one = OmegaConf.from_dotlist([text])
            check_structure(OmegaConf.to_container(one, resolve=False), plain=True)
            out = OmegaConf.merge(out, one)  # type: ignore[assignment]  # merging DictConfigs gives a DictConfig
        except (OmegaConfBaseException, yaml.YAMLError, YamlProblem, ValueError, TypeError) as e:
            why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            how = (
                "write a dict as {key:value,...} and a list as [a,b], as Gym's Hydra reads them; quote a "
                "value holding , : { } [ ] or =, e.g. agent_map={math:'my agent'}"
                if is_container(value)
                else hint
            )
            v.append(Violation("GR-CONFIG-OVERRIDE", f"override {item!r} cannot be applied: {why}", hint=how))
    return OmegaConf.to_container(out, resolve=False), v  # type: ignore[return-value]  # to_container of a DictConfig is a dict


_ONLY_INTERPOLATION = re.compile(r"\$\{[^${}]+\}")


def _secret_on_argv(key: str, value: str) -> Violation | None:
    """A violation when override ``key`` names a secret (:func:`~gym_runtime.config.redact.is_secret_key`,
    any dotted part) and ``value`` is the secret itself: argv is readable by every user of the host
    (``ps``, ``/proc/PID/cmdline``). A value that only references a variable (``${oc.env:VAR}``) is
    fine. The message never repeats the value."""
    if not any(is_secret_key(part) for part in re.split(r"[.\[\]]", key) if part):
        return None
    if _ONLY_INTERPOLATION.fullmatch(value.strip().strip("'\"")):
        return None
    flag = (
        " (for the policy model's key: --policy-api-key-env VAR, or GYM_RUNTIME_POLICY_API_KEY)"
        if key.split(".")[-1] == "policy_api_key"
        else ""
    )
    return Violation(
        "GR-CONFIG-OVERRIDE-SECRET",
        f"override {key}=... puts a secret on the command line, where "
        "every user of this host can read it (ps, /proc/PID/cmdline); it was not applied",
        key=key,
        hint=f"export it in an environment variable and pass {key}='${{oc.env:VAR}}' instead{flag}",
    )


def _kind(x: Any) -> str:
    return "mapping" if isinstance(x, dict) else "list" if isinstance(x, list) else "value"


def _conflict(base: Any, new: Any, path: str = "") -> tuple[str, str, str] | None:
    """The first key where ``new`` cannot merge into ``base``: ``(path, base kind, new kind)``."""
    if isinstance(base, dict) and isinstance(new, dict):
        for k, v in new.items():
            if k in base:
                c = _conflict(base[k], v, f"{path}.{k}" if path else str(k))
                if c:
                    return c
        return None
    if isinstance(base, dict) != isinstance(new, dict) and base is not None and new is not None:
        return path, _kind(base), _kind(new)
    return None


def load_text_layer(text: bytes, label: str, v: ViolationList) -> dict[str, Any] | None:
    """Like :func:`load_layer` for a config read from elsewhere (a member of a vendored wheel)."""
    from gym_runtime.package.yamlfile import parse_yaml

    try:
        data = parse_yaml(text.decode("utf-8"))
        check_structure(data, plain=True)
    except UnicodeDecodeError as e:
        v.add("GR-CONFIG-YAML", f"is not UTF-8 text (invalid byte at offset {e.start})", file=label)
        return None
    except YamlProblem as e:
        v.add("GR-CONFIG-YAML", str(e), file=label)
        return None
    return _check_top(data, label, v)


def job_layers(
    overrides: list[str], policy: PolicyValues, v: ViolationList, job_config: tuple[dict[str, Any], str] | None = None
) -> list[tuple[dict[str, Any], str]]:
    """The layers the job adds over the files: the job's global config (``job_config``: ``(data,
    label)``, a sandboxed host's, :mod:`gym_runtime.host.global_config`), ``key=value`` overrides
    (``override``), then the policy values (``--policy-base-url (flags)``, ...); bad overrides are
    added to ``v``."""
    layers: list[tuple[dict[str, Any], str]] = [job_config] if job_config and job_config[0] else []
    ov, ov_violations = parse_overrides(overrides)
    v.extend(ov_violations)
    if ov:
        layers.append((ov, "override"))
    for k, val in policy.as_dict().items():
        layers.append(({k: val}, f"--{k.replace('_', '-')} ({policy.origin})"))
    return layers


def merge_layers(
    layers: list[tuple[dict[str, Any], str]], sources: Sources | None = None
) -> tuple[DictConfig, Sources]:
    """Merge plain-mapping ``layers`` (``(data, label)``, lowest priority first) with OmegaConf.

    Returns the merged, **unresolved** config and its provenance (recorded against a plain mirror
    of the merge, so OmegaConf merges once). Raises :class:`ConfigError` naming both sides of a key
    that is a mapping in one source and a list in another (``GR-CONFIG-MERGE``).
    """
    sources = sources if sources is not None else Sources()
    mirror: dict[str, Any] = {}
    for data, label in layers:
        sources.note_replaced_lists(mirror, data, label)
        _mirror_merge(mirror, data)
        sources.record(data, label)
    try:
        merged = OmegaConf.merge(*(OmegaConf.create(data) for data, _ in layers)) if layers else OmegaConf.create({})
    except (OmegaConfBaseException, TypeError, ValueError):
        _raise_conflict(layers)
        raise
    assert isinstance(merged, DictConfig)
    return merged, sources


def _mirror_merge(base: dict[str, Any], new: dict[str, Any]) -> None:
    """OmegaConf's merge on plain containers, for provenance: mappings key by key, ``???`` never
    replaces a value, anything else replaces (lists whole). ``new`` is never changed: what the
    mirror takes from it is a copy, so a later layer merged into the mirror cannot reach back into
    an earlier layer's data (the layers are merged again, by OmegaConf, afterwards)."""
    for k, v in new.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _mirror_merge(base[k], v)
        elif not (v == "???" and k in base):
            base[k] = copy.deepcopy(v)


def _raise_conflict(layers: list[tuple[dict[str, Any], str]]) -> None:
    """Merge ``layers`` one at a time to name the layer and key OmegaConf refused (``GR-CONFIG-MERGE``)."""
    sources = Sources()
    merged: DictConfig = OmegaConf.create({})
    for data, label in layers:
        try:
            merged = OmegaConf.merge(merged, OmegaConf.create(data))  # type: ignore[assignment]  # merging DictConfigs gives a DictConfig
        except (OmegaConfBaseException, TypeError, ValueError) as e:
            c = _conflict(OmegaConf.to_container(merged, resolve=False), data)
            if c is None:
                raise ConfigError(
                    f"{label} cannot be merged: {str(e).strip().splitlines()[0]}", code="GR-CONFIG-MERGE"
                ) from None
            key, was, now = c
            raise ConfigError(
                f"key {key} is a {now} in {label} but a {was} in {sources.of(key)}",
                code="GR-CONFIG-MERGE",
                violations=[
                    Violation("GR-CONFIG-MERGE", f"is a {now} here, a {was} in {sources.of(key)}", file=label, key=key)
                ],
                hint="a later config can replace values but not turn a mapping into a value or "
                "list (or back); rename one of the keys",
            ) from None
        sources.record(data, label)
