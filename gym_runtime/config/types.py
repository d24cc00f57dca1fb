"""Typed values for the fields whose type is known, after resolution (case C21).

``${oc.env:VAR,9101}`` always resolves to a *string* (OmegaConf's ``oc.env`` converts a default
with ``str()`` and environment values are strings), so a port becomes ``'9101'`` and a default
of ``false`` becomes the truthy ``'False'``. Where a field's type is known, a string that parses
as that type is replaced by the typed value (servers get ``9101`` and ``False``), and one that does
not is an error naming the key, the value and the variable it came from (``GR-CONFIG-TYPE``).
Parsing is OmegaConf's own (``IntegerNode``, ``BooleanNode``, ``FloatNode``: booleans accept
``true/false``, ``yes/no``, ``on/off``, ``1/0``, any case).

Known fields:

* every server instance's ``port`` and ``num_workers`` (int);
* ``head_server.port`` (int);
* Gym's well-known top-level keys, which Gym reads by truthiness or as numbers (NeMo Gym 0.4.0
  ``nemo_gym/global_config.py`` reserved keys, ``nemo_gym/cli/setup_command.py``): see :data:`TOP_LEVEL`.

Any other value that an ``oc.env`` interpolation turned into a false-looking string (``'False'``,
``'0'``, ``'no'``, ...) is a warning (``GR-CONFIG-TRUTHY``) naming the key: code testing it by
truthiness (``if cfg.flag:``) takes it as true. The fix is ``${oc.decode:${oc.env:VAR,false}}``.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from omegaconf.errors import ValidationError
from omegaconf.nodes import BooleanNode, FloatNode, IntegerNode

from gym_runtime.config.sources import Sources
from gym_runtime.errors import Violation
from gym_runtime.package.layout import SERVER_TYPES

TOP_LEVEL: dict[str, type] = {
    "dry_run": bool,
    "skip_venv_if_present": bool,
    "pip_install_verbose": bool,
    "uv_pip_set_python": bool,
    "use_absolute_ip": bool,
    "verbose": bool,
    "json": bool,
    "error_on_almost_servers": bool,
    "allow_openai_version_skew": bool,
    "port_range_low": int,
    "port_range_high": int,
    "model_endpoint_readiness_timeout_seconds": float,
    "uvicorn_timeout_worker_healthcheck": float,
}
HEAD_SERVER: dict[str, type] = {"port": int}
INSTANCE: dict[str, type] = {"port": int, "num_workers": int}
_NODES = {
    int: (IntegerNode, "an integer"),
    bool: (BooleanNode, "a boolean (true/false)"),
    float: (FloatNode, "a number"),
}
# the variable of an ``${oc.env:VAR...}`` interpolation (its first, with ``search``)
ENV_REF = re.compile(r"\$\{oc\.env:\s*([A-Za-z_][A-Za-z0-9_]*)")


def _origin(raw: Any) -> str:
    """`` (from VAR)`` when the raw value is an ``oc.env`` interpolation, else ``''``."""
    m = ENV_REF.search(raw) if isinstance(raw, str) else None
    return f" (from {m.group(1)})" if m else ""


def _coerce(value: Any, kind: type) -> tuple[bool, Any]:
    """``(ok, typed value)``: strings are parsed by OmegaConf's node of ``kind``; values of the
    right type pass; anything else is left for the other checks (``ok`` True, unchanged)."""
    if not isinstance(value, str):
        return True, value
    node, _ = _NODES[kind]
    try:
        return True, node(value)._value()
    except ValidationError:
        return False, value


def _false_looking(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        return BooleanNode(value)._value() is False
    except ValidationError:
        return False


def _get(node: Any, key: str) -> Any:
    return node.get(key) if isinstance(node, dict) else None


def apply_known_types(
    data: dict[str, Any], raw: dict[str, Any], sources: Sources
) -> tuple[dict[str, Any], list[Violation], list[Violation]]:
    """Type the known fields of the resolved ``data`` (``raw``: the same config unresolved, to name
    the variable a value came from). Returns ``(typed copy, errors, warnings)``."""
    out = copy.deepcopy(data)
    errors: list[Violation] = []
    known: set[str] = set()

    def check(container: dict[str, Any], raw_container: Any, field: str, kind: type, path: str) -> None:
        known.add(path)
        if field not in container:
            return
        ok, typed = _coerce(container[field], kind)
        if ok:
            container[field] = typed
            return
        origin, what = _origin(_get(raw_container, field)), _NODES[kind][1]
        var = origin[len(" (from ") : -1]
        errors.append(
            Violation(
                "GR-CONFIG-TYPE",
                f"{container[field]!r}{origin} is not {what}",
                file=sources.of(path),
                key=path,
                hint=f"set {var} to {what}, or unset it for the config's default"
                if var
                else f"write {what} for {path}",
            )
        )

    for field, kind in TOP_LEVEL.items():
        check(out, raw, field, kind, field)
    if isinstance(out.get("head_server"), dict):
        for field, kind in HEAD_SERVER.items():
            check(out["head_server"], _get(raw, "head_server"), field, kind, f"head_server.{field}")
    for name, value in out.items():
        stype = next(iter(value), None) if isinstance(value, dict) and len(value) == 1 else None
        if stype not in SERVER_TYPES or not isinstance(value[stype], dict):
            continue
        for impl, inner in value[stype].items():
            if isinstance(inner, dict):
                raw_inner = _get(_get(_get(raw, name), stype), impl)
                for field, kind in INSTANCE.items():
                    check(inner, raw_inner, field, kind, f"{name}.{stype}.{impl}.{field}")
    return out, errors, _truthy_warnings(out, raw, sources, known)


def _truthy_warnings(data: Any, raw: Any, sources: Sources, known: set[str], path: str = "") -> list[Violation]:
    """A warning per value of an unknown type that ``oc.env`` made a false-looking string."""
    out: list[Violation] = []
    if isinstance(data, dict):
        for k, v in data.items():
            p = f"{path}.{k}" if path else str(k)
            out += _truthy_warnings(v, _get(raw, k), sources, known, p)
    elif isinstance(data, list):
        for i, v in enumerate(data):
            r = raw[i] if isinstance(raw, list) and i < len(raw) else None
            out += _truthy_warnings(v, r, sources, known, f"{path}[{i}]")
    elif path not in known and _false_looking(data) and _origin(raw):
        var = _origin(raw)[len(" (from ") : -1]
        out.append(
            Violation(
                "GR-CONFIG-TRUTHY",
                f"is the string {data!r}{_origin(raw)}, which code testing it as a flag (`if cfg.x:`) takes as true",
                file=sources.of(path),
                key=path,
                hint=f"if it is a flag, write ${{oc.decode:${{oc.env:{var},false}}}} to get a boolean",
            )
        )
    return out
