"""Read, without running anything, what a server tree's entrypoint class declares: ``ray_enabled``.

NeMo Gym 0.7.0 ``nemo_gym/server_utils.py``: ``SimpleServer.ray_enabled: ClassVar[bool | None] =
None``; ``run_webserver()`` calls ``ray.init`` unless the class it is called on says
``ray_enabled = False`` (undeclared, ``None``, means Ray with a warning). The class is the one
whose ``run_webserver()`` the entrypoint calls (``ExampleServer.run_webserver()`` under ``if
__name__ == "__main__":``). Its own body decides; else its bases, left to right, depth first
(Python's method resolution order for the single and mixin inheritance trees use):

* a base defined in the entrypoint's module, or in a module found under the server directory (the
  entrypoint's ``sys.path[0]``) or the package root (trees a package ships beside it, as the
  ``nemo-gym`` wheel ships them), is read the same way;
* a base from the Gym SDK (``nemo_gym.*``) counts with the value the SDK index records for it
  (:mod:`gym_runtime.gym_release.sdk_index`); an SDK class without its own declaration is
  passed over, since the only SDK declaration in 0.7.0 is ``SimpleServer``'s ``None``, last in
  every server's resolution order;
* a base found nowhere (a third-party library) declares nothing.

Only literal values count (``True``, ``False``, ``None``); anything else is undeclared. Files are
untrusted input: each is read at most once and bounded in size, and the walk in depth.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gym_runtime.gym_release.sdk_index import ray_enabled_stmt

MAX_FILE_BYTES = 4 << 20
MAX_DEPTH = 12
SDK = "nemo_gym"


@dataclass(frozen=True)
class RayDeclaration:
    """What the entrypoint's server class says: ``server_class`` (``None``: the entrypoint calls
    no ``run_webserver()``), ``declared`` (a literal ``ray_enabled`` was found on it or a base),
    ``value`` (``True``/``False``/``None``) and ``where`` (``app.py:41 ExampleServer.ray_enabled =
    False``, or why nothing was found)."""

    server_class: str | None
    declared: bool
    value: bool | None
    where: str


@dataclass
class _Module:
    path: Path
    tree: ast.Module
    rel: str


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and (left := _dotted(node.value)):
        return f"{left}.{node.attr}"
    return None


class _Reader:
    def __init__(self, server_dir: Path, package_root: Path | None, index: Any) -> None:
        self.roots = [server_dir] + ([package_root] if package_root else [])
        self.base = package_root or server_dir
        self.index = index
        self.modules: dict[Path, _Module | None] = {}

    def load(self, path: Path) -> _Module | None:
        if path not in self.modules:
            self.modules[path] = None
            try:
                if path.is_file() and not path.is_symlink() and path.stat().st_size <= MAX_FILE_BYTES:
                    tree = ast.parse(path.read_bytes().decode("utf-8", "replace"))
                    try:
                        rel = path.relative_to(self.base).as_posix()
                    except ValueError:
                        rel = path.name
                    self.modules[path] = _Module(path, tree, rel)
            except (OSError, SyntaxError, ValueError):
                pass
        return self.modules[path]

    def find_module(self, dotted: str, level: int, here: Path) -> Path | None:
        parts = dotted.split(".") if dotted else []
        if level:
            start = here.parent
            for _ in range(level - 1):
                start = start.parent
            bases = [start]
        else:
            bases = self.roots
        for b in bases:
            for cand in (b.joinpath(*parts).with_suffix(".py") if parts else None, b.joinpath(*parts, "__init__.py")):
                if cand is not None and cand.is_file():
                    return cand
        return None

    def resolve(self, name: str, mod: _Module, depth: int) -> tuple[bool, bool | None, str] | None:
        """``(declared, value, where)`` for the class ``name`` (dotted) as seen from ``mod``; None
        when nothing on it or its bases declares ``ray_enabled``."""
        if depth > MAX_DEPTH:
            return None
        head, _, rest = name.partition(".")
        for node in mod.tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return self.of_class(node, mod, depth)
        for node in ast.walk(mod.tree):
            if isinstance(node, ast.ImportFrom):
                for a in node.names:
                    if (a.asname or a.name) == head:
                        target = f"{a.name}.{rest}" if rest else a.name
                        return self.in_module(node.module or "", node.level, target, mod, depth)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    bound = a.asname or a.name.split(".")[0]
                    if bound == head and rest:
                        full = f"{a.name}.{rest}" if a.asname else name
                        module, _, cls = full.rpartition(".")
                        return self.in_module(module, 0, cls, mod, depth)
        return None

    def in_module(self, module: str, level: int, cls: str, mod: _Module, depth: int):
        if level == 0 and (module == SDK or module.startswith(SDK + ".")):
            if self.index is None:
                return None
            declared, value = self.index.ray_of(f"{module}.{cls}")
            return (True, value, f"{module}.{cls}.ray_enabled (the Gym SDK)") if declared and value is not None \
                else None
        path = self.find_module(module, level, mod.path)
        target = self.load(path) if path else None
        return self.resolve(cls, target, depth + 1) if target else None

    def of_class(self, node: ast.ClassDef, mod: _Module, depth: int):
        stmt = ray_enabled_stmt(node)
        if stmt is not None:
            value = stmt.value.value  # type: ignore[union-attr]
            return True, value, f"{mod.rel}:{stmt.lineno} {node.name}.ray_enabled = {value}"
        for base in node.bases:
            dotted = _dotted(base)
            found = self.resolve(dotted, mod, depth + 1) if dotted else None
            if found is not None:
                return found
        return None


def _entry_class(tree: ast.Module) -> str | None:
    """The class whose ``run_webserver()`` the module calls: the first call under ``if __name__ ==
    "__main__":``, else the first call anywhere."""
    mains = [n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.dump(n.test)]
    for scope in (*mains, tree):
        calls = sorted((n.lineno, name) for n in ast.walk(scope) if isinstance(n, ast.Call)
                       and isinstance(n.func, ast.Attribute) and n.func.attr == "run_webserver"
                       and (name := _dotted(n.func.value)) is not None)
        if calls:
            return calls[0][1]
    return None


def ray_declaration(server_dir: Path, entrypoint: str, package_root: Path | None = None,
                    index: Any = None) -> RayDeclaration:
    """What the entrypoint's server class declares (module doc). ``index``: the SDK index of the
    release in force (``has ray_of``), or None."""
    reader = _Reader(server_dir, package_root, index)
    path = server_dir / entrypoint
    try:  # most entrypoints of a Gym tree are small; a plain script is not parsed at all
        calls = b"run_webserver" in path.read_bytes()[:MAX_FILE_BYTES]
    except OSError:
        calls = True  # reported by load() below
    if not calls:
        return RayDeclaration(None, False, None, f"{entrypoint} calls no run_webserver()")
    mod = reader.load(path)
    if mod is None:
        return RayDeclaration(None, False, None, f"{entrypoint} cannot be read")
    cls = _entry_class(mod.tree)
    if cls is None:
        return RayDeclaration(None, False, None, f"{mod.rel} calls no run_webserver()")
    found = reader.resolve(cls, mod, 0)
    if found is None:
        return RayDeclaration(cls, False, None, f"{cls} ({mod.rel}) and its bases declare no ray_enabled")
    return RayDeclaration(cls, found[0], found[1], found[2])
