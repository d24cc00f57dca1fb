"""The release lines: the package layer scans for every server type of every line the runtime
knows (docs/architecture.md §3), spelled out in ``package/layout.py`` below the profiles."""

from __future__ import annotations

from gym_runtime.gym_release import Gym06, Gym07, GymRelease, known_server_types, release_for
from gym_runtime.package.layout import SERVER_TYPES


def test_package_layer_scans_every_line_server_type():
    assert SERVER_TYPES == known_server_types()
    assert "environment_servers" in SERVER_TYPES  # a 0.7 type: still scanned for a 0.4 package


def test_release_for_picks_the_newest_line_at_or_below_the_version():
    assert type(release_for("0.4.0", "test")) is GymRelease
    assert type(release_for("0.6.1", "test")) is Gym06
    assert type(release_for("0.7.2", "test")) is Gym07
