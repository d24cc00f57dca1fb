"""``.ci/provision-python``: a CPython >= 3.13.14 for the tests of NeMo Gym 0.5+ (docs/runtime.md,
"Gym releases"). Building one takes minutes and is CI's job (``.ci/run`` starts it beside the
suite); these tests hold what decides whether it builds at all: an interpreter already
provisioned is kept (any version >= the minimum that works), and a broken or older one is not."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / ".ci" / "provision-python"


def _fake(root: Path, version: str, works: bool = True) -> Path:
    exe = root / version / "bin" / "python3"
    exe.parent.mkdir(parents=True)
    exe.write_text(f'#!/bin/sh\n[ "$1" = -V ] && echo Python {version}\nexit {0 if works else 1}\n')
    exe.chmod(0o755)
    return exe


def _run(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GYM_RUNTIME_CI_PYTHON_DIR": str(root)}
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=60, env=env)


def test_an_interpreter_already_there_is_kept(tmp_path: Path) -> None:
    assert _run(tmp_path, "--print").returncode == 1  # nothing provisioned, nothing built
    _fake(tmp_path, "3.13.5")  # below 3.13.14
    _fake(tmp_path, "3.13.30", works=False)  # lacks a standard module: not counted
    good = _fake(tmp_path, "3.13.16")
    done = _run(tmp_path, "--print")
    assert done.returncode == 0 and done.stdout == f"{good}\n"
    done = _run(tmp_path)  # a full run finds it too, under the lock, and builds nothing
    assert done.returncode == 0 and done.stdout == f"{good}\n"
    assert "already provisioned" in done.stderr and not list(tmp_path.glob(".build.*"))


def test_ci_provisions_it_beside_the_suite() -> None:
    """``.ci/run`` starts the provisioning before the suite, in the background, and waits for it."""
    lines = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines() if not ln.startswith("#")]
    start = lines.index('.ci/provision-python >"$python_log" 2>&1 &')
    assert start < lines.index("./uvw run pytest || suite_rc=$?") < lines.index('wait "$python_job" || python_rc=$?')


def test_the_opensandbox_test_server_allows_the_interpreter_the_tests_name(tmp_path: Path, monkeypatch) -> None:
    """A developer's host with its own interpreter >= 3.13.14 (here a pyenv 3.13.99) and a clean one
    running the provisioned interpreter give the same result: the test OpenSandbox server allows
    the prefix of whichever ``gym_python()`` answers (a venv of it mounts that prefix), and the
    provisioned interpreters' directory."""
    from tests.helpers.gym_python import gym_python, gym_python_roots, provision_dir
    from tests.helpers.opensandbox.server import ALLOWED_HOST_PATHS, allowed_host_paths

    exe = tmp_path / "pyenv" / "versions" / "3.13.99" / "bin" / "python3"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\necho CPython 3.13.99\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "pyenv"))
    assert gym_python() == exe
    prefix = str(tmp_path / "pyenv" / "versions" / "3.13.99")
    assert gym_python_roots() == (str(provision_dir()), prefix)
    assert allowed_host_paths() == (*ALLOWED_HOST_PATHS, str(provision_dir()), prefix)
