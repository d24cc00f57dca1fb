"""Whether a server tree's own code reaches Ray, read without running anything.

A NeMo Gym 0.7 server whose class declares nothing about ``ray_enabled`` gets a Ray driver from
the SDK (``nemo_gym/server_utils.py`` ``_server_uses_ray``: undeclared still means Ray, with a
warning that a future release defaults it to false). Most such servers never call Ray: the
runtime gives them none when nothing in their tree imports it (docs/runtime.md, "Ray").

What counts, in every ``.py`` file under the server directory (hidden directories, ``__pycache__``
and venvs left out): an ``import``/``from ... import`` of one of ``modules`` or a submodule of it
(``ray``, ``ray.util``; a release's own Ray users, e.g. ``nemo_gym.orchestration.ray_serve_gateway``),
a ``from M import name`` where ``M.name`` is listed (``nemo_gym.server_utils.initialize_ray``) or
``from M import *`` where something under ``M`` is, an attribute named like a listed function
(``su.initialize_ray``, whatever ``su`` is), and ``importlib.import_module("ray...")`` /
``__import__("ray...")`` with a literal name. What cannot be read whole counts as reaching Ray
(the server keeps NeMo Gym's behaviour): a file that does not parse, a symbolic link (file or
directory: it may lead out of the tree), anything but a regular file named ``*.py``, a file over
:data:`MAX_FILE_BYTES`, a tree of more than :data:`MAX_FILES` entries. Files are untrusted input:
none is opened unless it is a regular file, and each read is bounded.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import NamedTuple

from gym_runtime.files import read_regular
from gym_runtime.package.server_class import MAX_FILE_BYTES  # the same bound on a tree file read

MAX_FILES = 2000
_SKIP = {"__pycache__", ".venv", "venv", "node_modules"}


class Reach(NamedTuple):
    """Where a tree reaches Ray (``app.py:3 imports ray.util``), or why it counts as reaching it
    (``app.py cannot be read (SyntaxError)``); ``unparsed``: the file this interpreter could not
    parse when that is the only reason (a file of a newer Python's syntax, or one that does not
    compile at all: the server's start then fails with the compiler's error)."""

    where: str
    unparsed: Path | None = None


def _listed(name: str, modules: tuple[str, ...]) -> bool:
    return any(name == m or name.startswith(m + ".") for m in modules)


def _import_name(node: ast.Call, loaders: set[str]) -> str | None:
    """The literal module name a call of one of ``loaders`` (``import_module``, ``__import__``, an
    alias of ``importlib.import_module``) names."""
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if called not in loaders:
        return None
    args = [*node.args[:1], *(k.value for k in node.keywords if k.arg == "name")]
    return next((a.value for a in args if isinstance(a, ast.Constant) and isinstance(a.value, str)), None)


def _reach(tree: ast.AST, modules: tuple[str, ...]) -> tuple[int, str] | None:
    """``(line, what)`` of the first statement of ``tree`` that reaches one of ``modules``
    (``imports ray.util``, ``calls .initialize_ray``)."""
    functions = {m.rpartition(".")[2] for m in modules if "." in m}
    loaders = {"import_module", "__import__"} | {
        a.asname
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module == "importlib"
        for a in n.names
        if a.name == "import_module" and a.asname
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _listed(alias.name, modules):
                    return node.lineno, f"imports {alias.name}"
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if _listed(node.module, modules):
                return node.lineno, f"imports {node.module}"
            for alias in node.names:
                if _listed(f"{node.module}.{alias.name}", modules):
                    return node.lineno, f"imports {node.module}.{alias.name}"
                if alias.name == "*" and any(m.startswith(node.module + ".") for m in modules):
                    return node.lineno, f"imports {node.module}.*"
        elif isinstance(node, ast.Attribute) and node.attr in functions:
            return node.lineno, f"calls .{node.attr}"
        elif isinstance(node, ast.Call) and (name := _import_name(node, loaders)) and _listed(name, modules):
            return node.lineno, f"imports {name}"
    return None


def ray_import(server_dir: Path, modules: tuple[str, ...]) -> Reach | None:
    """Where the tree at ``server_dir`` first reaches one of ``modules``, or None when nothing
    does (module doc). A file that does not parse is passed over while another file may still
    show a real import; it is the answer only when none does."""
    seen = 0
    unparsed: Reach | None = None
    for top, dirs, files in os.walk(server_dir):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP and not d.startswith("."))
        seen += len(dirs) + len(files)
        if seen > MAX_FILES:
            return Reach(f"more than {MAX_FILES} entries under the tree (not all read)")
        for d in dirs:
            if (Path(top) / d).is_symlink():
                return Reach(f"{(Path(top) / d).relative_to(server_dir)} is a symbolic link (not read)")
        for name in sorted(f for f in files if f.endswith(".py")):
            path = Path(top) / name
            rel = path.relative_to(server_dir)
            if path.is_symlink():
                return Reach(f"{rel} is a symbolic link (not read)")
            try:
                data = read_regular(path, MAX_FILE_BYTES + 1)
                if len(data) > MAX_FILE_BYTES:
                    return Reach(f"{rel} is larger than {MAX_FILE_BYTES >> 20} MiB (not read)")
                found = _reach(ast.parse(data, filename=str(rel)), modules)
            except SyntaxError:
                unparsed = unparsed or Reach(f"{rel} cannot be read (SyntaxError)", path)
                continue
            except (OSError, ValueError, RecursionError, MemoryError) as e:
                return Reach(f"{rel} cannot be read ({type(e).__name__})")
            if found:
                return Reach(f"{rel}:{found[0]} {found[1]}")
    return unparsed
