"""The lifetime NeMo RL gives its ``NemoGym`` actor, through the drop-in: Ray asks for shutdown
within 10 s (``DEFAULT_ENV_SHUTDOWN_TIMEOUT_SECONDS``), then ``ray.kill``s the actor's process, and
never restarts it (``max_restarts=0``). So ``RunHelper.shutdown()`` returns within 10 s from any
state, and whatever a SIGKILL of the process that called ``start()`` leaves is gone within seconds.

The process that calls ``start()`` is a real one (tests/nemo_gym/actor_process.py, with a Ray
worker's command line); the environment is fixture trees without a manifest (stdlib servers,
tests/helpers/daemon.py), one of them a wedged server: it ignores SIGINT and SIGTERM and leaves a
helper child behind (case C05's stubborn server). A server still building its venv waits for a
file a loopback index holds back. 10 s is NeMo RL's contract, kept as a deadline, not a timing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import yaml

from tests.helpers.daemon import FIXTURE_APP, cmdline, descendants, wait_gone, write_fixture_package
from tests.helpers.index import SimpleIndex
from tests.helpers.wheels import build_wheel

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
ACTOR = Path(__file__).with_name("actor_process.py")
RAY_WORKER_ARGV = ["/opt/ray/default_worker.py", "--node-ip-address=127.0.0.1", "--node-manager-port=39121"]
NEMO_RL_SHUTDOWN_S = 10.0  # NeMo RL's DEFAULT_ENV_SHUTDOWN_TIMEOUT_SECONDS, then ray.kill
# case C05's stubborn server, on the port the runtime gives it
STUBBORN_APP = (
    "import signal, subprocess, sys\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)'])  # its helper\n" + FIXTURE_APP
)


def gym_checkout(root: Path, slow_build: bool = False, slow_answer: bool = False) -> tuple[Path, list[str]]:
    """Fixture trees as a Gym checkout holds them (no manifest): ``acme_math``, an agent, and the
    wedged ``acme_stubborn``; with ``slow_build``, ``acme_math`` requires ``slowpkg``; with
    ``slow_answer`` it opens its port only after 600 s. Returns the root and its ``config_paths``."""
    math = {"domain": "math", **({"fixture_sleep": 600} if slow_answer else {})}
    write_fixture_package(
        root,
        {
            "acme_math": {"resources_servers": {"acme_math": math}},
            "acme_stubborn": {"resources_servers": {"acme_stubborn": {"domain": "other"}}},
            "acme_agent": {
                "responses_api_agents": {
                    "acme_agent": {"resources_server": {"type": "resources_servers", "name": "acme_math"}}
                }
            },
        },
        apps={"acme_stubborn": STUBBORN_APP},
    )
    if slow_build:
        (root / "resources_servers/acme_math/requirements.txt").write_text("slowpkg\n")
    manifest = root / "nemo-environment.yaml"
    paths = yaml.safe_load(manifest.read_text())["config_paths"]
    manifest.unlink()
    return root, paths


def initial(paths: list[str], tmp: Path) -> dict:
    """The keys NeMo RL's ``_spinup`` sets that matter here (no policy URL: the stub model)."""
    return {
        "config_paths": paths,
        "default_host": "127.0.0.1",
        "port_range_low": 5000,
        "port_range_high": 5999,
        "head_server": {"host": "127.0.0.1", "port": 0},
        "nemo_gym_log_dir": str(tmp / "gym-logs"),
    }


