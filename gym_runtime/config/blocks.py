"""Top-level blocks a server names by string, for secret scoping (docs/architecture.md §4).

Besides server references (``{type, name}``) and interpolations (``${judge}``), a Gym server can
name a top-level block of the config by a plain string and read it from its own config at run
time: ``sandbox_provider: sandbox`` names the sandbox provider block ``sandbox:`` (NeMo Gym 0.7.0
``nemo_gym/sandbox/config.py``, ``resolve_provider_config``: the block is looked up in the server's
global config), and ``provider_config_ref`` does the same inside a sandbox connection
(``nemo_gym/sandbox/access.py``). The provider block holds the provider's credentials
(``api_key: ${oc.env:OPENSANDBOX_API_KEY}``), so the server that names it must receive them, and no
other server. Which keys name a block is the release profile's
(``GymRelease.block_reference_keys``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any


def named_blocks(data: dict[str, Any], instances: Iterable[str], keys: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """Per server instance, the top-level blocks its own block names by string under one of
    ``keys`` (at any depth, in lists too), in the order met; ``data`` is the resolved config. A
    name counts only when it is a top-level mapping that is not a server instance (an instance is
    reached through server references, never by this rule)."""
    names = set(instances)
    wanted = frozenset(keys)
    out: dict[str, tuple[str, ...]] = {}
    for inst in names:
        found = [
            v
            for k, v in _pairs(data.get(inst))
            if k in wanted and isinstance(v, str) and v not in names and isinstance(data.get(v), dict)
        ]
        if found:
            out[inst] = tuple(dict.fromkeys(found))
    return {n: out[n] for n in data if n in out}


def _pairs(node: Any) -> Iterator[tuple[Any, Any]]:
    if isinstance(node, dict):
        for k, v in node.items():
            yield k, v
            yield from _pairs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _pairs(v)
