"""The keys of a built-in server's block are checked before anything starts.

A built-in server tree (``servers/{server_type}/{implementation}/``) that ships ``config_schema.py``
declares there the pydantic model of its block as ``SCHEMA`` and, optionally, ``REFUSED`` (key -> why the built-in server does not serve
it) with ``REFUSED_DEFAULTS`` (the value that is allowed anyway). Every instance using that tree
gets, with the key path and the file that set it:

- ``GR-CONFIG-UNKNOWN-KEY`` for a key the model does not know (with the closest known key), since
  a misspelt key would otherwise change nothing and say nothing (NeMo Gym's servers ignore it);
- ``GR-CONFIG-UNSUPPORTED-KEY`` for a refused key set to anything but its default, naming why and
  the way out (ship NeMo Gym's own tree in the package).

Values are the server's to check at start (they may still be placeholders here). The schema module
imports pydantic only and is loaded from its file (it is no module of the runtime's).
"""

from __future__ import annotations

import difflib
import importlib.util
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from gym_runtime.errors import Violation

SCHEMA_FILE = "config_schema.py"


@cache
def _schema(path: Path) -> tuple[frozenset[str], dict[str, str], dict[str, Any]] | None:
    """``(known keys, refused, refused defaults)`` of a tree's schema file, or None without one."""
    file = path / SCHEMA_FILE
    if not file.is_file():
        return None
    spec = importlib.util.spec_from_file_location(f"_gym_runtime_schema_{abs(hash(str(file)))}", file)
    if spec is None or spec.loader is None:  # a .py file always has one
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model: type[BaseModel] = module.SCHEMA
    return (
        frozenset(model.model_fields),
        dict(getattr(module, "REFUSED", {})),
        dict(getattr(module, "REFUSED_DEFAULTS", {})),
    )


def builtin_key_problems(instances: Mapping[str, Any], sources: Any) -> list[Violation]:
    """The violations (module doc) of every built-in instance (``ServerInstance``) with a schema."""
    out: list[Violation] = []
    for inst in instances.values():
        if inst.server_dir.origin != "builtin":
            continue
        schema = _schema(inst.server_dir.path)
        if schema is None:
            continue
        known, refused, defaults = schema
        block = f"{inst.name}.{inst.server_type}.{inst.implementation}"
        for key in inst.config:
            path = f"{block}.{key}"
            file = sources.of(path) or inst.source
            if key not in known:
                close = difflib.get_close_matches(str(key), sorted(known), n=1)
                out.append(
                    Violation(
                        "GR-CONFIG-UNKNOWN-KEY",
                        f"the built-in {inst.implementation} has no config key {key!r}: it would be ignored",
                        file=file,
                        key=path,
                        hint=(f"did you mean {close[0]!r}? " if close else "")
                        + f"the keys of the built-in {inst.implementation} are in docs/rollouts.md; remove the key, "
                        f"or ship the server tree {inst.server_type}/{inst.implementation}/ that reads it in the package",
                    )
                )
            elif key in refused and inst.config[key] != defaults.get(key):
                out.append(
                    Violation(
                        "GR-CONFIG-UNSUPPORTED-KEY",
                        f"the built-in {inst.implementation} does not serve {key}: {refused[key]}",
                        file=file,
                        key=path,
                        hint=f"remove {key}, or ship NeMo Gym's own {inst.server_type}/{inst.implementation}/ tree in "
                        "the package (it is run instead of the built-in one)",
                    )
                )
    return out
