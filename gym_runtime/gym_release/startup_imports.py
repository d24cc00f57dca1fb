"""What a release's servers and a private Ray head import at start-up: the seed a venv without
recorded bytecode compiles before its processes start (docs/runtime.md, "Bytecode").

A list holds source paths relative to ``site-packages`` (``ray/_private/worker.py``), one per line;
``#`` lines are comments. It is recorded from a real start of the release's example servers (a
resources server, an agent, the vLLM model server and, from 0.7, the environment server, one venv)
with a private Ray head: every source the venv's shared cache held once they were ready, the
union of what the preloaded parent, the servers and the head's processes imported. Paths a venv
lacks are skipped, and what a list misses the preloaded parent and the servers still report or
learn (:mod:`gym_runtime.venvs.bytecode`), so a list that drifts from a resolution (another
openai version) costs speed, never correctness. The Ray head's processes learn nothing in a
seeded venv: the list holds what a head of the Ray version the runtime pins imports.

Lists are committed under ``indexes/`` as ``nemo-gym-X-startup.txt.gz``; a release uses the list of
the newest release of its line at or below it (:func:`startup_imports`). A maintainer records one
from such a venv with ``python -m gym_runtime.gym_release.startup_imports <venv>`` (it reads the
venv's ``nemo-gym`` version and writes the file).
"""

from __future__ import annotations

import gzip
import os
import sys
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from gym_runtime.gym_release.sdk_index import INDEX_DIR
from gym_runtime.venv_layout import shared_cache, site_packages

if TYPE_CHECKING:
    from gym_runtime.gym_release.base import GymRelease

SUFFIX = "-startup.txt.gz"


def _listed() -> dict[Version, Path]:
    out = {}
    for p in INDEX_DIR.glob(f"nemo-gym-*{SUFFIX}"):
        try:
            out[Version(p.name[len("nemo-gym-") : -len(SUFFIX)])] = p
        except InvalidVersion:
            continue
    return out


@cache
def _read(path: Path) -> tuple[str, ...]:
    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    return tuple(s for s in (line.strip() for line in lines) if s and not s.startswith("#"))


def startup_imports(release: GymRelease, ray: bool = True) -> tuple[str, ...]:
    """The start-up sources of ``release`` (paths relative to ``site-packages``): the list of the
    newest release of its line at or below its version; empty when its line has none. ``ray``
    False (no server uses Ray: no head, no driver) leaves out Ray's own sources (``ray/...``)."""
    line, listed = Version(release.first).release[:2], _listed()
    fits = [v for v in listed if v.release[:2] == line and v <= release.version]
    paths = _read(listed[max(fits)]) if fits else ()
    return paths if ray else tuple(p for p in paths if not p.startswith("ray/"))


def record(venv: Path, tag: str) -> list[str]:
    """The sources under ``venv``'s ``site-packages`` that its shared cache holds bytecode of
    (``__pycache__/<stem>.<tag>.pyc``, :func:`gym_runtime.venv_layout.shared_cache`), relative
    to ``site-packages``, sorted."""

    roots = [str(sp) + os.sep for sp in site_packages(venv)]
    return sorted(
        {
            os.path.normpath(src[len(root) :])
            for src, _pyc in shared_cache(venv, tag)
            for root in roots
            if src.startswith(root) and os.path.isfile(src)
        }
    )


def main(argv: list[str]) -> int:
    """``python -m gym_runtime.gym_release.startup_imports <venv> [tag]``: write the list of the
    venv's ``nemo-gym`` release (``tag``: the venv's cache tag, default ``cpython-313``)."""
    if not argv:
        print("usage: python -m gym_runtime.gym_release.startup_imports <venv> [cpython-313]", file=sys.stderr)
        return 2
    venv, tag = Path(argv[0]), argv[1] if len(argv) > 1 else "cpython-313"
    found = [p for sp in site_packages(venv) for p in sp.glob("nemo_gym-*.dist-info")]
    if not found:
        print(f"{venv}: no nemo_gym-*.dist-info under site-packages", file=sys.stderr)
        return 1
    version = found[0].name[len("nemo_gym-") : -len(".dist-info")]
    files = record(venv, tag)
    out = INDEX_DIR / f"nemo-gym-{version}{SUFFIX}"
    head = f"# start-up imports of NeMo Gym {version}'s example servers and a private Ray head ({len(files)} sources)\n"
    out.write_bytes(gzip.compress((head + "\n".join(files) + "\n").encode(), mtime=0))
    print(f"wrote {out} ({len(files)} sources)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
