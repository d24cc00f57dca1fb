"""The start-up seed of a venv with no recorded bytecode (docs/runtime.md, "Bytecode").

A venv whose shared cache holds nothing yet (no user learned, nothing placed from the bytecode
store: a fresh pod whose only volume is the uv cache) would have each of its first processes
compile what it imports while it imports it (the preloaded parent and the Ray head's processes the
same Ray sources, on the same cores), and the daemon compile it all again into the shared cache
behind them. Instead, for a venv that gets a preloaded parent,
:class:`gym_runtime.venvs.env_bytecode.EnvironmentBytecode` compiles, on every core, the sources
the release's servers and a private Ray head import at start-up
(:func:`gym_runtime.gym_release.startup_imports.startup_imports`) that the venv has, beside the
parent's imports (from the moment the parent is started) and in the order the parent reads them:
the parent mostly reads bytecode the seed has just written, and compiles in memory what it reaches
first; the servers forked from it and the Ray head read the shared cache; the parent and its
servers report what they compiled, so what the seed lacked is compiled behind them. A venv
without a parent is not seeded: its servers learn under prefixes of their own, which hide the
shared cache.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from gym_runtime.venv_layout import site_packages


def seed_sources(venv: Path, listed: Iterable[str]) -> list[str]:
    """The ``listed`` sources (paths relative to ``site-packages``) that are regular files of
    ``venv``, as absolute paths under ``venv`` (the paths its processes import them by). A listed
    path that is absolute, climbs out (``..``) or does not end in ``.py`` is skipped."""
    out = []
    listed = list(listed)
    for sp in site_packages(Path(venv)):
        for rel in listed:
            if rel.endswith(".py") and not os.path.isabs(rel) and ".." not in Path(rel).parts:
                path = os.path.join(sp, rel)
                if os.path.isfile(path) and not os.path.islink(path):
                    out.append(path)
    return out
