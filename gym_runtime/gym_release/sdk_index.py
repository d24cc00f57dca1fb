"""An index of one NeMo Gym SDK release: which ``nemo_gym`` modules exist and which top-level names
each one offers, read from the release's own sources with :mod:`ast` (nothing is imported).

A module's names are everything a ``from nemo_gym.x import name`` finds there: functions, classes
and variables defined at its top level (also inside top-level ``if``/``try`` blocks), the names it
imports (re-exports), the public names of modules it star-imports, and its submodules. A module
that defines a module-level ``__getattr__`` (PEP 562: NeMo Gym 0.7.0's lazy exports and moved-name
shims) answers any name: it is *open*, and no name imported from it is ever reported missing.
Classes that declare ``ray_enabled`` (NeMo Gym 0.7.0 ``nemo_gym/server_utils.py``) are recorded
with the declared value, for :mod:`gym_runtime.package.server_class`: the SDK's, and those of the
server trees the wheel ships beside it (``resources_servers/mcqa/app.py``; a Gym venv has them in
``site-packages``, where a tree that subclasses one, as ``gpqa_diamond`` subclasses
``MCQAResourcesServer``, imports it from). A tree class's own literal declaration is all that is
recorded; its names and bases are not.

The indexes of the known releases are committed under ``indexes/`` (``nemo-gym-X.json.gz``); a
maintainer adds one with ``python -m gym_runtime.gym_release.sdk_index nemo_gym-X-py3-none-any.whl``
(it writes the file; docs/runtime.md, "Gym releases"). A ``nemo_gym`` wheel a package vendors is
indexed from the wheel itself (:func:`index_for`). Shape of a file: ``{"version", "modules":
{module: "name name ..."}, "open": [module, ...], "ray_enabled": {"module.Class": bool | null}}``.
"""

from __future__ import annotations

import ast
import gzip
import json
import sys
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from gym_runtime.gym_release.choose import vendored_sdk
from gym_runtime.package.server_class import ray_enabled_stmt

if TYPE_CHECKING:
    from gym_runtime.gym_release.base import GymRelease
    from gym_runtime.package import Package

SDK = "nemo_gym"
INDEX_DIR = Path(__file__).resolve().parent / "indexes"


@dataclass(frozen=True)
class SdkIndex:
    """``modules``: module -> its top-level names; ``open``: modules answering any name
    (a module ``__getattr__``); ``ray_enabled``: ``module.Class`` -> its declared ``ray_enabled``."""

    version: str
    modules: dict[str, frozenset[str]]
    open: frozenset[str] = frozenset()
    ray_enabled: dict[str, bool | None] = field(default_factory=dict)

    def has_module(self, module: str) -> bool:
        return module in self.modules

    def has_name(self, module: str, name: str) -> bool:
        """True when ``from module import name`` finds ``name`` (a name or a submodule)."""
        return module in self.open or name in self.modules.get(module, ()) or f"{module}.{name}" in self.modules

    def ray_of(self, qualname: str) -> tuple[bool, bool | None]:
        """``(declared, value)`` of ``module.Class``'s own ``ray_enabled``."""
        return (qualname in self.ray_enabled, self.ray_enabled.get(qualname))

    def to_json(self) -> dict:
        return {
            "version": self.version,
            "modules": {m: " ".join(sorted(n)) for m, n in sorted(self.modules.items())},
            "open": sorted(self.open),
            "ray_enabled": dict(sorted(self.ray_enabled.items())),
        }

    @classmethod
    def from_json(cls, data: dict) -> SdkIndex:
        return cls(
            str(data["version"]),
            {m: frozenset(n.split()) for m, n in data["modules"].items()},
            frozenset(data.get("open", ())),
            dict(data.get("ray_enabled", {})),
        )


# ---------------------------------------------------------------------------------------------- building
def _top_level(body: list[ast.stmt]) -> Iterable[ast.stmt]:
    """Statements at module level, including those inside top-level ``if``/``try``/``with`` blocks."""
    for node in body:
        yield node
        if isinstance(node, (ast.If, ast.Try, ast.With)):
            for part in ("body", "orelse", "finalbody"):
                yield from _top_level(getattr(node, part, []))
            for h in getattr(node, "handlers", []):
                yield from _top_level(h.body)


