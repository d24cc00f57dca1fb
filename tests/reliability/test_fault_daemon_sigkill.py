"""Fault: the daemon is SIGKILLed at 20 random moments of its start-up and of its running life.

Each run: ``gym-runtime up`` on one shared state directory (``GYM_RUNTIME_HOME``: daemon record,
lock, venv root, logs) with a package whose venv must be built anew each time (its requirement's
spelling changes), servers in the sandbox and the built-in stub model; SIGKILL at a moment drawn
from [0, time-to-ready + 2 s), so kills land while config is read, venvs build (uv running), the
sandbox starts, servers start, and while it serves.

Expected: every time, 0 processes left (no server, stub model, uv, namespace holder or watchdog:
nothing whose command line, working directory or environment names the test's directories) within
10 s; and the next ``up`` on the same state directory starts cleanly: it does not stop on its own
before its kill moment, it prints its ready line whenever its moment comes after its time-to-ready,
and a last ``up`` after the 20th kill reaches ready and stops with exit 0."""

from __future__ import annotations

import json
import os
import random
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.helpers.daemon import descendants, kill_tree, slow_build_package, up_process, write_fixture_package
from tests.helpers.index import SimpleIndex
from tests.helpers.wheels import build_wheel

pytestmark = pytest.mark.slow
KILLS = 20


def _package(root: Path) -> Path:
    return write_fixture_package(
        root,
        {
            "acme_math": {"resources_servers": {"acme_math": {"domain": "math"}}},
            "acme_agent": {
                "responses_api_agents": {
                    "acme_agent": {
                        "resources_server": {"type": "resources_servers", "name": "acme_math"},
                        "model_server": {"type": "responses_api_models", "name": "policy_model"},
                    }
                }
            },
            "policy_model": {
                "responses_api_models": {
                    "fixture_model": {"base_url": "${policy_base_url}", "model": "${policy_model_name}"}
                }
            },
        },
    )


def _leftovers(marker: str, spare: set[int]) -> list[str]:
    """Processes (other than ``spare``) naming ``marker`` in their command line, cwd or environment."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        if p.pid in spare:
            continue
        try:
            seen = " ".join(p.info["cmdline"] or []) + " " + p.cwd() + " " + " ".join(p.environ().values())
            if marker in seen and p.status() != psutil.STATUS_ZOMBIE:
                found.append(f"{p.pid} {' '.join(p.info['cmdline'] or [])[:200]}")
        except psutil.Error:
            continue
    return found


def _ready_within(proc, seconds: float) -> dict | None:
    """The ready line if ``up`` prints it within ``seconds`` (None when the time runs out first);
    fails if ``up`` exits on its own meanwhile."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    if not sel.select(max(0.0, seconds)):
        assert proc.poll() is None, f"up exited {proc.returncode} on its own: {proc.stderr.read()[-3000:]}"
        return None
    line = proc.stdout.readline()
    assert line, f"up exited {proc.wait(10)} on its own: {proc.stderr.read()[-3000:]}"
    return json.loads(line)


def test_sigkill_of_the_daemon_at_random_moments(tmp_path: Path) -> None:
    seed = int(os.environ.get("GYM_RUNTIME_TESTS_SEED") or time.time())
    rng = random.Random(seed)
    pkg = _package(tmp_path / "pkg")
    req = pkg / "resources_servers/acme_math/requirements.txt"
    build_wheel(tmp_path / "files", "tinypkg", "1.0")
    marker, spare = str(tmp_path), {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    with SimpleIndex(tmp_path / "files") as idx:
        env = {
            "GYM_RUNTIME_HOME": str(tmp_path / "home"),
            "GYM_RUNTIME_UV_CACHE_DIR": str(tmp_path / "uv-cache"),
            "GYM_RUNTIME_PIN_MODE": "none",
            "UV_INDEX_URL": idx.url,
        }

        def up(i: int):
            req.write_text(f"tinypkg!=0.{i}\n")  # another spelling: another digest, a venv to build
            return up_process(pkg, tmp_path, env=env)

        t0, proc = time.monotonic(), up(100)
        try:
            assert _ready_within(proc, 180) is not None
            to_ready = time.monotonic() - t0
        finally:
            kill_tree(proc)
        moments = [rng.uniform(0, to_ready + 2) for _ in range(KILLS)]
        for i, moment in enumerate(moments):
            proc = up(i)
            try:
                started = time.monotonic()
                info = _ready_within(proc, moment)
                if info is not None:
                    assert moment + 1.5 >= time.monotonic() - started  # ready before its moment
                    time.sleep(max(0.0, moment - (time.monotonic() - started)))
                elif moment > 3 * to_ready + 5:
                    pytest.fail(f"run {i} was not ready {moment:.1f}s after it started (seed {seed})")
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
                deadline = time.monotonic() + 10
                while (left := _leftovers(marker, spare)) and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert left == [], f"kill {i} at {moment:.2f}s (seed {seed}) left processes: {left}"
            finally:
                kill_tree(proc)
        proc = up(KILLS)
        try:
            assert _ready_within(proc, 180) is not None
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0
        finally:
            kill_tree(proc)
        assert _leftovers(marker, spare) == []
        tmp_builds = [d.name for d in (tmp_path / "home/venvs/.tmp").iterdir()]
        assert tmp_builds == [], f"half-built venvs left after 20 kills (seed {seed}): {tmp_builds}"


def test_sigkill_during_a_venv_build_leaves_no_uv_and_the_next_build_clears_the_half_built_venv(tmp_path: Path) -> None:
    """The daemon SIGKILLed while uv downloads (an index that answers the wheel after 30 s): uv dies
    with it at once (it used to run on, in its own session, until its install was done), and the
    next build, of any venv, removes the abandoned temp build."""
    build_wheel(tmp_path / "files", "slowpkg", "1.0")
    build_wheel(tmp_path / "files", "tinypkg", "1.0")
    pkg = slow_build_package(tmp_path / "pkg")
    with SimpleIndex(tmp_path / "files", delay_s=30) as idx:
        env = {
            "GYM_RUNTIME_HOME": str(tmp_path / "home"),
            "GYM_RUNTIME_UV_CACHE_DIR": str(tmp_path / "uv-cache"),
            "GYM_RUNTIME_PIN_MODE": "none",
            "UV_INDEX_URL": idx.url,
        }
        proc = up_process(pkg, tmp_path, env=env)
        try:
            deadline = time.monotonic() + 60
            while not any(r.startswith("/files/slowpkg") for r in idx.requests):
                assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
                time.sleep(0.05)
            uv = [p for p in descendants(proc.pid) if p.name() == "uv"]
            assert uv, "no uv running"
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
            gone, alive = psutil.wait_procs(uv, timeout=3)
            assert alive == [], f"uv outlived the daemon: {alive}"
        finally:
            kill_tree(proc)
        abandoned = list((tmp_path / "home/venvs/.tmp").iterdir())
        assert abandoned  # the unfinished build(s) the daemon left
        (pkg / "resources_servers/acme_math/requirements.txt").write_text("tinypkg\n")  # another venv
        idx.delay_s = 0
        done = subprocess.run(
            [sys.executable, "-m", "gym_runtime.cli.main", "build", str(pkg)],
            capture_output=True,
            text=True,
            env={**{k: v for k, v in os.environ.items() if not k.startswith("UV_")}, **env},
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        assert list((tmp_path / "home/venvs/.tmp").iterdir()) == []
