"""Templates in a merged config: ``_inherit_from`` / ``${inherit_from:}``, ``_copy`` / ``${copy:}``, ``_delete_key``.

The rules of every Gym release line (NeMo Gym ``nemo_gym/global_config.py``,
``_recursively_swap_keys``), applied to the merged, unresolved plain config after every file,
override and policy value is merged (docs/environment-packages.md, "Composition"):

* a block ``b: {_inherit_from: a.x, k: v}`` becomes the block at ``a.x`` with ``b``'s own keys
  merged over it (OmegaConf's merge), and the block at ``a.x`` is **removed** (it was a template);
  ``b: ${inherit_from:a.x}`` is the same without own keys;
* ``_copy`` / ``${copy:a.x}`` do the same but keep ``a.x``;
* ``_delete_key: "k1, k2"`` removes those keys from the block; a key the block does not have is
  removed from what the block inherits, and a key it has neither way is an error when it inherits
  (``GR-CONFIG-DELETE-KEY``) and a warning when it does not (``GR-CONFIG-DELETE-NOTHING``: Gym
  ignores it);
* the template is the value *before* any template was applied (one level: a template that itself
  inherits is used as written, and its ``_inherit_from`` stays in the block, warning
  ``GR-CONFIG-INHERIT-CHAIN``); blocks are visited depth first in config order;
* a path through a ``???`` makes the block ``???`` (reported as a missing value).

Errors: ``GR-CONFIG-INHERIT`` (a path that names nothing, or a value that is not a block where a
block is needed) and ``GR-CONFIG-INHERIT-CYCLE`` (a block whose template leads back to itself).
Provenance moves with the blocks: each key of the result keeps the source that set it (the
template's file, or the inheriting block's own), every own key that replaced a different template
value is noted (``Sources.overridden``) and the block's template is recorded (``Sources.inherits``).
"""

from __future__ import annotations

import copy
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from gym_runtime.config.sources import ReplacedList, Sources
from gym_runtime.errors import Violation

INHERIT, COPY, DELETE = "_inherit_from", "_copy", "_delete_key"
_INHERIT_STR, _COPY_STR = "${inherit_from:", "${copy:"
_MISSING = object()


class _NotFound(Exception):
    pass


def _join(prefix: str, key: Any) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


def directive(value: Any) -> tuple[str, str | None, bool] | None:
    """``(kind, template path, as a key)`` when ``value`` applies a template: ``kind`` is
    ``inherit`` or ``copy``; the path is None when the directive's value is not a string."""
    if isinstance(value, str):
        for kind, prefix in (("inherit", _INHERIT_STR), ("copy", _COPY_STR)):
            if value.startswith(prefix):
                return kind, value.removeprefix(prefix).removesuffix("}"), False
        return None
    if isinstance(value, dict) and (INHERIT in value or COPY in value):
        kind, key = ("copy", COPY) if COPY in value else ("inherit", INHERIT)
        target = value[key]
        return kind, target if isinstance(target, str) and target and target != "???" else None, True
    return None


def _index(node: Any, parts: list[str]) -> Any:
    """The value at ``parts`` (mapping keys only), :data:`_MISSING` when the path passes a ``???``."""
    for part in parts:
        if not isinstance(node, dict) or part not in node:
            raise _NotFound
        if node[part] == "???":
            return _MISSING
        node = node[part]
    return node


