"""NeMo Gym release profiles: what differs between Gym release lines, in one place.

A profile (:class:`GymRelease` and one subclass per line) is chosen once per environment from
the SDK it runs (:func:`choose_release`: the operator's ``nemo-gym`` pin, or the ``nemo_gym`` wheel
a wheels-v1 package vendors) and passed down like any other value: the config stage, the venv
plan, the supervisor and the head server ask it what their line does, and no module compares
version strings. docs/architecture.md §2, "Gym releases", lists what each profile says.

Lines: ``0.4`` (releases 0.2.0-0.5.x, :mod:`.base`), ``0.6`` (:mod:`.gym_06`), ``0.7`` (0.7.x,
:mod:`.gym_07`); the newest line's profile stands in for a release of a newer line
(:attr:`GymRelease.stand_in`, :mod:`.stand_in`). Adding a line is adding a module with one
subclass, registering it in :data:`LINES`, and its tests.
"""

from __future__ import annotations

from packaging.version import Version

from gym_runtime.gym_release.base import SDK_NAME, GymRelease
from gym_runtime.gym_release.choose import choose_release
from gym_runtime.gym_release.gym_06 import Gym06
from gym_runtime.gym_release.gym_07 import Gym07
from gym_runtime.gym_release.releases import CURRENT, RELEASES, KnownRelease, known_release

# Oldest line first; a version runs under the newest line whose `first` is at or below it.
LINES: tuple[type[GymRelease], ...] = (GymRelease, Gym06, Gym07)


def line_for(version: str | Version) -> type[GymRelease]:
    """The profile class of ``version`` (``0.4.0`` -> the 0.4 line, ``0.7.2`` -> the 0.7 line)."""
    v = Version(str(version))
    return [cls for cls in LINES if Version(cls.first) <= v][-1]


def known_server_types() -> tuple[str, ...]:
    """Every server type of every line the runtime knows, oldest line's first: what the package
    layer scans for (``{server_type}/{implementation}/``), whichever release a package runs."""
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


__all__ = [
    "CURRENT",
    "LINES",
    "RELEASES",
    "SDK_NAME",
    "Gym06",
    "Gym07",
    "GymRelease",
    "KnownRelease",
    "choose_release",
    "first_release_with",
    "known_release",
    "known_server_types",
    "line_for",
    "release_for",
]
