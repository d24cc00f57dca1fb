"""Servers with identical closures (the resources server, the agent and the relay in front of it)
share one venv and each start; the first run learns each
server's imports in a learning dir of its own, the daemon fills the venv's shared bytecode cache,
and the next run gives both servers that cache (read-only, no writes). The cache is saved to the
bytecode store, so a run after the venvs were deleted learns nothing either. A server restarted
once its imports are learned reads the shared cache."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import httpx

from gym_runtime.venvs.bytecode import PRELOADED_PARENT, REPORT_VAR, learned
from gym_runtime.venvs.pyc_store import PycStore
from gym_runtime.venvs.store import read_marker
from tests.helpers.daemon import SIMPLE_SERVERS, kill_tree, read_ready_line, simple_env, up_process


def _run_once(pkg: Path, tmp: Path, home: Path) -> dict[str, dict]:
    """Start ``up``, wait for ready, wait until the shared cache lists every server, stop; returns
    each server's environment as it saw it."""
    proc = up_process(
        pkg,
        tmp,
        "--policy-base-url",
        "http://127.0.0.1:9/v1",
        env={"GYM_RUNTIME_HOME": str(home), "PYTHONDONTWRITEBYTECODE": "1"},
    )
    try:
        info = json.loads(read_ready_line(proc))
        assert set(info["servers"]) == SIMPLE_SERVERS
        envs = {n: json.loads((tmp / "run/servers" / n / "contract.json").read_text())["env"] for n in info["servers"]}
        venv = Path(envs["acme_math"]["VIRTUAL_ENV"])
        store, digest = PycStore(home / "bytecode"), read_marker(venv)["digest"]
        deadline = time.monotonic() + 60
        while (
            len(store.users(digest) - {PRELOADED_PARENT}) < len(SIMPLE_SERVERS)  # learned, then saved
            and time.monotonic() < deadline
        ):
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        return envs
    finally:
        kill_tree(proc)


def test_identical_closures_share_one_venv_and_its_bytecode_cache(tmp_path: Path) -> None:
    pkg = simple_env(tmp_path / "pkg")
    first = _run_once(pkg, tmp_path / "a", tmp_path / "home")
    venv = Path(first["acme_math"]["VIRTUAL_ENV"])
    assert {e["VIRTUAL_ENV"] for e in first.values()} == {str(venv)}  # one venv for all
    prefixes = {n: Path(e["PYTHONPYCACHEPREFIX"]) for n, e in first.items()}
    assert len(set(prefixes.values())) == len(SIMPLE_SERVERS), "each server learns in a dir of its own"
    assert all(p.is_relative_to(venv / ".gym-runtime" / "learn") for p in prefixes.values())
    assert all("PYTHONDONTWRITEBYTECODE" not in e for e in first.values()), "the host's switch would stop learning"
    # each server learned (and, under bubblewrap, the venv's preloaded parent), and left no dir behind
    assert len(learned(venv) - {PRELOADED_PARENT}) == len(SIMPLE_SERVERS)
    assert not any(p.exists() for p in prefixes.values())

    second = _run_once(pkg, tmp_path / "b", tmp_path / "home")
    for env in second.values():  # the venv's own bytecode, read-only, written by the daemon alone
        assert "PYTHONPYCACHEPREFIX" not in env and env["PYTHONDONTWRITEBYTECODE"] == "1"


def test_a_rebuilt_venv_starts_with_the_stored_bytecode_and_learns_nothing(tmp_path: Path) -> None:
    pkg = simple_env(tmp_path / "pkg")
    home = tmp_path / "home"
    first = _run_once(pkg, tmp_path / "a", home)
    venv = Path(first["acme_math"]["VIRTUAL_ENV"])
    users = learned(venv)
    assert len(users - {PRELOADED_PARENT}) == len(SIMPLE_SERVERS)
    assert PycStore(home / "bytecode").users(read_marker(venv)["digest"]) == users
    shutil.rmtree(home / "venvs")  # a cold start: venvs deleted, the uv cache and the store kept

    second = _run_once(pkg, tmp_path / "b", home)
    assert Path(second["acme_math"]["VIRTUAL_ENV"]) == venv and learned(venv) == users
    for env in second.values():  # placed before the servers started: no learning dir
        assert "PYTHONPYCACHEPREFIX" not in env and env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert not (venv / ".gym-runtime" / "learn").exists(), "no learning dir was made"


def test_a_server_restarted_once_its_imports_are_learned_reads_the_shared_cache(tmp_path: Path) -> None:
    """Once the daemon has harvested a server's learning dir and removed it, the server's next
    start (here a crash's restart) reads the venv's shared cache: it is given neither the removed
    dir as its prefix nor a report file there (its spec is made again: placement/local.py)."""
    pkg = simple_env(tmp_path / "pkg")
    tmp = tmp_path / "a"
    proc = up_process(
        pkg,
        tmp,
        "--policy-base-url",
        "http://127.0.0.1:9/v1",
        env={"GYM_RUNTIME_HOME": str(tmp_path / "home"), "PYTHONDONTWRITEBYTECODE": "1"},
    )
    try:
        info = json.loads(read_ready_line(proc))
        contract = tmp / "run/servers/acme_math/contract.json"
        prefix = Path(json.loads(contract.read_text())["env"]["PYTHONPYCACHEPREFIX"])
        deadline = time.monotonic() + 60
        while prefix.exists() and time.monotonic() < deadline:  # harvested, then removed
            time.sleep(0.1)
        assert not prefix.exists()
        rows = httpx.get(info["head_server"] + "/processes", trust_env=False, timeout=10).json()["processes"]
        pid = min(r["pid"] for r in rows if r["role"] == "server" and r["member"] == "acme_math")
        contract.unlink()
        os.kill(pid, signal.SIGKILL)
        while not contract.exists() and time.monotonic() < deadline + 60:  # restarted after its backoff
            time.sleep(0.1)
        env = json.loads(contract.read_text())["env"]
        assert "PYTHONPYCACHEPREFIX" not in env and REPORT_VAR not in env, env
        assert env["PYTHONDONTWRITEBYTECODE"] == "1" and not prefix.exists()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        kill_tree(proc)
