"""The venv of NeMo RL's Gym actor: ``nemo-gym==0.7.0`` and this checkout of gym-runtime installed
together by real uv (one resolution) on a Python Gym accepts (>= 3.13.14,
tests/helpers/gym_python.py). Built per call into ``dest``; uv's cache makes a second build quick.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import uv

from tests.helpers.gym_python import gym_python

ROOT = Path(__file__).resolve().parents[2]


def actor_venv(dest: Path, gym_release: str = "0.7.0") -> Path:
    """The venv's ``bin/python`` after ``uv pip install nemo-gym==<gym_release> <this checkout>``
    into a new venv at ``dest``; skips the calling test where no Python >= 3.13.14 is found."""
    python = gym_python()
    uvb = uv.find_uv_bin()
    subprocess.run([uvb, "venv", "-q", "--python", str(python), str(dest)], check=True)
    done = subprocess.run(
        [uvb, "pip", "install", "-q", "--python", str(dest / "bin" / "python"), f"nemo-gym=={gym_release}", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dest / "bin" / "python"
