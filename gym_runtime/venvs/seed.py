"""The start-up seed of a venv with no recorded bytecode (docs/runtime.md, "Bytecode").

A venv whose shared cache holds nothing yet (no user learned, nothing placed from the bytecode
store: a fresh pod whose only volume is the uv cache) would have each of its first processes
compile what it imports while it imports it, and the daemon compile the same sources again into
the shared cache behind them. Instead the daemon first compiles, on every core, the sources the
release's servers and a private Ray head import at start-up
(:func:`gym_runtime.gym_release.startup_imports.startup_imports`) that the venv has. Its processes
still learn, in dirs of their own: each learning dir made in the run gets one symlink per seeded
source, at the path where a process with that ``PYTHONPYCACHEPREFIX`` looks for its bytecode (a
process with a prefix reads bytecode only there), pointing at the shared cache's file. So a
learning process loads the seed and writes only what the seed lacks.

Trust is as before: the links point into the venv, which processes see read-only, so a process
can replace a link in its own dir but never the bytecode behind it, and the daemon reads only
names from a learning dir (:func:`gym_runtime.venvs.bytecode.sources`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from gym_runtime.gym_release.startup_imports import site_packages


def seed_sources(venv: Path, listed: Iterable[str]) -> list[str]:
    """The ``listed`` sources (paths relative to ``site-packages``) that are regular files of
    ``venv``, as absolute paths under ``venv`` (the paths its processes import them by)."""
    out = []
    for sp in site_packages(Path(venv)):
        for rel in listed:
            if rel.endswith(".py") and not os.path.isabs(rel) and ".." not in Path(rel).parts:
                path = os.path.join(sp, rel)
                if os.path.isfile(path) and not os.path.islink(path):
                    out.append(path)
    return out


def shared_pyc(source: str, tag: str) -> str:
    """Where the shared cache holds ``source``'s bytecode: ``<dir>/__pycache__/<stem>.<tag>.pyc``."""
    head, tail = os.path.split(source)
    return os.path.join(head, "__pycache__", f"{tail[:-3]}.{tag}.pyc")


def link(prefix: Path, sources: Iterable[str], tag: str) -> int:
    """In learning dir ``prefix``, link each of ``sources`` (absolute paths) to its shared bytecode
    where that exists, at ``<prefix>/<source dir>/<stem>.<tag>.pyc`` (the entry a process with
    ``PYTHONPYCACHEPREFIX=prefix`` reads, CPython's ``importlib.util.cache_from_source``); returns
    how many links were made."""
    made, dirs = 0, set()
    for src in sources:
        target = shared_pyc(src, tag)
        if not os.path.isfile(target):
            continue
        head, tail = os.path.split(src)
        where = os.path.join(prefix, head.lstrip(os.sep))
        if where not in dirs:
            os.makedirs(where, exist_ok=True)
            dirs.add(where)
        try:
            os.symlink(target, os.path.join(where, f"{tail[:-3]}.{tag}.pyc"))
        except FileExistsError:
            continue
        made += 1
    return made
