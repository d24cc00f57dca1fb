"""The committed start-up lists: a release uses the list of the newest release of its line at or
below it, and a line without one seeds nothing."""

from __future__ import annotations

from gym_runtime.gym_release import release_for
from gym_runtime.gym_release.startup_imports import startup_imports


def test_the_0_7_line_has_a_list_of_what_its_servers_and_a_ray_head_import() -> None:
    listed = startup_imports(release_for("0.7.0", "test"))
    assert {"ray/__init__.py", "nemo_gym/server_utils.py", "fastapi/applications.py", "openai/__init__.py"} <= set(listed)
    assert all(p.endswith(".py") and not p.startswith("/") and ".." not in p.split("/") for p in listed)


def test_a_line_without_a_list_seeds_nothing() -> None:
    assert startup_imports(release_for("0.4.0", "test")) == ()
    assert startup_imports(release_for("0.6.0", "test")) == ()