def _targets(node: ast.expr) -> Iterable[str]:
    if isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, (ast.Tuple, ast.List)):
        for e in node.elts:
            yield from _targets(e)


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute module of ``from <level dots><target> import ...`` inside ``module``."""
    if level == 0:
        return target or ""
    parts = module.split(".") if is_package else module.split(".")[:-1]
    base = parts[: len(parts) - (level - 1)] if level > 1 else parts
    return ".".join([*base, *([target] if target else [])])


@dataclass
class _Module:
    """What one module's source says: its names, the modules it star-imports, whether it defines a
    module ``__getattr__``, and the ``ray_enabled`` its classes declare."""

    names: set[str] = field(default_factory=set)
    stars: list[str] = field(default_factory=list)
    open: bool = False
    ray: dict[str, bool | None] = field(default_factory=dict)


def _read_module(module: str, is_package: bool, text: str) -> _Module:
    out = _Module()
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return out
    for node in _top_level(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.names.add(node.name)
            if isinstance(node, ast.ClassDef) and (stmt := ray_enabled_stmt(node)) is not None:
                out.ray[f"{module}.{node.name}"] = stmt.value.value  # type: ignore[union-attr]  # ray_enabled_stmt returns only statements whose value is a Constant
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                out.names.update(_targets(t))
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
            out.names.add(node.target.id)
        elif isinstance(node, ast.Import):
            out.names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                if a.name == "*":
                    out.stars.append(_resolve(module, is_package, node.level, node.module))
                else:
                    out.names.add(a.asname or a.name)
    out.open = "__getattr__" in out.names
    return out


def index_sources(version: str, sources: Iterable[tuple[str, bool, str]]) -> SdkIndex:
    """The index of the modules ``sources`` yields as ``(module, is_package, source text)``; a file
    that does not parse contributes its module with no names."""
    read = {module: _read_module(module, package, text) for module, package, text in sources}
    names = {m: set(r.names) for m, r in read.items()}
    for module in list(names):  # submodules are names of their package
        parent, _, child = module.rpartition(".")
        if parent in names:
            names[parent].add(child)
    for _ in range(4):  # star imports, a few levels deep
        for module, r in read.items():
            for src in r.stars:
                names[module] |= {n for n in names.get(src, ()) if not n.startswith("_")}
    ray = {k: v for r in read.values() for k, v in r.ray.items()}
    return SdkIndex(
        version, {m: frozenset(n) for m, n in names.items()}, frozenset(m for m, r in read.items() if r.open), ray
    )


class WheelIndex:
    """The index of a ``nemo_gym`` wheel, read lazily: the wheel's member list says which modules
    exist, and a module's source is parsed only when a name is looked up in it (a tree imports a
    handful of the SDK's ~200 modules; parsing all of 0.7.0 takes ~1.5 s). Same questions as
    :class:`SdkIndex`. Raises ``OSError`` / ``zipfile.BadZipFile`` for a file that is no wheel."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.version = path.name.split("-")[1] if path.name.count("-") >= 2 else "?"
        with zipfile.ZipFile(path) as z:
            members = [n for n in z.namelist() if n.endswith(".py")]
        self._files: dict[str, tuple[str, bool]] = {}
        self._trees: dict[str, tuple[str, bool]] = {}  # the server trees' modules: read for ray_enabled only
        for n in members:
            parts = n[:-3].split("/")
            package = parts[-1] == "__init__"
            module = ".".join(parts[:-1] if package else parts)
            if parts[0] == SDK:
                self._files[module] = (n, package)
            elif not parts[0].endswith(".dist-info"):
                self._trees[module] = (n, package)
        self._read: dict[str, _Module] = {}

    def _module(self, module: str) -> _Module:
        if module not in self._read:
            member, package = self._files.get(module) or self._trees[module]
            with zipfile.ZipFile(self.path) as z:
                text = z.read(member).decode("utf-8", "replace")
            self._read[module] = _read_module(module, package, text)
        return self._read[module]

    def has_module(self, module: str) -> bool:
        return module in self._files

    def _names(self, module: str, depth: int = 0) -> set[str]:
        r = self._module(module)
        out = set(r.names)
        for src in r.stars if depth < 4 else ():
            if src in self._files:
                out |= {n for n in self._names(src, depth + 1) if not n.startswith("_")}
        return out

    def has_name(self, module: str, name: str) -> bool:
        if f"{module}.{name}" in self._files:
            return True
        if module not in self._files:
            return False
        return self._module(module).open or name in self._names(module)

    def ray_of(self, qualname: str) -> tuple[bool, bool | None]:
        """``(declared, value)`` of ``module.Class``'s own ``ray_enabled``."""
        module = qualname.rpartition(".")[0]
        if module not in self._files and module not in self._trees:
            return False, None
        ray = self._module(module).ray
        return (qualname in ray, ray.get(qualname))


