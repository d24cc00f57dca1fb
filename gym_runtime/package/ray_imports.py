"""Whether a server tree's own code reaches Ray, read without running anything.

A NeMo Gym 0.7 server whose class declares nothing about ``ray_enabled`` gets a Ray driver from
the SDK (``nemo_gym/server_utils.py`` ``_server_uses_ray``: undeclared still means Ray, with a
warning that a future release defaults it to false). Most such servers never call Ray: the
runtime gives them none when nothing in their tree imports it (docs/runtime.md, "Ray").

What counts, in every ``.py`` file under the server directory (hidden directories, ``__pycache__``
and venvs left out): an ``import``/``from ... import`` of one of ``modules`` or a submodule of it
(``ray``, ``ray.util``; a release's own Ray users, e.g. ``nemo_gym.orchestration.ray_serve_gateway``),
a ``from M import name`` where ``M.name`` is listed (``nemo_gym.server_utils.initialize_ray``),
and ``importlib.import_module("ray...")`` / ``__import__("ray...")`` with a literal name. A file
that cannot be parsed counts as reaching Ray (the server keeps NeMo Gym's behaviour). Files are
untrusted input: each is bounded in size and the walk in count.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

MAX_FILE_BYTES = 4 << 20
MAX_FILES = 2000
_SKIP = {"__pycache__", ".venv", "venv", "node_modules"}


def _listed(name: str, modules: tuple[str, ...]) -> bool:
    return any(name == m or name.startswith(m + ".") for m in modules)


def _reach(tree: ast.AST, modules: tuple[str, ...]) -> tuple[int, str] | None:
    """``(line, module)`` of the first statement of ``tree`` that reaches one of ``modules``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _listed(alias.name, modules):
                    return node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if _listed(node.module, modules):
                return node.lineno, node.module
            for alias in node.names:
                if _listed(f"{node.module}.{alias.name}", modules):
                    return node.lineno, f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            arg = node.args[0].value
            if called in ("import_module", "__import__") and isinstance(arg, str) and _listed(arg, modules):
                return node.lineno, arg
    return None


def ray_import(server_dir: Path, modules: tuple[str, ...]) -> str | None:
    """Where the tree at ``server_dir`` first reaches one of ``modules`` (``app.py:3 imports
    ray.util``), or None when nothing does (module doc)."""
    seen = 0
    for top, dirs, files in os.walk(server_dir):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP and not d.startswith("."))
        for name in sorted(f for f in files if f.endswith(".py")):
            seen += 1
            path = Path(top) / name
            rel = path.relative_to(server_dir)
            if seen > MAX_FILES:
                return f"more than {MAX_FILES} files under the tree (not all read)"
            try:
                data = path.read_bytes()
                if len(data) > MAX_FILE_BYTES:
                    return f"{rel} is larger than {MAX_FILE_BYTES >> 20} MiB (not read)"
                found = _reach(ast.parse(data, filename=str(rel)), modules)
            except (OSError, SyntaxError, ValueError, RecursionError) as e:
                return f"{rel} cannot be read ({type(e).__name__})"
            if found:
                return f"{rel}:{found[0]} imports {found[1]}"
    return None
