"""Read, without running anything, what a server tree's entrypoint class declares: ``ray_enabled``,
and the plain-``str`` fields of its config class.

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
* a base from a server tree the package does not ship but the Gym wheel does (NeMo Gym 0.7.0's
  ``gpqa_diamond`` subclasses ``resources_servers.mcqa.app.MCQAResourcesServer``, which a Gym
  venv's ``site-packages`` holds) counts with the literal ``True`` / ``False`` the index records
  for that class; one the index records none for is *missing* (below), its bases unread;
* a base found nowhere (a third-party library) declares nothing.

Only literal values count (``True``, ``False``, ``None``); anything else is undeclared.

The config class is the one the server class (or the first of its bases that does) annotates as
``config: ExampleConfig`` (NeMo Gym ``nemo_gym/server_utils.py``: ``load_config_from_global_config``
validates the server's block with it, pydantic). Its fields annotated plain ``str`` refuse None;
they are read from it and its bases in the tree or the package (a subclass's annotation wins);
the SDK's own bases (``host``, ``port``, ``entrypoint``, ``name``: filled by the runtime) are not.
A class of its lineage with a validator that runs before pydantic's checks (``mode="before"``,
``"wrap"`` or ``"plain"``, ``pre=True``) may turn None into a value: then no field counts.
The fields that take text (``texts``: ``str``, ``str | None``, ``Optional[str]``, a ``list``,
``tuple``, ``set`` or ``Sequence`` of ``str``, a ``Literal`` of strings) are read the same way:
pydantic refuses a boolean there, which is what YAML 1.1 makes of an unquoted ``yes`` or ``off``.

Files are untrusted input: each is read at most once and bounded in size, and the walk in depth.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_FILE_BYTES = 4 << 20
MAX_DEPTH = 12
SDK = "nemo_gym"


def ray_enabled_stmt(node: ast.ClassDef) -> ast.Assign | ast.AnnAssign | None:
    """The statement ``ray_enabled = <True|False|None>`` (plain or annotated) in a class body, or
    None when the class declares no literal value (how NeMo Gym 0.7.0's ``BaseServer`` subclasses
    say whether they use Ray)."""
    for stmt in node.body:
        target, value = None, None
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            target, value = stmt.target, stmt.value
        if (
            isinstance(stmt, (ast.Assign, ast.AnnAssign))
            and isinstance(target, ast.Name)
            and target.id == "ray_enabled"
            and isinstance(value, ast.Constant)
            and value.value in (True, False, None)
        ):
            return stmt
    return None


@dataclass(frozen=True)
class RayDeclaration:
    """What the entrypoint's server class says: ``server_class`` (``None``: the entrypoint calls
    no ``run_webserver()``), ``declared`` (a literal ``ray_enabled`` was found on it or a base),
    ``value`` (``True``/``False``/``None``) and ``where`` (``app.py:41 ExampleServer.ray_enabled =
    False``, or why nothing was found); ``missing``: bases imported from a module found neither in
    the tree nor the package nor the SDK (``responses_api_agents.harbor_agent.app.HarborAgent``),
    whose own declaration could not be read."""

    server_class: str | None
    declared: bool
    value: bool | None
    where: str
    missing: tuple[str, ...] = ()


@dataclass(frozen=True)
class ConfigClass:
    """The config class of an entrypoint's server class: ``name`` (``SimpleModelServerConfig``) and
    ``strings``: field -> where it is declared plain ``str``
    (``responses_api_models/openai_model/app.py:38 SimpleModelServerConfig.openai_api_key: str``);
    ``texts``: field -> where it is declared to take text (module doc), ``strings`` included
    (``app.py:9 LabelConfig.labels: list[str]``)."""

    name: str
    strings: dict[str, str]
    texts: dict[str, str] = field(default_factory=dict)


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
        self.missing: list[str] = []  # module.Class of each import whose module was found nowhere

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

    def locate(self, name: str, mod: _Module, depth: int) -> tuple[ast.ClassDef, _Module] | str | None:
        """The class ``name`` (dotted) as seen from ``mod``: its node and module when it is defined in
        the tree or the package, its dotted name when it is the Gym SDK's, None when found nowhere."""
        if depth > MAX_DEPTH:
            return None
        head, _, rest = name.partition(".")
        node: ast.AST
        for node in mod.tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return node, mod
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
            return f"{module}.{cls}"
        path = self.find_module(module, level, mod.path)
        target = self.load(path) if path else None
        if target is None and not level:
            if self._wheel_declares(f"{module}.{cls}"):
                return f"{module}.{cls}"
            self.missing.append(f"{module}.{cls}")
        return self.locate(cls, target, depth + 1) if target else None

    def _wheel_declares(self, qualname: str) -> bool:
        """Whether ``qualname``, a class of a server tree the Gym wheel ships (``site-packages`` of a
        Gym venv), declares a literal ``True`` / ``False`` of its own, as the index records it."""
        return self.index is not None and self.index.ray_of(qualname)[1] is not None

    def lineage(self, name: str, mod: _Module, depth: int = 0):
        """The class ``name`` and its bases in resolution order (left to right, depth first), each
        as :meth:`locate` gives it; classes found nowhere are left out."""
        found = self.locate(name, mod, depth)
        if found is None or depth > MAX_DEPTH:
            return
        yield found
        if isinstance(found, tuple):
            node, where = found
            for base in node.bases:
                if (dotted := _dotted(base)) is not None:
                    yield from self.lineage(dotted, where, depth + 1)

    def ray_enabled(self, name: str, mod: _Module) -> tuple[bool | None, str] | None:
        """``(value, where)`` of the first ``ray_enabled`` declared on ``name`` or its bases (module
        doc), None when none is."""
        for found in self.lineage(name, mod):
            if isinstance(found, str):
                declared, value = self.index.ray_of(found) if self.index is not None else (False, None)
                if declared and value is not None:
                    source = "the Gym SDK" if found.startswith(SDK + ".") else "the Gym wheel's own tree"
                    return value, f"{found}.ray_enabled ({source})"
                continue
            node, where = found
            if (stmt := ray_enabled_stmt(node)) is not None:
                value = stmt.value.value  # type: ignore[union-attr]  # ray_enabled_stmt returns only statements whose value is a Constant
                return value, f"{where.rel}:{stmt.lineno} {node.name}.ray_enabled = {value}"
        return None


