"""Where things are inside a venv uv made (``uv venv``: ``bin/``, ``lib/pythonX.Y/site-packages``)."""

from __future__ import annotations

from pathlib import Path


def site_packages(venv: Path) -> list[Path]:
    """The ``lib/python*/site-packages`` dirs of ``venv`` that exist, sorted (one for a venv uv
    made; none for a path that is no venv)."""
    return sorted(p for p in (Path(venv) / "lib").glob("python*/site-packages") if p.is_dir())
