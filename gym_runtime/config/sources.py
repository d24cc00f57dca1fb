"""Provenance of a merged config: which source (a config file relative to the package, an
override, the job's flags) set each dotted key last, which lists a later source replaced whole, and
which other values a later source overrode. Filled while :mod:`gym_runtime.config.merge` merges
the layers; read by every check that names the file behind a value (case C02: OmegaConf's own
errors carry ``full_key`` but no file name).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ReplacedList:
    """A list a later source replaced whole (OmegaConf merges mappings key by key but never lists):
    ``key`` (dotted path), the source whose list is in effect (``winner``) and the earlier sources
    whose lists it replaced, in order."""

    key: str
    winner: str
    replaced: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "winner": self.winner, "replaced": list(self.replaced)}


@dataclass
class Sources:
    """Provenance: dotted key path -> where its value was last set (file or flag); ``replaced_lists``:
    every list a later source replaced (:class:`ReplacedList`, by key); ``overridden``: every other
    value a later source (or an inheriting block, docs/environment-packages.md "Composition") set
    differently, in the same shape; ``inherits``: per block that took another block as its template
    (``_inherit_from``, ``_copy``), the template's key path and the source that defined it."""

    by_key: dict[str, str] = field(default_factory=dict)
    replaced_lists: dict[str, ReplacedList] = field(default_factory=dict)
    overridden: dict[str, ReplacedList] = field(default_factory=dict)
    inherits: dict[str, tuple[str, str]] = field(default_factory=dict)

    def note_replaced_lists(self, base: Any, new: Any, source: str, prefix: str = "") -> None:
        """Before ``new`` (from ``source``) is merged over ``base`` (plain containers): remember each
        key where a list replaces a different list, and each other value ``new`` changes."""
        if isinstance(base, dict) and isinstance(new, dict):
            for k, v in new.items():
                if k in base:
                    self.note_replaced_lists(base[k], v, source, f"{prefix}.{k}" if prefix else str(k))
        elif isinstance(base, list) and isinstance(new, list) and base != new:
            self._note(self.replaced_lists, prefix, source)
        elif not isinstance(base, (dict, list)) and not isinstance(new, (dict, list)) and base != new and new != "???":
            self._note(self.overridden, prefix, source)

    def _note(self, table: dict[str, ReplacedList], key: str, source: str) -> None:
        before = table.get(key)
        earlier = before.replaced + (before.winner,) if before else (self.of(key) or "?",)
        table[key] = ReplacedList(key, source, earlier)

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

    def under(self, prefix: str) -> dict[str, str]:
        """The recorded entries at ``prefix`` and below it, keyed by their path below ``prefix``
        (``''`` for ``prefix`` itself, ``.x`` / ``[0]`` for the rest)."""
        return {
            k[len(prefix) :]: s
            for k, s in self.by_key.items()
            if k == prefix or k.startswith((prefix + ".", prefix + "["))
        }

    def drop(self, prefix: str) -> None:
        """Forget every entry at ``prefix`` and below it (a block that composition removed)."""
        for suffix in self.under(prefix):
            del self.by_key[prefix + suffix]
        for table in (self.replaced_lists, self.overridden):
            for k in [k for k in table if k == prefix or k.startswith((prefix + ".", prefix + "["))]:
                del table[k]

    def files_defining(self, prefix: str) -> list[str]:
        """Every distinct source that set a key under ``prefix`` (in first-seen order)."""
        out: list[str] = []
        for k, s in self.by_key.items():
            if (k == prefix or k.startswith(prefix + ".")) and s not in out:
                out.append(s)
        return out
