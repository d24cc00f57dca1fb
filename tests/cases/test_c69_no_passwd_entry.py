"""Case C69 (tests/cases/data/C69/README.md): a uid with no passwd entry and no usable HOME.

As the case does (its ``run.sh``), the runtime runs as uid:gid 4242:4242 (``setpriv``), which this
host's ``/etc/passwd`` does not list, with the host's Python of the runtime's version and this
checkout's venv on ``sys.path`` (another uid cannot run an interpreter under root's home). Without
``GYM_RUNTIME_HOME`` it is one ``GR-INHERITED-HOME`` block, never a traceback; with a writable one,
HOME unset or ``/``, ``up`` starts, says what it used, and the uv cache lands under the state root.
Needs root (for ``setpriv``); skipped otherwise.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.cases import case_dir
from tests.helpers.daemon import FIXTURE_APP, kill_tree, read_ready_line, write_fixture_package

ROOT = Path(__file__).resolve().parents[2]
UID = 4242
HOST_PYTHON = Path(f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}")
BOOT = (
    f"import sys; sys.path[:0] = [{str(ROOT)!r}, {sysconfig.get_paths()['purelib']!r}]; sys.argv[0] = 'gym-runtime'; "
    "from gym_runtime.cli.main import console; console()"
)


def _no_entry() -> bool:
    try:
        pwd.getpwuid(UID)
    except KeyError:
        return True
    return False


pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None or not HOST_PYTHON.is_file() or not _no_entry(),
    reason=f"needs root, setpriv, {HOST_PYTHON} and a uid {UID} without a passwd entry",
)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory uid 4242 can read (pytest's own temporary root is root's alone)."""
    d = Path(tempfile.mkdtemp(prefix="gr-c69-"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _as_4242(argv: list[str], env: dict[str, str]) -> list[str]:
    base = {"PATH": "/usr/bin:/bin", "GYM_RUNTIME_PYTHON": str(HOST_PYTHON), "LANG": "C.UTF-8", **env}
    pairs = [f"{k}={v}" for k, v in base.items()]
    return ["setpriv", "--reuid", str(UID), "--regid", str(UID), "--clear-groups", "env", "-i", *pairs,
            str(HOST_PYTHON), "-c", BOOT, *argv]  # fmt: skip


def test_c69_runs_as_the_cases_uid() -> None:
    script = (case_dir("C69") / "run.sh").read_text()
    assert f"U={UID};" in script and "setpriv --reuid $U --regid $U --clear-groups" in script


def _package(shared: Path) -> Path:
    """A resources server that asks for its user name at start (as vLLM and torch do), with an agent."""
    pkg = write_fixture_package(
        shared / "pkg",
        {
            "acme_math": {"resources_servers": {"acme_math": {"domain": "math"}}},
            "acme_agent": {
                "responses_api_agents": {
                    "acme_agent": {"resources_server": {"type": "resources_servers", "name": "acme_math"}}
                }
            },
        },
        apps={"acme_math": "import getpass\nprint('user', getpass.getuser(), flush=True)\n" + FIXTURE_APP},
    )
    subprocess.run(["chmod", "-R", "a+rX", str(shared)], check=True)
    return pkg


@pytest.mark.parametrize(
    ("command", "env"),
    [(["doctor"], {}), (["up"], {"HOME": "/"}), (["dry-run", "--samples", "1"], {})],
    ids=["doctor-home-unset", "up-home-root", "dry-run-home-unset"],
)
def test_c69_without_a_state_root_one_error_block(shared: Path, command: list[str], env: dict[str, str]) -> None:
    pkg = _package(shared)
    argv = command if command == ["doctor"] else [command[0], str(pkg), *command[1:]]
    done = subprocess.run(_as_4242(argv, env), capture_output=True, text=True, cwd="/", timeout=120)
    assert done.returncode == 1, done.stderr
    assert "error[GR-INHERITED-HOME]" in done.stderr and "hint: set GYM_RUNTIME_HOME" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert f"uid {UID} has no passwd entry" in done.stderr or "HOME=/ is not a writable directory" in done.stderr


@pytest.mark.parametrize(
    ("home", "isolation"),
    [(None, "none"), ("/", None)],
    ids=["home-unset-isolation-none", "home-root"],
)
def test_c69_with_a_writable_state_root_up_starts(shared: Path, home: str | None, isolation: str | None) -> None:
    """``up`` starts, and its servers can ask for their user name: under bubblewrap a server runs as
    the namespace's root, at isolation none as uid 4242 itself, with the daemon's USER."""
    pkg = _package(shared)
    state = shared / "state"
    state.mkdir()
    os.chown(state, UID, UID)
    env = {"GYM_RUNTIME_HOME": str(state), **({"HOME": home} if home else {})}
    proc = subprocess.Popen(
        _as_4242(["up", str(pkg), *(["--isolation", isolation] if isolation else [])], env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd="/",
        start_new_session=True,
    )
    try:
        ready = json.loads(read_ready_line(proc, timeout=300))
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        kill_tree(proc)
    assert ready["status"] == "ready"
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in out + err and "KeyError" not in err
    assert f"inherited: uid {UID} has no passwd entry and no USER: USER={UID}" in err
    assert f"HOME={state} (the state root, GYM_RUNTIME_HOME)" in err
    assert (state / ".cache" / "uv").is_dir()  # uv's cache followed HOME into the state root


def test_c69_build_with_a_writable_state_root(shared: Path) -> None:
    """``build`` makes the same HOME as ``up``: uv's cache goes under the state root."""
    pkg = _package(shared)
    state = shared / "state"
    state.mkdir()
    os.chown(state, UID, UID)
    done = subprocess.run(
        _as_4242(["build", str(pkg)], {"GYM_RUNTIME_HOME": str(state)}),
        capture_output=True,
        text=True,
        cwd="/",
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr + done.stdout
    assert f"HOME={state} (the state root, GYM_RUNTIME_HOME)" in done.stderr
    assert (state / ".cache" / "uv").is_dir()


def test_c69_interpreter_search_skips_what_it_cannot_derive_or_read() -> None:
    """The interpreter search as uid 4242 with HOME unset (no pyenv root derived from it) and an
    inherited PYENV_ROOT it cannot read (the host's: the case's run 3'): skipped, no traceback."""
    unreadable = Path(tempfile.mkdtemp(prefix="gr-c69-pyenv-"))  # root's alone (0700)
    (unreadable / "versions" / "3.13.1" / "bin").mkdir(parents=True)
    code = (
        f"import sys; sys.path[:0] = [{str(ROOT)!r}, {sysconfig.get_paths()['purelib']!r}]; "
        "from gym_runtime.venvs.pythons import candidates; "
        f"found = candidates({{'PYENV_ROOT': {str(unreadable)!r}, 'PATH': '/usr/bin'}}); "
        "print(sorted({source for _, source in found}))"
    )
    try:
        argv = [
            "setpriv",
            "--reuid",
            str(UID),
            "--regid",
            str(UID),
            "--clear-groups",
            "env",
            "-i",
            "PATH=/usr/bin:/bin",
        ]
        done = subprocess.run(
            [*argv, str(HOST_PYTHON), "-c", code], capture_output=True, text=True, cwd="/", timeout=60
        )
    finally:
        shutil.rmtree(unreadable, ignore_errors=True)
    assert done.returncode == 0, done.stderr
    assert "pyenv" not in done.stdout and "PATH" in done.stdout