def _entry_class(tree: ast.Module) -> str | None:
    """The class whose ``run_webserver()`` the module calls: the first call under ``if __name__ ==
    "__main__":``, else the first call anywhere."""
    mains = [n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.dump(n.test)]
    for scope in (*mains, tree):
        calls = sorted(
            (n.lineno, name)
            for n in ast.walk(scope)
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "run_webserver"
            and (name := _dotted(n.func.value)) is not None
        )
        if calls:
            return calls[0][1]
    return None


def ray_declaration(
    server_dir: Path, entrypoint: str, package_root: Path | None = None, index: Any = None
) -> RayDeclaration:
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
    found = reader.ray_enabled(cls, mod)
    if found is None:
        return RayDeclaration(
            cls, False, None, f"{cls} ({mod.rel}) and its bases declare no ray_enabled", tuple(reader.missing)
        )
    return RayDeclaration(cls, True, found[0], found[1])


_CONVERTING = {"before", "wrap", "plain"}


def _converts_first(node: ast.ClassDef) -> bool:
    """Whether a method of ``node`` is a pydantic validator that runs before the type checks."""
    for fn in node.body:
        for dec in getattr(fn, "decorator_list", []):
            if (
                isinstance(dec, ast.Call)
                and (_dotted(dec.func) or "").endswith("validator")
                and any(
                    (k.arg == "mode" and isinstance(k.value, ast.Constant) and k.value.value in _CONVERTING)
                    or (k.arg == "pre" and isinstance(k.value, ast.Constant) and k.value.value is True)
                    for k in dec.keywords
                )
            ):
                return True
    return False


def _plain_str(annotation: ast.expr) -> bool:
    return (isinstance(annotation, ast.Name) and annotation.id == "str") or (
        isinstance(annotation, ast.Constant) and annotation.value == "str"
    )


_TEXT_CONTAINERS = frozenset(
    {
        "list",
        "List",
        "tuple",
        "Tuple",
        "set",
        "Set",
        "frozenset",
        "FrozenSet",
        "Sequence",
        "typing.List",
        "typing.Sequence",
        "collections.abc.Sequence",
        "Optional",
        "typing.Optional",
    }
)


def _text_like(annotation: ast.expr) -> bool:
    """Whether a field annotated ``annotation`` takes text (module doc): ``str``, ``str | None``,
    ``Optional[str]``, ``list[str]`` (and the other containers of :data:`_TEXT_CONTAINERS`),
    ``tuple[str, ...]``, ``Literal["a", "b"]``."""
    if _plain_str(annotation):
        return True
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        sides = (annotation.left, annotation.right)
        return any(_text_like(s) for s in sides) and all(
            _text_like(s) or (isinstance(s, ast.Constant) and s.value is None) for s in sides
        )
    if isinstance(annotation, ast.Subscript):
        outer = _dotted(annotation.value) or ""
        inner = annotation.slice
        items = list(inner.elts) if isinstance(inner, ast.Tuple) else [inner]
        if outer.split(".")[-1] == "Literal":
            return all(isinstance(i, ast.Constant) and isinstance(i.value, str) for i in items)
        if outer in _TEXT_CONTAINERS:
            return any(_text_like(i) for i in items) and all(
                _text_like(i) or (isinstance(i, ast.Constant) and i.value in (None, Ellipsis)) for i in items
            )
    return False


def _annotated(node: ast.ClassDef) -> list[tuple[str, ast.AnnAssign]]:
    """The class body's ``name: annotation`` statements, each with its name."""
    return [(s.target.id, s) for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]


def config_class(server_dir: Path, entrypoint: str, package_root: Path | None = None) -> ConfigClass | None:
    """The config class of the entrypoint's server class (module doc), or None when there is no
    server class, no ``config`` annotation on it or its bases, or the class is the Gym SDK's or
    found nowhere."""
    reader = _Reader(server_dir, package_root, None)
    mod = reader.load(server_dir / entrypoint)
    cls = _entry_class(mod.tree) if mod is not None else None
    if cls is None or mod is None:
        return None
    for found in reader.lineage(cls, mod):
        ann = (
            next((a for key, a in _annotated(found[0]) if key == "config"), None) if isinstance(found, tuple) else None
        )
        if ann is not None:
            name, where = _dotted(ann.annotation), found[1]
            break
    else:
        return None
    if name is None:
        return None
    lineage = list(reader.lineage(name, where))
    if not lineage or not isinstance(lineage[0], tuple):  # found nowhere, or the SDK's own
        return None
    seen: set[str] = set()
    strings: dict[str, str] = {}
    texts: dict[str, str] = {}
    for node, m in (found for found in lineage if isinstance(found, tuple)):
        if _converts_first(node):
            return ConfigClass(name, {})
        for key, a in _annotated(node):
            if key not in seen:
                seen.add(key)
                if _plain_str(a.annotation):
                    strings[key] = f"{m.rel}:{a.lineno} {node.name}.{key}: str"
                if _text_like(a.annotation):
                    texts[key] = f"{m.rel}:{a.lineno} {node.name}.{key}: {ast.unparse(a.annotation)}"
    return ConfigClass(name, strings, texts)
