"""The Gym release lines the runtime knows, oldest first, and the profile of an exact release.

Below :mod:`.choose` and the package's ``__init__``: both build profiles through
:func:`release_for`.
"""

from __future__ import annotations

from packaging.version import Version

from gym_runtime.gym_release.base import GymRelease
from gym_runtime.gym_release.gym_06 import Gym06
from gym_runtime.gym_release.gym_07 import Gym07
from gym_runtime.known_releases import KnownRelease, known_release

# Oldest line first; a version runs under the newest line whose `first` is at or below it.
LINES: tuple[type[GymRelease], ...] = (GymRelease, Gym06, Gym07)


def line_for(version: str | Version) -> type[GymRelease]:
    """The profile class of ``version`` (``0.4.0`` -> the 0.4 line, ``0.7.2`` -> the 0.7 line)."""
    v = Version(str(version))
    return [cls for cls in LINES if Version(cls.first) <= v][-1]


def known_server_types() -> tuple[str, ...]:
    """Every server type of every line the runtime knows, oldest line's first: what the package
    layer scans for (``{server_type}/{implementation}/``, which
    :data:`gym_runtime.package.layout.SERVER_TYPES` spells out), whichever release a package runs."""
    out: list[str] = []
    for cls in LINES:
        out += [t for t in cls.server_types if t not in out]
    return tuple(out)


def first_release_with(server_type: str) -> str | None:
    """The first release of the oldest line that has ``server_type`` (``environment_servers`` ->
    ``0.7.0``), or None for a type no line knows."""
    return next((cls.first for cls in LINES if server_type in cls.server_types), None)


def release_for(version: str | Version, source: str, metadata: KnownRelease | None = None) -> GymRelease:
    """The profile of the exact ``version``; ``metadata`` defaults to the table of known releases."""
    return line_for(version)(version, source, metadata or known_release(version))
