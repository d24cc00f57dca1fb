"""What a release's servers and a private Ray head import at start-up: the seed a venv without
recorded bytecode compiles beside its preloaded parent's imports (docs/runtime.md, "Bytecode").

A list holds source paths relative to ``site-packages`` (``ray/_private/worker.py``), one per line:
what a preloaded parent reads first, in the order it reads it, then the rest sorted (the seed is
compiled in that order); ``#`` lines are comments. It is recorded from a real start of the
release's example servers (a resources server, an agent, the vLLM model server and, from 0.7, the
environment server, one venv) with a private Ray head: every source the venv's shared cache held
once they were ready, the union of what the preloaded parent, the servers and the head's processes
imported. Paths a venv lacks are skipped, and what a list misses the preloaded parent and the
servers still report or learn (:mod:`gym_runtime.venvs.bytecode`), so a list that drifts from a
resolution (another openai version) costs speed, never correctness. The Ray head's processes learn
nothing in a seeded venv: the list holds what a head of the Ray version the runtime pins imports.

Lists are committed under ``indexes/`` as ``nemo-gym-X-startup.txt.gz``; a release uses the list of
the newest release of its line at or below it (:func:`startup_imports`). A maintainer records one
from such a venv with ``python -m gym_runtime.gym_release.startup_imports <venv> [tag] [module
...]`` (it reads the venv's ``nemo-gym`` version and writes the file; :func:`main`).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections.abc import Sequence
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


# Run by a venv's interpreter: the source files whose code importing argv's modules in turn reads,
# in the order it reads them (each as its import begins, before the modules it imports): the order a
# preloaded parent reads their bytecode in.
_ORDER = (
    "import importlib, importlib.machinery as mach, json, sys\n"
    "read, get_code = [], mach.SourceFileLoader.get_code\n"
    "def reading(self, name):\n"
    "    read.append(self.path)\n"
    "    return get_code(self, name)\n"
    "mach.SourceFileLoader.get_code = reading\n"
    "for m in sys.argv[1:]:\n"
    "    try:\n"
    "        importlib.import_module(m)\n"
    "    except Exception:\n"
    "        pass\n"
    "print(json.dumps(read))\n"
)


def import_order(venv: Path, modules: Sequence[str]) -> list[str]:
    """The sources (relative to ``site-packages``) that importing ``modules`` in turn loads in
    ``venv``, in the order they are first read. Raises ``subprocess.CalledProcessError`` when the
    interpreter fails."""
    out = subprocess.run(
        [str(Path(venv) / "bin" / "python"), "-c", _ORDER, *modules],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"},
    ).stdout
    roots = [str(sp) + os.sep for sp in site_packages(venv)]
    read = [os.path.normpath(p) for p in json.loads(out.strip().splitlines()[-1])]
    return list(dict.fromkeys(p[len(r) :] for p in read for r in roots if p.startswith(r)))


def record(venv: Path, tag: str, first: Sequence[str] = ()) -> list[str]:
    """The sources under ``venv``'s ``site-packages`` that its shared cache holds bytecode of
    (``__pycache__/<stem>.<tag>.pyc``, :func:`gym_runtime.venv_layout.shared_cache`), relative
    to ``site-packages``: those in ``first`` in its order (what a preloaded parent reads first,
    :func:`import_order`), then the rest sorted. The seed is compiled in this order while the
    parent imports, so the parent finds the bytecode of what it imports next already compiled."""

    roots = [str(sp) + os.sep for sp in site_packages(venv)]
    files = {
        os.path.normpath(src[len(root) :])
        for src, _pyc in shared_cache(venv, tag)
        for root in roots
        if src.startswith(root) and os.path.isfile(src)
    }
    rank = {p: i for i, p in enumerate(first)}
    return sorted(files, key=lambda p: (rank.get(p, len(rank)), p))


def main(argv: list[str]) -> int:
    """``python -m gym_runtime.gym_release.startup_imports <venv> [tag] [module ...]``: write the
    list of the venv's ``nemo-gym`` release (``tag``: the venv's cache tag, default
    ``cpython-313``), ordered by what importing the ``module``s in turn reads first: pass what the
    venv's preloaded parent imports, in its order (``SHARED_MODULES`` of
    ``gym_runtime/placement/local.py``, ``ray``, then the release's ``preload_modules`` and
    ``preload_when_present``)."""
    if not argv:
        print(
            "usage: python -m gym_runtime.gym_release.startup_imports <venv> [cpython-313] [module ...]",
            file=sys.stderr,
        )
        return 2
    venv, tag = Path(argv[0]), argv[1] if len(argv) > 1 else "cpython-313"
    found = [p for sp in site_packages(venv) for p in sp.glob("nemo_gym-*.dist-info")]
    if not found:
        print(f"{venv}: no nemo_gym-*.dist-info under site-packages", file=sys.stderr)
        return 1
    version = found[0].name[len("nemo_gym-") : -len(".dist-info")]
    files = record(venv, tag, import_order(venv, argv[2:]) if argv[2:] else ())
    out = INDEX_DIR / f"nemo-gym-{version}{SUFFIX}"
    head = (
        f"# start-up imports of NeMo Gym {version}'s example servers and a private Ray head ({len(files)} sources), "
        "what its preloaded parent imports first, in its order\n"
    )
    out.write_bytes(gzip.compress((head + "\n".join(files) + "\n").encode(), mtime=0))
    print(f"wrote {out} ({len(files)} sources)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
