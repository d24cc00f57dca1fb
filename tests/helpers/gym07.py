"""NeMo Gym 0.7.0 for tests: an interpreter it runs on (``Requires-Python >= 3.13.14``) and a venv with it.

``gym07_python()`` finds such an interpreter (``GYM_RUNTIME_TESTS_PY313``, then pyenv's versions,
then ``python3.13`` on PATH, then :func:`tests.helpers.gym_python.gym_python`: the runtime's own
search and the interpreter ``.ci/provision-python`` built) or skips the test cleanly; ``gym07_venv(path)`` makes a uv venv there
with ``nemo-gym==0.7.0`` (from the package registry: tests using it are marked ``pypi``) and the
``gym_runtime`` sandbox provider installed the way the runtime installs it into server venvs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import uv

from tests.helpers.gym_python import gym_python

MIN = (3, 13, 14)


def _version(python: str) -> tuple[int, ...] | None:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print(*sys.version_info[:3])"], capture_output=True, text=True, timeout=20
        ).stdout.split()
        return tuple(int(x) for x in out)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def gym07_python() -> str:
    """An interpreter >= 3.13.14, or ``pytest.skip``."""
    candidates = [os.environ.get("GYM_RUNTIME_TESTS_PY313", "")]
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    if root.is_dir():
        candidates += [str(p / "bin" / "python3") for p in sorted(root.iterdir(), reverse=True)]
    candidates.append(shutil.which("python3.13") or "")
    for c in candidates:
        if c and Path(c).exists() and (_version(c) or (0,)) >= MIN:
            return c
    return str(gym_python())  # what the runtime finds, else what .ci/provision-python built; else a skip


def gym07_venv(path: Path, extra: tuple[str, ...] = ()) -> Path:
    """A venv at ``path`` with nemo-gym 0.7.0 and the ``gym_runtime`` provider; returns its Python."""
    from gym_runtime.task_sandboxes.install import install_provider

    python = path / "bin" / "python"
    if not python.exists():
        uvb = uv.find_uv_bin()
        subprocess.run([uvb, "venv", "-q", "--python", gym07_python(), str(path)], check=True)
        subprocess.run(
            [uvb, "pip", "install", "-q", "--python", str(python), "nemo-gym==0.7.0", *extra], check=True, timeout=900
        )
    install_provider(path)
    return python


def gym07_wheel() -> Path:
    """The ``nemo_gym-0.7.0`` wheel, downloaded once with pip into the tests' cache."""
    from tests.helpers.gym_package import cache_dir

    dest = cache_dir() / "wheels"
    found = sorted(dest.glob("nemo_gym-0.7.0-*.whl"))
    if not found:
        dest.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                gym07_python(),
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "--dest",
                str(dest),
                "nemo-gym==0.7.0",
            ],
            check=True,
            timeout=600,
        )
        found = sorted(dest.glob("nemo_gym-0.7.0-*.whl"))
    return found[0]


def gym07_trees(root: Path, trees: tuple[str, ...]) -> Path:
    """The ``{server_type}/{implementation}`` ``trees`` of the 0.7.0 wheel, unchanged (configs,
    ``data/`` and all), under ``root`` as a Gym checkout holds them, with no package manifest: what
    NeMo RL's ``config_paths`` name. Returns ``root``."""
    import sys
    import zipfile

    from tests.helpers.gym_package import gym_wheel

    prefixes = tuple(t.rstrip("/") + "/" for t in trees)
    with zipfile.ZipFile(gym_wheel(sys.executable, "0.7.0")) as z:
        for name in z.namelist():
            if name.startswith(prefixes) and not name.endswith("/"):
                out = root / name
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(z.read(name))
    return root
