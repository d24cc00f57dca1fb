"""``gym_cache.fill`` where the ``nemo_gym`` in the process is not NeMo Gym 0.7.0's: none at all, one
whose ``global_config`` does not import, one without the cache. The environment keeps running in
each case (a line on stderr says why Gym's config is not set). With the real ``nemo-gym==0.7.0``:
tests/nemo_gym/test_gym_global_config.py."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from gym_runtime.nemo_gym import gym_cache

VIEW = {
    "acme_math": {"resources_servers": {"acme_math": {"entrypoint": "app.py", "host": "127.0.0.1", "port": 5101}}},
    "head_server": {"host": "0.0.0.0", "port": 5100},
    "note": "a literal ${not_an_interpolation}",
}


@pytest.fixture
def gym_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Write a package ``nemo_gym`` with the given ``global_config.py`` text on ``sys.path``."""

    def make(global_config: str | None) -> None:
        pkg = tmp_path / "nemo_gym"
        pkg.mkdir()
        (pkg / "__init__.py").write_text("")
        if global_config is not None:
            (pkg / "global_config.py").write_text(global_config)
        monkeypatch.syspath_prepend(str(tmp_path))
        importlib.invalidate_caches()

    yield make
    for name in [m for m in sys.modules if m == "nemo_gym" or m.startswith("nemo_gym.")]:
        del sys.modules[name]


def test_without_nemo_gym_nothing_is_filled() -> None:
    assert importlib.util.find_spec("nemo_gym") is None  # the project's own venv holds no Gym
    assert gym_cache.fill(VIEW) is False


def test_a_global_config_that_does_not_import_is_said_and_skipped(gym_package, capsys) -> None:
    gym_package("import a_module_that_is_not_there\n")
    assert gym_cache.fill(VIEW) is False
    assert "nemo_gym.global_config cannot be imported (ModuleNotFoundError" in capsys.readouterr().err


def test_a_global_config_without_the_cache_is_said_and_skipped(gym_package, capsys) -> None:
    gym_package("")
    assert gym_cache.fill(VIEW) is False
    assert "has no _GLOBAL_CONFIG_DICT" in capsys.readouterr().err


def test_the_cache_holds_the_view_as_gym_reads_it_and_the_given_ray_address(gym_package) -> None:
    gym_package("_GLOBAL_CONFIG_DICT = None\n")
    assert gym_cache.fill(VIEW, given_ray_address="127.0.0.1:1") is True
    cached = importlib.import_module("nemo_gym.global_config")._GLOBAL_CONFIG_DICT
    assert cached.acme_math.resources_servers.acme_math.port == 5101
    assert cached.head_server.port == 5100 and cached.ray_head_node_address == "127.0.0.1:1"
    assert cached.note == "a literal ${not_an_interpolation}"  # resolved as the servers resolve it