def index_wheel(path: Path) -> SdkIndex:
    """The whole index of a ``nemo_gym`` wheel (its ``nemo_gym/**.py`` members, and the ``ray_enabled``
    its server trees' classes declare; the version from its file name), as committed under
    ``indexes/``. Raises ``OSError`` / ``zipfile.BadZipFile`` for a file that is not a readable wheel."""
    lazy = WheelIndex(path)
    with zipfile.ZipFile(path) as z:
        sources = [
            (m, package, z.read(member).decode("utf-8", "replace"))
            for m, (member, package) in sorted(lazy._files.items())
        ]
        trees = {
            k: v
            for m, (member, package) in sorted(lazy._trees.items())
            for k, v in _read_module(m, package, z.read(member).decode("utf-8", "replace")).ray.items()
        }
    sdk = index_sources(lazy.version, sources)
    return SdkIndex(sdk.version, sdk.modules, sdk.open, {**sdk.ray_enabled, **trees})


# ---------------------------------------------------------------------------------------------- lookup
def index_file(version: str) -> Path:
    return INDEX_DIR / f"nemo-gym-{version}.json.gz"


@lru_cache(maxsize=16)
def committed_index(version: str) -> SdkIndex | None:
    """The committed index of release ``version``, or None when there is none."""
    path = index_file(version)
    if not path.is_file():
        return None
    return SdkIndex.from_json(json.loads(gzip.decompress(path.read_bytes())))


def known_indexes() -> list[SdkIndex]:
    """Every committed index, oldest release first (for "which releases have it")."""
    from packaging.version import Version

    versions = sorted(
        (p.name.removeprefix("nemo-gym-").removesuffix(".json.gz") for p in INDEX_DIR.glob("*.json.gz")), key=Version
    )
    return [i for v in versions if (i := committed_index(v)) is not None]


@lru_cache(maxsize=4)
def _wheel_index(path: str, size: int, mtime_ns: int) -> WheelIndex:
    """One lazy index per wheel file version, shared by the import scan and the Ray reading."""
    return WheelIndex(Path(path))


def index_for(release: GymRelease, package: Package | None) -> tuple[SdkIndex | WheelIndex | None, str]:
    """The index to check ``package``'s trees against, and where it comes from: the vendored
    ``nemo_gym`` wheel the release was chosen from, else the committed index of the release
    (``(None, why)`` when there is none)."""
    wheel = vendored_sdk(package) if package is not None else None
    if wheel is not None:
        try:
            st = wheel.path.stat()
            return _wheel_index(str(wheel.path), st.st_size, st.st_mtime_ns), f"wheels/{wheel.filename}"
        except (OSError, zipfile.BadZipFile):
            return None, f"wheels/{wheel.filename} cannot be read"
    found = committed_index(str(release.version))
    return found, (
        f"the index of nemo-gym {release.version}"
        if found
        else f"the runtime has no index of nemo-gym {release.version}"
    )


def main(argv: list[str]) -> int:
    """``python -m gym_runtime.gym_release.sdk_index WHEEL [OUT]``: write the index of a ``nemo_gym``
    wheel (default ``indexes/nemo-gym-<version>.json.gz`` beside this module)."""
    if not argv:
        print(main.__doc__, file=sys.stderr)
        return 2
    idx = index_wheel(Path(argv[0]))
    out = Path(argv[1]) if len(argv) > 1 else index_file(idx.version)
    out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(idx.to_json(), separators=(",", ":"), sort_keys=True).encode()
    out.write_bytes(gzip.compress(text, compresslevel=9, mtime=0))
    print(
        f"{out}: {len(idx.modules)} modules, {sum(map(len, idx.modules.values()))} names, "
        f"{len(idx.open)} open, {out.stat().st_size} bytes"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
