"""NeMo Gym's own config parser, per release, in one long-lived process (``gym_parser_probe.py``).

``parser_python(version)`` is the one place that finds an interpreter for a release: Gym 0.5 and
later need Python >= 3.13.14 (:func:`tests.helpers.gym_python.find_gym_python`: the host's own,
else the one ``.ci/provision-python`` built), 0.4 runs on 3.12+. None when the host has none (the
caller skips).

``parser_venv(version)`` is a venv holding what ``nemo_gym.global_config`` imports, built once with
real uv from PyPI and kept in the tests' cache (a marker written last says it is whole; a file lock
keeps parallel runs from building it twice): for 0.4.0 the full ``nemo-gym`` install
(:func:`tests.helpers.gym_package.gym_venv`, shared with the tests that run Gym's clients); for
later releases ``nemo-gym`` without its dependencies plus the parser's own imports (hydra-core,
omegaconf, pydantic, rich, the release's openai, and ray, whose version the parser reads from its
metadata), about 350 MB instead of 1.5 GB.

``GymParser(venv)`` runs the probe once; ``parse(cwd, config_paths, values)`` sends one job and
returns its answer (``{"config": ...}`` or ``{"error", "message"}``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from packaging.version import Version

from tests.helpers.gym_package import cache_dir, gym_venv, python_312_plus

PROBE = Path(__file__).with_name("gym_parser_probe.py")
# what `nemo_gym.global_config` of 0.5+ imports, beyond nemo-gym itself (installed --no-deps)
PARSER_REQUIREMENTS = {"0.7.0": ["hydra-core", "omegaconf", "pydantic", "rich", "openai==2.44.0"]}


def parser_python(version: str) -> str | None:
    """An interpreter NeMo Gym ``version`` runs on (module doc), or None."""
    if Version(version) < Version("0.5"):
        return python_312_plus()
    from tests.helpers.gym_python import find_gym_python

    found = find_gym_python()  # the host's own, else the one .ci/provision-python built
    return str(found) if found else None


def parser_venv(version: str) -> Path | None:
    """The venv of ``version``'s parser (module doc), built on first use; None without an interpreter."""
    if Version(version) < Version("0.5"):
        return gym_venv()
    import uv
    from filelock import FileLock

    python = parser_python(version)
    if python is None:
        return None
    venv = cache_dir() / f"nemo-gym-{version}-parser-venv"
    marker = venv / ".complete"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(venv) + ".lock", timeout=1800):
        if not marker.is_file():
            shutil.rmtree(venv, ignore_errors=True)
            pip = [uv.find_uv_bin(), "pip", "install", "--quiet", "--python", str(venv / "bin" / "python")]
            subprocess.run([uv.find_uv_bin(), "venv", "--quiet", "--python", python, str(venv)], check=True)
            subprocess.run([*pip, "--no-deps", f"nemo-gym=={version}", "ray"], check=True, timeout=1800)
            subprocess.run([*pip, *PARSER_REQUIREMENTS[version]], check=True, timeout=1800)
            marker.write_text(version)
    return venv


class GymParser:
    """One probe process in ``venv`` (a context manager)."""

    def __init__(self, venv: Path, env: dict[str, str] | None = None) -> None:
        """``env``: the probe's environment (default: this process's), which ``${oc.env:...}`` reads."""
        self.proc = subprocess.Popen(
            [str(venv / "bin" / "python"), str(PROBE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        self.n = 0

    def parse(self, cwd: Path, config_paths: list[str], values: dict[str, Any]) -> dict[str, Any]:
        self.n += 1
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(
            json.dumps({"id": self.n, "cwd": str(cwd), "config_paths": config_paths, "values": values}) + "\n"
        )
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the parser process exited ({self.proc.poll()})"
        return json.loads(line)

    def __enter__(self) -> GymParser:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


__all__ = ["GymParser", "parser_python", "parser_venv"]
