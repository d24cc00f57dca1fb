"""The index of a Gym SDK release (``gym_runtime/gym_release/sdk_index.py``): what
``from nemo_gym.x import name`` finds, from the release's sources alone."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gym_runtime.gym_release import RELEASES
from gym_runtime.gym_release.sdk_index import WheelIndex, committed_index, index_file, index_sources, index_wheel, main
from tests.helpers.gym_package import gym_wheel, python_312_plus
from tests.helpers.wheels import build_wheel

SOURCES = {
    "nemo_gym": (
        True,
        "from nemo_gym.server_utils import SimpleServer as SimpleServer\n__all__ = ['x']\n"
        "def __getattr__(name):\n    raise AttributeError(name)\n",
    ),
    "nemo_gym.server_utils": (
        False,
        "import ray\nfrom typing import ClassVar\nHOST: str = '1'\n"
        "try:\n    from fast import thing\nexcept ImportError:\n    thing = None\n"
        "class SimpleServer:\n    ray_enabled: ClassVar[bool | None] = None\n"
        "def _private():\n    inner_name = 1\n",
    ),
    "nemo_gym.compat": (False, "from .server_utils import *\nfrom .missing import *\n"),
    "nemo_gym.cli": (True, "a, (b, c) = 1, (2, 3)\n"),
    "nemo_gym.cli.env": (False, "def main():\n    pass\n"),
    "nemo_gym.broken": (False, "def (:\n"),
}


def _index():
    return index_sources("9.9.9", [(m, pkg, text) for m, (pkg, text) in SOURCES.items()])


def test_names_a_module_offers() -> None:
    idx = _index()
    for name in ("ray", "ClassVar", "HOST", "thing", "SimpleServer", "_private"):
        assert idx.has_name("nemo_gym.server_utils", name), name
    assert not idx.has_name("nemo_gym.server_utils", "inner_name")  # not top level
    assert idx.has_name("nemo_gym.cli", "c") and idx.has_name("nemo_gym.cli", "env")  # unpacking; a submodule
    assert idx.has_name("nemo_gym.compat", "SimpleServer") and not idx.has_name("nemo_gym.compat", "_private")
    assert idx.has_module("nemo_gym.broken") and not idx.has_name("nemo_gym.broken", "anything")
    assert idx.has_name("nemo_gym", "whatever")  # a module __getattr__ answers any name
    assert not idx.has_module("nemo_gym.episode_types") and not idx.has_name("nemo_gym.cli.env", "run")
    assert idx.ray_of("nemo_gym.server_utils.SimpleServer") == (True, None)


def test_a_wheel_read_lazily_answers_as_the_whole_index(tmp_path: Path) -> None:
    files = {(m.replace(".", "/") + ("/__init__.py" if pkg else ".py")): text for m, (pkg, text) in SOURCES.items()}
    files["resources_servers/mcqa/app.py"] = "class M:\n    ray_enabled = False\nclass N(M):\n    pass\n"
    whl = build_wheel(tmp_path, "nemo-gym", "9.9.9", files=files)
    lazy, whole = WheelIndex(whl), index_wheel(whl)
    assert whole.modules == _index().modules and lazy.version == whole.version == "9.9.9"
    for idx in (lazy, whole):  # a server tree the wheel ships: its classes' own declarations, not its names
        assert idx.ray_of("resources_servers.mcqa.app.M") == (True, False), idx
        assert idx.ray_of("resources_servers.mcqa.app.N") == (False, None), idx
        assert not idx.has_module("resources_servers.mcqa.app"), idx
    for module, names in whole.modules.items():
        assert lazy.has_module(module)
        for name in (*names, "no_such_name"):
            assert lazy.has_name(module, name) == whole.has_name(module, name), (module, name)
    assert lazy.ray_of("nemo_gym.server_utils.SimpleServer") == (True, None)


def test_every_known_release_from_0_3_has_a_compact_committed_index() -> None:
    """Indexes for the releases on PyPI whose wheels hold their sources; each small."""
    for version in ("0.3.1", "0.4.0", "0.5.0", "0.5.1", "0.6.0", "0.7.0"):
        path = index_file(version)
        assert path.is_file() and path.stat().st_size < 64_000, version
        assert committed_index(version).version == version
    assert {r.version for r in RELEASES} >= {"0.3.1", "0.7.0"}
    assert committed_index("0.7.0").has_name("nemo_gym.base_responses_api_model", "start_model_execution")
    assert not committed_index("0.4.0").has_name("nemo_gym.base_responses_api_model", "start_model_execution")
    assert committed_index("0.2.0") is None
    # the server trees 0.7.0's wheel ships (gpqa_diamond's base from the mcqa tree says False)
    assert committed_index("0.7.0").ray_of("resources_servers.mcqa.app.MCQAResourcesServer") == (True, False)


@pytest.mark.pypi
@pytest.mark.parametrize("version", ["0.4.0", "0.7.0"])
def test_the_maintainer_script_regenerates_the_committed_index(tmp_path: Path, version: str) -> None:
    """``python -m gym_runtime.gym_release.sdk_index WHEEL OUT`` gives the committed file, byte for byte."""
    python = python_312_plus()
    if python is None:
        pytest.skip("needs a Python 3.12+ to download the nemo-gym wheel")
    out = tmp_path / f"nemo-gym-{version}.json.gz"
    assert main([str(gym_wheel(python, version)), str(out)]) == 0
    assert out.read_bytes() == index_file(version).read_bytes()
    assert json.loads(gzip.decompress(out.read_bytes()))["version"] == version
