"""Where things are inside a venv uv made (``uv venv``: ``bin/``, ``lib/pythonX.Y/site-packages``)."""

from __future__ import annotations

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