def actor(root: Path, paths: list[str], tmp: Path, env: dict[str, str] | None = None, **args) -> subprocess.Popen:
    """tests/nemo_gym/actor_process.py in ``root`` (its own session, as a Ray worker is)."""
    body = {"initial": initial(paths, tmp), "argv": RAY_WORKER_ARGV, **args}
    with (tmp / "actor.err").open("ab") as err:
        proc = subprocess.Popen(
            [sys.executable, str(ACTOR), json.dumps(body)],
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    proc.err_log = tmp / "actor.err"  # type: ignore[attr-defined]
    return proc


def err_tail(proc: subprocess.Popen) -> str:
    return proc.err_log.read_text(errors="replace")[-4000:]  # type: ignore[attr-defined]


def last_line(proc: subprocess.Popen, timeout: float = 600) -> dict:
    """The JSON line the actor prints (``hold``: its first; other modes: its last, at exit)."""
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if sel.select(1):
            line = proc.stdout.readline()
            if line.startswith("{"):
                return json.loads(line)
            if not line and proc.poll() is not None:
                break
    proc.kill()
    raise AssertionError(f"no JSON line from the actor (exit {proc.poll()}): {err_tail(proc)}")


@pytest.fixture
def slow_index(tmp_path: Path) -> Iterator[tuple[SimpleIndex, dict[str, str]]]:
    """A loopback index whose ``slowpkg`` download waits until the test ends, and the environment
    that makes venv builds use it (their own uv cache, no pins)."""
    build_wheel(tmp_path / "files", "slowpkg", "1.0")
    with SimpleIndex(tmp_path / "files") as idx:
        idx.hold()
        env = {
            "UV_INDEX_URL": idx.url,
            "GYM_RUNTIME_UV_CACHE_DIR": str(tmp_path / "uv-cache"),
            "GYM_RUNTIME_VENV_DIR": str(tmp_path / "venvs"),
            "GYM_RUNTIME_PIN_MODE": "none",
        }
        try:
            yield idx, env
        finally:
            idx.release()


def test_sigkill_of_the_ready_actor_leaves_no_process_of_the_run(tmp_path: Path) -> None:
    root, paths = gym_checkout(tmp_path / "gym")
    proc = actor(root, paths, tmp_path, mode="hold")
    try:
        assert last_line(proc)["pid"] == proc.pid
        tree = descendants(proc.pid)
        names = " ".join(" ".join(cmdline(p)) for p in tree)
        assert "sleep(3600)" in names  # the wedged server's helper is among them
        os.kill(proc.pid, signal.SIGKILL)  # ray.kill
        proc.wait(5)
        left = wait_gone([p.pid for p in tree], NEMO_RL_SHUTDOWN_S)
        assert left == [], [(pid, psutil.Process(pid).cmdline()) for pid in left if psutil.pid_exists(pid)]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_sigkill_of_the_actor_while_a_server_builds_its_venv_leaves_no_process_of_the_run(
    tmp_path: Path, slow_index: tuple[SimpleIndex, dict[str, str]]
) -> None:
    idx, env = slow_index
    root, paths = gym_checkout(tmp_path / "gym", slow_build=True)
    proc = actor(root, paths, tmp_path, env=env, mode="hold")
    try:
        deadline = time.monotonic() + 300
        while not any(r.startswith("/files/") for r in idx.requests):  # uv waits for slowpkg's file
            assert time.monotonic() < deadline and proc.poll() is None, err_tail(proc)
            time.sleep(0.05)
        tree = descendants(proc.pid)
        assert any("uv" in os.path.basename((cmdline(p) or [""])[0]) for p in tree), [cmdline(p) for p in tree]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(5)
        left = wait_gone([p.pid for p in tree], NEMO_RL_SHUTDOWN_S)
        assert left == [], [(pid, psutil.Process(pid).cmdline()) for pid in left if psutil.pid_exists(pid)]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_shutdown_with_a_wedged_server_returns_within_nemo_rls_deadline(tmp_path: Path) -> None:
    root, paths = gym_checkout(tmp_path / "gym")
    proc = actor(root, paths, tmp_path, mode="shutdown")
    try:
        out = last_line(proc)
        assert out["shutdown_s"] < NEMO_RL_SHUTDOWN_S and out["left"] == [], out
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.parametrize("phase", ["building venvs", "waiting for servers to answer GET /"])
def test_shutdown_mid_start_returns_within_nemo_rls_deadline(
    phase: str, tmp_path: Path, slow_index: tuple[SimpleIndex, dict[str, str]]
) -> None:
    """During a venv build that does not end by itself, and once the wedged server runs but the
    start-up still waits: ``start()`` raises ``GR-START-INTERRUPTED`` and has left when ``shutdown()``
    returns, within 10 s, and nothing of the run is left."""
    idx, env = slow_index
    building = phase == "building venvs"
    root, paths = gym_checkout(tmp_path / "gym", slow_build=building, slow_answer=not building)
    proc = actor(root, paths, tmp_path, env=env, mode="shutdown_at", phase=phase)
    try:
        out = last_line(proc)
        assert out["shutdown_s"] < NEMO_RL_SHUTDOWN_S and out["start_left"] and out["left"] == [], out
        assert out["raised"] == "GR-START-INTERRUPTED", out
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
