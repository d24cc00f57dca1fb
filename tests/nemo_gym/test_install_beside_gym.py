"""gym-runtime installs into the venv of NeMo RL's Gym actor, which holds ``nemo-gym==0.7.0``: one
uv resolution of both on a Python Gym accepts (>= 3.13.14) keeps Gym's own pins (``openai==2.44.0``),
and the swap's import works there beside Gym's own."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.helpers.actor_venv import actor_venv

pytestmark = [pytest.mark.pypi, pytest.mark.slow, pytest.mark.timeout(1800)]

CHECK = """
import importlib.metadata as md
import nemo_gym.cli, openai
from gym_runtime.nemo_gym import GlobalConfigDictParserConfig, RunHelper
from nemo_gym.rollout_collection import RolloutCollectionHelper
print(md.version("nemo-gym"), openai.__version__, RunHelper.__module__, sorted(GlobalConfigDictParserConfig.model_fields))
"""


def test_gym_runtime_and_nemo_gym_070_share_one_venv(tmp_path: Path) -> None:
    python = actor_venv(tmp_path / "actor-venv")
    out = subprocess.run([str(python), "-c", CHECK], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[:3] == ["0.7.0", "2.44.0", "gym_runtime.nemo_gym.run_helper"]
    assert "initial_global_config_dict" in out.stdout and "skip_load_from_cli" in out.stdout
