"""A null given to a field its server declares ``str`` is refused before anything is built.

A Gym server reads its block into its config class, a pydantic model (NeMo Gym
``nemo_gym/server_utils.py``: ``load_config_from_global_config``). A field annotated ``str``
refuses None, so the server exits at start-up with a validation error, after its venv was built.
The usual cause is a variable left unset behind a ``null`` default: NeMo Gym 0.7.0's
``frontierscience_judge`` config has ``judge_api_key: ${oc.env:NVIDIA_API_KEY,null}``, which its
judge's ``openai_api_key: ${judge_api_key}`` copies. Every key of an instance's block that
resolved to None is checked against the config class of the instance's tree, as
:func:`~gym_runtime.package.server_class.config_class` reads it (no code is run): a plain-``str``
field gives ``GR-CONFIG-NULL`` with the key path, the file that set it, the declaration, and the
variable to export or the key to give when the null came from one (``${oc.env:VAR,null}``,
``${oc.select:KEY,null}``). Built-in trees check their keys themselves
(:mod:`gym_runtime.config.builtin_keys`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gym_runtime.config.sources import Sources
from gym_runtime.config.types import ENV_REF
from gym_runtime.errors import Violation
from gym_runtime.package.server_class import config_class

_SELECT = re.compile(r"^\$\{oc\.select:\s*([A-Za-z_][\w.]*)\s*,")  # a key, or a default when it is absent
_REF = re.compile(r"^\$\{([A-Za-z_][\w.]*)\}$")  # an absolute interpolation of another key, alone
MAX_HOPS = 8


def _raw_at(raw: Any, path: str) -> Any:
    for part in path.split("."):
        raw = raw.get(part) if isinstance(raw, dict) else None
    return raw


def source_of_null(raw: Mapping[str, Any], path: str) -> tuple[str, str] | None:
    """Where the null at ``path`` of the unresolved config ``raw`` came from, following
    interpolations that copy another key (``${judge_api_key}``) up to :data:`MAX_HOPS` deep:
    ``("variable", VAR)`` for ``${oc.env:VAR,...}``, ``("key", KEY)`` for ``${oc.select:KEY,null}``
    with KEY absent, ``("null", KEY)`` for a copy of KEY that is a literal null (a placeholder, as
    ``judge_base_url: null`` in NeMo Gym 0.7.0's ``longmemeval``); None for a literal null here."""
    value = _raw_at(raw, path)
    for _ in range(MAX_HOPS):
        if not isinstance(value, str):
            return None
        if m := ENV_REF.match(value):
            return "variable", m.group(1)
        if m := _SELECT.match(value):
            if _raw_at(raw, m.group(1)) is None:
                return "key", m.group(1)
            value = _raw_at(raw, m.group(1))
            continue
        if not (m := _REF.match(value)):
            return None
        value = _raw_at(raw, m.group(1))
        if value is None:
            return "null", m.group(1)
    return None


_SAY = {
    "variable": ("{} is not set", "export {}"),
    "key": ("{} is not in the config", "give {} a value (a config file or an override)"),
    "null": ("copied from {}, which is null", "give {} a value (a config file or an override)"),
}


def null_field_problems(
    instances: Mapping[str, Any], raw: Mapping[str, Any], sources: Sources, package_root: Path | None
) -> list[Violation]:
    """``GR-CONFIG-NULL`` for every key of a package tree's instance (``ServerInstance``) that is
    None where its config class declares plain ``str`` (module doc)."""
    out: list[Violation] = []
    for inst in instances.values():
        nulls = [k for k, v in inst.config.items() if v is None]
        if not nulls or inst.server_dir.origin == "builtin":
            continue
        found = config_class(Path(inst.server_dir.path), inst.entrypoint, package_root)
        if found is None:
            continue
        for key in nulls:
            if (declared := found.strings.get(key)) is None:
                continue
            path = f"{inst.name}.{inst.server_type}.{inst.implementation}.{key}"
            src = source_of_null(raw, path)
            why, fix = (_SAY[src[0]][0].format(src[1]), _SAY[src[0]][1].format(src[1])) if src else (None, None)
            out.append(
                Violation(
                    "GR-CONFIG-NULL",
                    f"is null{f' ({why})' if why else ''}, but {declared}: the server would refuse "
                    "its config at start-up",
                    file=sources.of(path) or inst.source,
                    key=path,
                    hint=fix or f"give {key} a value",
                )
            )
    return out