class _Templates:
    def __init__(self, cfg: dict[str, Any], sources: Sources) -> None:
        self.cfg = cfg
        self.frozen = copy.deepcopy(cfg)
        self.frozen_sources = Sources(dict(sources.by_key))
        self.sources = sources
        self.errors: list[Violation] = []
        self.warnings: list[Violation] = []
        self.skip: set[str] = set()

    # -------------------------------------------------------------- cycles, found before anything moves
    def find_cycles(self) -> None:
        links: dict[str, str] = {}

        def walk(node: Any, prefix: str) -> None:
            items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
            for k, v in items:
                path = _join(prefix, k) if isinstance(node, dict) else f"{prefix}[{k}]"
                d = directive(v) if isinstance(node, dict) else None
                if d and d[1]:
                    links[path] = d[1]
                if isinstance(v, (dict, list)):
                    walk(v, path)

        walk(self.cfg, "")
        reported: set[str] = set()
        for start in links:
            seen, at = [start], links[start]
            while True:
                if at == start or start.startswith(at + ".") or at in seen[1:]:
                    break
                if at not in links:
                    seen = []
                    break
                seen.append(at)
                at = links[at]
            if seen and not reported & set(seen):
                reported |= set(seen)
                self.skip |= set(seen)
                self.errors.append(
                    Violation(
                        "GR-CONFIG-INHERIT-CYCLE",
                        f"inherits {links[start]}, which leads back to itself ({' -> '.join(seen + [at])})",
                        file=self._directive_source(start),
                        key=start,
                        hint="break the cycle: a template must not inherit from the block that uses it",
                    )
                )

    def _directive_source(self, path: str) -> str | None:
        return (
            self.sources.by_key.get(f"{path}.{INHERIT}")
            or self.sources.by_key.get(f"{path}.{COPY}")
            or self.sources.of(path)
        )

    # -------------------------------------------------------------- the walk
    def walk(self, node: dict[str, Any], prefix: str) -> None:
        for k, v in list(node.items()):
            path = _join(prefix, k)
            pending = self._delete_own(v, path)
            if isinstance(v, dict):
                self.walk(v, path)
            elif isinstance(v, list):
                for i, item in enumerate(v):
                    if isinstance(item, dict):
                        self.walk(item, f"{path}[{i}]")
            d = directive(v)
            if d is None or path in self.skip:
                if d is None and pending:
                    self.warnings.append(
                        Violation(
                            "GR-CONFIG-DELETE-NOTHING",
                            f"_delete_key names {', '.join(sorted(pending))}, which "
                            "this block does not have; nothing was deleted",
                            file=self.sources.of(path),
                            key=path,
                            hint="remove the names from _delete_key (it deletes keys the block has or inherits)",
                        )
                    )
                if d is not None and isinstance(v, dict):
                    v.pop(INHERIT, None), v.pop(COPY, None)
                continue
            self._apply(node, k, v, path, d, pending)

    def _delete_own(self, v: Any, path: str) -> set[str]:
        """Remove the keys ``_delete_key`` names that the block has; return the others."""
        if not isinstance(v, dict) or DELETE not in v:
            return set()
        names = v.pop(DELETE)
        if not isinstance(names, str):
            self.errors.append(
                Violation(
                    "GR-CONFIG-DELETE-KEY",
                    f"_delete_key must be a comma-separated string of key names, got {names!r}",
                    file=self.sources.of(f"{path}.{DELETE}"),
                    key=f"{path}.{DELETE}",
                    hint='write _delete_key: "key_one, key_two"',
                )
            )
            return set()
        wanted = {n.strip() for n in names.split(",")} - {""}
        present = wanted & set(v)
        for name in present:
            del v[name]
            self.sources.drop(f"{path}.{name}")
        return wanted - present

    def _apply(
        self, node: dict[str, Any], k: str, v: Any, path: str, d: tuple[str, str | None, bool], pending: set[str]
    ) -> None:
        kind, target, as_key = d
        where = {
            "file": self._directive_source(path),
            "key": f"{path}.{INHERIT if kind == 'inherit' else COPY}" if as_key else path,
        }
        if as_key:
            v.pop(INHERIT, None), v.pop(COPY, None)
        if target is None:
            self.errors.append(
                Violation(
                    "GR-CONFIG-INHERIT",
                    f"the {kind} directive must name a key path, e.g. `_inherit_from: my_template`",
                    **where,
                )
            )
            return
        parts = target.split(".")
        try:
            holder = _index(self.cfg, parts[:-1])
            if kind == "inherit" and holder is not _MISSING and isinstance(holder, dict) and parts[-1] in holder:
                del holder[parts[-1]]
                self.sources.drop(target)
            template = _index(self.frozen, parts)
        except _NotFound:
            self.errors.append(
                Violation(
                    "GR-CONFIG-INHERIT",
                    f"{'inherits' if kind == 'inherit' else 'copies'} {target}, which is not in the merged config",
                    **where,
                    hint="name a top-level block (e.g. an instance) or a dotted path to one, "
                    "defined in a config in config_paths",
                )
            )
            return
        if holder is _MISSING or template is _MISSING:
            node[k] = "???"
            return
        result = copy.deepcopy(template)
        if as_key:
            if not isinstance(template, dict):
                self.errors.append(
                    Violation(
                        "GR-CONFIG-INHERIT",
                        f"{target} is a {type(template).__name__}, not a block, so this block cannot add keys to it",
                        **where,
                        hint=f"write `{k}: ${{{kind}_from:{target}}}`".replace("copy_from", "copy"),
                    )
                )
                return
            try:
                result = OmegaConf.to_container(
                    OmegaConf.merge(OmegaConf.create(result), OmegaConf.create(v)), resolve=False
                )
            except (OmegaConfBaseException, TypeError, ValueError) as e:
                self.errors.append(
                    Violation(
                        "GR-CONFIG-INHERIT",
                        f"cannot be merged over {target}: {str(e).strip().splitlines()[0]}",
                        **where,
                    )
                )
                return
        node[k] = result
        self._adopt(path, target, v if as_key else {}, result)
        for name in sorted(pending):
            if isinstance(result, dict) and name in result:
                del result[name]
                self.sources.drop(f"{path}.{name}")
            else:
                self.errors.append(
                    Violation(
                        "GR-CONFIG-DELETE-KEY",
                        f"_delete_key names {name}, which neither this block nor {target} has",
                        file=self.sources.of(path),
                        key=path,
                        hint=f"remove {name} from _delete_key",
                    )
                )
        if isinstance(result, dict) and (chained := directive(result)):
            self.warnings.append(
                Violation(
                    "GR-CONFIG-INHERIT-CHAIN",
                    f"inherits {target}, which itself inherits {chained[1]}: one "
                    "level of templates is applied, so the directive stays in this block",
                    key=path,
                    file=self.sources.of(path),
                    hint=f"inherit from {chained[1]} here and repeat {target}'s "
                    "own keys, so the result does not depend on the order of the blocks",
                )
            )

    def _adopt(self, path: str, target: str, own: Any, result: Any) -> None:
        """Provenance of the block at ``path`` after it took ``target`` as its template: each key keeps
        the source that set it (own keys over the template's), and each own value that replaced a
        different template value is noted."""
        mine = {
            s: f
            for s, f in self.sources.under(path).items()
            if not s.startswith((f".{INHERIT}", f".{COPY}", f".{DELETE}"))
        }
        theirs = self.frozen_sources.under(target)
        self.sources.drop(path)
        self.sources.by_key.update({path + suffix: src for suffix, src in theirs.items()})
        self.sources.by_key.update({path + suffix: src for suffix, src in mine.items()})
        template = _index_or_none(self.frozen, target)
        for suffix in sorted(set(mine) & set(theirs)):
            ours, base = _leaf(own, suffix), _leaf(template, suffix)
            if not suffix or ours is None or isinstance(ours, dict) or ours == base:
                continue
            table = self.sources.replaced_lists if isinstance(ours, list) else self.sources.overridden
            table[path + suffix] = ReplacedList(path + suffix, mine[suffix], (theirs[suffix],))
        self.sources.inherits[path] = (target, self.frozen_sources.of(target) or "?")


def _index_or_none(node: Any, dotted: str) -> Any:
    try:
        found = _index(node, dotted.split("."))
    except _NotFound:
        return None
    return None if found is _MISSING else found


def _leaf(node: Any, suffix: str) -> Any:
    """The value at ``suffix`` (``.a.b``; list items are not followed) below ``node``, or None."""
    if "[" in suffix:
        return None
    for part in [p for p in suffix.split(".") if p]:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def apply_templates(cfg: dict[str, Any], sources: Sources) -> tuple[list[Violation], list[Violation]]:
    """Apply every template directive of ``cfg`` in place (module doc); returns ``(errors, warnings)``."""
    t = _Templates(cfg, sources)
    t.find_cycles()
    t.walk(cfg, "")
    return t.errors, t.warnings
