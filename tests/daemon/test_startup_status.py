"""``gym-runtime status`` during start-up: ``daemon.json`` points at the head server from the start,
and the head server answers with the phase and each server's state while a venv build runs (real
daemon, real uv against a loopback index that holds one file back)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers.daemon import SIMPLE_SERVERS, kill_tree, slow_build_package
from tests.helpers.index import SimpleIndex
from tests.helpers.wheels import build_wheel


def _cli(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gym_runtime.cli.main", *argv], capture_output=True, text=True, env=env, timeout=60
    )


def test_status_during_a_venv_build_shows_phase_and_each_server(tmp_path: Path) -> None:
    pkg = slow_build_package(tmp_path / "pkg")  # acme_math's venv build waits for slowpkg
    build_wheel(tmp_path / "files", "slowpkg", "1.0")
    with SimpleIndex(tmp_path / "files", delay_s=300) as idx:  # the build waits until the test stops it
        env = {k: v for k, v in os.environ.items() if not k.startswith("UV_")}
        env.update(
            {
                "UV_INDEX_URL": idx.url,
                "GYM_RUNTIME_HOME": str(tmp_path / "home"),
                "GYM_RUNTIME_UV_CACHE_DIR": str(tmp_path / "uv-cache"),
                "GYM_RUNTIME_PIN_MODE": "none",
            }
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "gym_runtime.cli.main", "up", str(pkg), "--work-dir", str(tmp_path / "run")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 60
            while not any(r.startswith("/files/") for r in idx.requests):
                assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
                time.sleep(0.05)
            record = json.loads((tmp_path / "home" / "daemon.json").read_text())
            assert record["status"] == "starting" and record["head_server"].startswith("http://127.0.0.1:")
            done = _cli(env, "status", "--json")
            assert done.returncode == 3, done.stderr  # not ready yet
            out = json.loads(done.stdout)
            assert out["head_server"] == record["head_server"]
            assert out["health"]["status"] == "starting" and out["health"]["phase"] == "building venvs"
            states = {s["process_name"]: s["state"] for s in out["servers"]}
            assert states["acme_math"].startswith("building venv: stage 1"), states
            assert set(states) == SIMPLE_SERVERS and out["health"]["servers"] == states
            text = _cli(env, "status")
            assert "starting (building venvs)" in text.stdout and "acme_math" in text.stdout
            logs = _cli(env, "logs", "acme_math")  # no server log yet: says what it is doing instead
            assert logs.returncode == 0 and "building venv" in logs.stdout
            follow = subprocess.Popen(
                [sys.executable, "-m", "gym_runtime.cli.main", "logs", "acme_math", "--follow"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            first = follow.stdout.readline()  # printed, then it waits for the server's log to exist
            assert "building venv" in first
            time.sleep(1.5)
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
            _, f_err = follow.communicate(timeout=30)
            assert follow.returncode == 0 and "Traceback" not in f_err
        finally:
            kill_tree(proc)
    assert proc.returncode == 130, err
    assert "egress allowlist (everything else denied): 127.0.0.0/8, ::1, localhost" in err  # said at start
