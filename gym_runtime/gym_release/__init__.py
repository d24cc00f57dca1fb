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

from gym_runtime.gym_release.base import SDK_NAME, GymRelease
from gym_runtime.gym_release.choose import choose_release
from gym_runtime.gym_release.gym_06 import Gym06
from gym_runtime.gym_release.gym_07 import Gym07
from gym_runtime.gym_release.lines import LINES, first_release_with, known_server_types, line_for, release_for
from gym_runtime.known_releases import CURRENT, RELEASES, KnownRelease, known_release

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
