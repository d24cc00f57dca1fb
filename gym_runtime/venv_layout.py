"""Where things are inside a venv uv made (``uv venv``: ``bin/``, ``lib/pythonX.Y/site-packages``)."""

from __future__ import annotations

import os
from pathlib import Path


def site_packages(venv: Path) -> list[Path]:
    """The ``lib/python*/site-packages`` dirs of ``venv`` that exist, sorted (one for a venv uv
    made; none for a path that is no venv)."""
    return sorted(p for p in (Path(venv) / "lib").glob("python*/site-packages") if p.is_dir())


def holds_nemo_gym(venv: Path) -> bool:
    """Whether ``venv`` holds the ``nemo_gym`` package: its files, or the ``nemo_gym-*.dist-info``
    of an editable install, which keeps them elsewhere."""
    lib = Path(venv) / "lib"
    return any(lib.glob("python*/site-packages/nemo_gym/__init__.py")) or any(
        lib.glob("python*/site-packages/nemo_gym-*.dist-info")
    )


def shared_cache(venv: Path, tag: str) -> list[tuple[str, str]]:
    """(source, .pyc) pairs of ``venv``'s ``__pycache__`` dirs for cache ``tag`` (not under its
    ``.gym-runtime`` dir; symlinked dirs are not followed)."""
    out = []
    suffix = f".{tag}.pyc"
    for dirpath, dirs, files in os.walk(venv):
        if dirpath == str(venv):
            dirs[:] = [d for d in dirs if d != ".gym-runtime"]
        if os.path.basename(dirpath) != "__pycache__":
            continue
        parent = os.path.dirname(dirpath)
        for name in files:
            if name.endswith(suffix) and "." not in name[: -len(suffix)]:
                out.append((os.path.join(parent, name[: -len(suffix)] + ".py"), os.path.join(dirpath, name)))
    return out
