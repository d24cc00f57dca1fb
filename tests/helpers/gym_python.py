"""A Python that NeMo Gym 0.5 and later can run (``Requires-Python >= 3.13.14``), for the tests that
build venvs of those releases.

:func:`gym_python` answers, in order: an interpreter the runtime itself finds on this host
(``PATH``, pyenv, uv-managed: :func:`gym_runtime.venvs.pythons.pick_python`), else the one
``.ci/provision-python`` built into its cache directory, waiting for a provisioning run that is
still building it (``.ci/run`` starts one beside the suite; it takes several minutes). Without
either, the test is skipped, saying what is missing and how to get it. Tests hand the path to the
daemon as ``GYM_RUNTIME_PYTHON`` or ``--python``.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[2]
PROVISION = ROOT / ".ci" / "provision-python"
MINIMUM = ">=3.13.14"  # nemo-gym 0.5.0 - 0.7.0 Requires-Python (gym_runtime/known_releases.py)
WAIT_S = 1800.0


def provision_dir() -> Path:
    """Where ``.ci/provision-python`` keeps what it builds (its own default, or the override)."""
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gym-runtime-ci" / "python"
    return Path(os.environ.get("GYM_RUNTIME_CI_PYTHON_DIR") or default)


def _provisioned() -> Path | None:
    out = subprocess.run([str(PROVISION), "--print"], capture_output=True, text=True, timeout=60)
    return Path(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip() else None


def _wait_for_running_build(deadline_s: float) -> None:
    """Block while a provisioning run holds its lock (at most ``deadline_s``)."""
    lock = provision_dir() / ".lock"
    if not lock.exists():
        return
    with open(lock) as fh:
        end = time.monotonic() + deadline_s
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
                fcntl.flock(fh, fcntl.LOCK_UN)
                return
            except BlockingIOError:
                if time.monotonic() > end:
                    return
                time.sleep(5)


def find_gym_python(minimum: str = MINIMUM) -> Path | None:
    """The interpreter (module doc), or None; never skips."""
    from gym_runtime.errors import BuildError
    from gym_runtime.venvs.pythons import pick_python

    try:
        return pick_python(SpecifierSet(minimum), os.environ).path
    except BuildError:
        pass
    _wait_for_running_build(WAIT_S)
    return _provisioned()


def gym_python_roots(minimum: str = MINIMUM) -> tuple[str, ...]:
    """The host directories a sandbox must mount to run a venv of the interpreter :func:`gym_python`
    answers, whichever it answers: the prefix of the host's own (found as the runtime finds it,
    without waiting; ``sandbox.probe.interpreter_roots``, what the sandbox backends mount) and the
    directory ``.ci/provision-python`` builds into. For a test OpenSandbox server's
    ``allowed_host_paths``, so a developer's host with its own interpreter and a clean one running
    the provisioned interpreter give the same result."""
    from gym_runtime.errors import BuildError
    from gym_runtime.venvs.pythons import pick_python
    from sandbox.probe import interpreter_roots

    roots = [str(provision_dir())]
    try:
        roots += [str(r) for r in interpreter_roots(str(pick_python(SpecifierSet(minimum), os.environ).path))]
    except BuildError:
        pass
    return tuple(dict.fromkeys(roots))


def gym_python(minimum: str = MINIMUM) -> Path:
    """The interpreter (module doc); skips the calling test when there is none."""
    found = find_gym_python(minimum)
    if found is None:
        pytest.skip(
            f"needs a CPython {minimum} (NeMo Gym 0.5+): none on this host and none provisioned; "
            f"run .ci/provision-python (builds one from Debian's source archive in a few minutes)"
        )
    return found


@pytest.fixture
def current_gym_python(monkeypatch: pytest.MonkeyPatch) -> Path:
    """For a test whose package runs the current Gym release: ``GYM_RUNTIME_PYTHON`` names
    :func:`gym_python`'s interpreter (the host's own, else the provisioned one, which the runtime
    does not look for by itself). Skips without one."""
    found = gym_python()
    monkeypatch.setenv("GYM_RUNTIME_PYTHON", str(found))
    return found
