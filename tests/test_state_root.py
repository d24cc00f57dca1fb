"""The suite never uses the user's state root (``~/.cache/gym-runtime``, the default
``GYM_RUNTIME_HOME``), not even from fixtures set up before any test's own home (tests/conftest.py;
bug: a module-scoped daemon recorded itself in the user's ``daemon.json``). A real ``up`` started
by a module-scoped fixture: tests/daemon/test_head_instances.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from gym_runtime.settings import load_settings

USERS_ROOT = load_settings({}).home  # where GYM_RUNTIME_HOME points when unset


@pytest.fixture(scope="session")
def session_root() -> Path:
    return load_settings().home


@pytest.fixture(scope="module")
def module_root() -> Path:
    return load_settings().home


def test_fixtures_of_every_scope_see_a_state_root_of_their_own(session_root: Path, module_root: Path) -> None:
    test_root = load_settings().home
    for root in (session_root, module_root, test_root):
        assert root != USERS_ROOT and not root.is_relative_to(USERS_ROOT) and not USERS_ROOT.is_relative_to(root)
    assert test_root != module_root  # and each test has its own
