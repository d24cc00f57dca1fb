"""``image/check.py``, the image build's last step, run here on this checkout's interpreter with
the settings a Dockerfile sets: it prints the Python each range of Gym releases needs and refuses,
naming what is wrong, an interpreter below the current release's minimum or one that cannot
install the vendor platform's wheels (a base of another architecture)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from gym_runtime.gym_release import CURRENT, known_release

pytestmark = pytest.mark.slow  # three runs of the check, each importing the runtime (~7 s)

ROOT = Path(__file__).resolve().parents[2]
OTHER = {"x86_64": "linux/arm64", "aarch64": "linux/amd64"}
HERE = {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}


def check(**env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GYM_RUNTIME_")}
    return subprocess.run(
        [sys.executable, str(ROOT / "image" / "check.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**base, "GYM_RUNTIME_PYTHON": sys.executable, **env},
    )


def runs_current_gym() -> bool:
    return SpecifierSet(known_release(CURRENT).requires_python).contains(platform.python_version())


def test_a_base_of_another_architecture_is_refused_naming_the_wheel_tag() -> None:
    done = check(GYM_RUNTIME_VENDOR_PLATFORM=OTHER[platform.machine()])
    arch = "aarch64" if platform.machine() == "x86_64" else "x86_64"
    assert done.returncode == 1
    assert f"does not install manylinux_2_36_{arch} wheels: the base is not {OTHER[platform.machine()]}" in done.stderr
    assert (
        f"vendor default: CPython {sys.version_info[0]}.{sys.version_info[1]} {OTHER[platform.machine()]}"
        in done.stdout
    )


def test_the_python_table_and_the_current_release_minimum() -> None:
    done = check(GYM_RUNTIME_VENDOR_PLATFORM=HERE[platform.machine()])
    here = platform.python_version()
    for releases, need in (("0.2.0-0.4.0", ">=3.12"), (f"0.5.0-{CURRENT}", ">=3.13.14")):
        verdict = "ok" if SpecifierSet(need).contains(here) else "NO"
        assert f"nemo-gym {releases}: Python {need}: {verdict} ({here})" in done.stdout
    if runs_current_gym():
        assert done.returncode == 0, done.stderr
    else:
        assert done.returncode == 1
        assert f"cannot run nemo-gym {CURRENT}, the current release, which needs Python >=3.13.14" in done.stderr


def test_no_vendor_platform_and_a_python_that_is_not_the_runtimes_are_refused() -> None:
    other = next(
        (
            p
            for p in ("/usr/bin/python3", "/bin/python3")
            if Path(p).resolve() != Path(sys._base_executable).resolve() and Path(p).exists()
        ),
        None,
    )
    done = check(**({"GYM_RUNTIME_PYTHON": other} if other else {}))
    assert done.returncode == 1
    assert "GYM_RUNTIME_VENDOR_PLATFORM is not set (each Dockerfile sets its architecture's)" in done.stderr
    if other:
        assert f"GYM_RUNTIME_PYTHON={other} is " in done.stderr and "not the runtime's own interpreter" in done.stderr
