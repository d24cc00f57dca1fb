"""Resolve the merged config, reporting every missing value and unresolvable ``${...}`` at once.

Cases C02 and C20: OmegaConf raises on the first bad interpolation, names no file, and never
treats ``${oc.env:VAR,???}`` as missing (2.3 returns the literal ``'???'``, 2.4 raises for the
first key only). So every leaf is resolved on its own, every failure is collected with its key
path and source file, and a final scan rejects any leaf that is still ``'???'``.

Hints say where a value can come from; for a secret key (:func:`~gym_runtime.config.redact.is_secret_key`)
only an environment variable or a config file, never a command-line override.

Documented rule for empty values: an ``${oc.env:VAR}`` or ``${oc.env:VAR,???}`` interpolation that
gives an empty string (its variable is set but empty) counts as missing: an empty URL or API key
is never what a job meant. An author who writes a default of their own (``${oc.env:VAR,''}``, as
NeMo Gym 0.7.0's optional keys do) accepts the empty value, as Gym does.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import (
    InterpolationKeyError,
    InterpolationResolutionError,
    MissingMandatoryValue,
    OmegaConfBaseException,
)

from gym_runtime.config.merge import POLICY_KEYS
from gym_runtime.config.redact import is_secret_key
from gym_runtime.config.sources import Sources
from gym_runtime.errors import MissingValuesError, Violation

_INTERP = re.compile(r"\$\{([^${}]+)\}")
# how the job gives each policy value (flag or GYM_RUNTIME_* variable); a key never goes on a command line
_GIVE_POLICY = {
    "policy_base_url": "pass --policy-base-url URL (or set GYM_RUNTIME_POLICY_BASE_URL)",
    "policy_model_name": "pass --policy-model-name NAME (or set GYM_RUNTIME_POLICY_MODEL_NAME)",
    "policy_api_key": "export the key as VAR and pass --policy-api-key-env VAR (or export it as "
    "GYM_RUNTIME_POLICY_API_KEY)",
}


def _override(key: str) -> str:
    """``, or give the override KEY=VALUE`` — empty for a secret key: API keys never go on a
    command line (docs/architecture.md §4), so only variables and config files are suggested for them."""
    return "" if is_secret_key(key) else f", or give the override {key}=VALUE"


def value_sources_hint(key: str) -> str:
    """Where a value for top-level ``key`` can come from, as one sentence (never a command line
    for a secret key)."""
    if key in POLICY_KEYS:
        return f"{_GIVE_POLICY[key]}, or add `{key}: ...` to a config in config_paths" + _override(key)
    return "set it in a config listed in config_paths" + _override(key)


def _refs(raw: str) -> list[str]:
    return [m.group(1).strip() for m in _INTERP.finditer(raw)]


def _env_var(ref: str) -> str | None:
    if ref.startswith("oc.env:"):
        return ref[len("oc.env:") :].split(",", 1)[0].strip()
    return None


def _problem(key: str, raw: Any, err: Exception | None, sources: Sources, resolved: Any = None) -> Violation:
    file = sources.of(key)
    text = raw if isinstance(raw, str) else ""
    refs = _refs(text)
    env_vars = [e for e in (_env_var(r) for r in refs) if e]
    if env_vars:
        var = env_vars[0]
        state = "is set but empty" if os.environ.get(var) == "" else "is not set"
        where = ", or set it in a config in config_paths" if is_secret_key(key) else f", or override {key}=VALUE"
        return Violation(
            "GR-CONFIG-MISSING",
            f"value comes from environment variable {var}, which {state} (interpolation {text!r})",
            file=file,
            key=key,
            hint=f"export {var}=<value> before starting{where}",
        )
    if isinstance(err, MissingMandatoryValue) or (err is None and resolved == "???" and not refs):
        return Violation(
            "GR-CONFIG-MISSING", "required value is unset ('???')", file=file, key=key, hint=value_sources_hint(key)
        )
    if refs:
        plain = [r for r in refs if ":" not in r]
        target = plain[0] if plain else refs[0]
        why = (
            "which is not set after merging"
            if isinstance(err, (InterpolationKeyError, type(None))) or "not found" in str(err)
            else f"which cannot be resolved: {_first_line(err)}"
        )
        if err is None:
            why = "which resolves to the unset marker '???'"
        top = target.split(".")[0].split("[")[0]
        return Violation(
            "GR-CONFIG-INTERPOLATION",
            f"references {target!r}, {why}",
            file=file,
            key=key,
            hint=value_sources_hint(top)
            if top == target
            else f"define {target} in a config in config_paths" + _override(target),
        )
    return Violation("GR-CONFIG-INTERPOLATION", f"cannot be resolved: {_first_line(err)}", file=file, key=key)


def _first_line(err: Exception | None) -> str:
    return str(err).strip().splitlines()[0] if err else ""


def _walk(node: DictConfig | ListConfig, prefix: str, sources: Sources, out: list[Violation]) -> None:
    keys: list[Any] = list(node.keys()) if isinstance(node, DictConfig) else list(range(len(node)))
    for k in keys:
        path = (f"{prefix}.{k}" if prefix else str(k)) if isinstance(node, DictConfig) else f"{prefix}[{k}]"
        child = node._get_node(k)
        raw = child._value() if child is not None else None  # type: ignore[union-attr]  # child is a Node: None is excluded, and a key of node has one
        if isinstance(child, (DictConfig, ListConfig)) and not OmegaConf.is_interpolation(node, k):
            if OmegaConf.is_missing(node, k):
                out.append(_problem(path, "???", MissingMandatoryValue("???"), sources))
            else:
                _walk(child, path, sources, out)
            continue
        try:
            value = node[k]
        except OmegaConfBaseException as e:
            out.append(_problem(path, raw, e, sources))
            continue
        if isinstance(value, str) and (value == "???" or (value == "" and _env_var_in(raw))):
            out.append(_problem(path, raw, None, sources, resolved=value))
        elif isinstance(value, (DictConfig, ListConfig)):
            _walk(value, path, sources, out)


def _env_var_in(raw: Any) -> bool:
    """True when ``raw`` reads an environment variable with no default of the author's own: an
    ``${oc.env:VAR}`` or an ``${oc.env:VAR,???}`` (module doc, the rule for empty values)."""
    if not isinstance(raw, str):
        return False
    for ref in _refs(raw):
        if _env_var(ref):
            _, comma, default = ref.partition(",")
            if not comma or default.strip().strip("'\"") == "???":
                return True
    return False


def resolve_config(cfg: DictConfig, sources: Sources) -> dict[str, Any]:
    """Resolve every interpolation; return a plain dict.

    Raises :class:`MissingValuesError` listing each unset ``???``, each unresolvable
    ``${...}`` and each value still ``'???'`` after resolution, with key path and source file.
    """
    problems: list[Violation] = []
    _walk(cfg, "", sources, problems)
    if problems:
        n = len(problems)
        hint = "nothing was built or started; give the values and run again"
        if any("'policy_base_url'" in v.message for v in problems):
            hint += (
                " (without --policy-base-url, `up` and `dry-run` start the built-in stub model in its place; "
                "`config` shows what a job with its own policy endpoint gets)"
            )
        raise MissingValuesError(
            f"{n} config value{'s are' if n != 1 else ' is'} missing or cannot be resolved",
            violations=problems,
            hint=hint,
        )
    try:
        data: dict[str, Any] = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)  # type: ignore[assignment]  # to_container of a DictConfig is a dict
    except (InterpolationResolutionError, OmegaConfBaseException) as e:  # pragma: no cover - walk covers these
        raise MissingValuesError(f"config cannot be resolved: {_first_line(e)}") from None
    left = list(_markers(data, ""))
    if left:  # pragma: no cover - the walk reports these first; kept as the final guarantee (case C20)
        raise MissingValuesError(
            f"{len(left)} config values are still '???' after resolution",
            violations=[
                Violation("GR-CONFIG-MISSING", "resolves to the unset marker '???'", file=sources.of(k), key=k)
                for k in left
            ],
        )
    return data


def _markers(node: Any, path: str) -> Iterator[str]:
    """Key paths of every leaf that is the string ``'???'`` in a plain container."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _markers(v, f"{path}.{k}" if path else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _markers(v, f"{path}[{i}]")
    elif node == "???":
        yield path
