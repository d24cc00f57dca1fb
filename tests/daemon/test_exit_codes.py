"""``up``'s exit-code rule (its --help): 0 after a requested stop once ready (tests in test_up.py),
130 when stopped before ready, including a Ctrl-C in the middle of a venv build."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers.daemon import descendants, kill_tree, up_process, wait_gone, write_fixture_package
from tests.helpers.index import SimpleIndex
from tests.helpers.wheels import build_wheel


def test_ctrl_c_during_a_venv_build_exits_130(tmp_path: Path) -> None:
    files = tmp_path / "files"
    build_wheel(files, "slowpkg", "1.0")
    pkg = write_fixture_package(tmp_path / "pkg", {"acme_math": {"resources_servers": {"acme_math": {
        "domain": "math"}}}})
    (pkg / "resources_servers/acme_math/requirements.txt").write_text("slowpkg\n")
    with SimpleIndex(files, delay_s=30) as idx:
        env = {k: v for k, v in os.environ.items() if not k.startswith("UV_")}
        env.update({"UV_INDEX_URL": idx.url, "GYM_RUNTIME_HOME": str(tmp_path / "home"),
                    "GYM_RUNTIME_UV_CACHE_DIR": str(tmp_path / "uv-cache"), "GYM_RUNTIME_PIN_MODE": "none"})
        proc = subprocess.Popen([sys.executable, "-m", "gym_runtime.cli.main", "up", str(pkg), "--work-dir",
                                 str(tmp_path / "run")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env, start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            while not any(r.startswith("/files/") for r in idx.requests):
                assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
                time.sleep(0.05)
            kids = [p.pid for p in descendants(proc.pid)]
            os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C
            out, err = proc.communicate(timeout=15)
        finally:
            kill_tree(proc)
    assert proc.returncode == 130 and out == "", err
    assert "stopped during start-up (phase: building venvs)" in err and "error[" not in err
    assert wait_gone(kids, 2.0) == []


def test_help_states_the_rule() -> None:
    r = subprocess.run([sys.executable, "-m", "gym_runtime.cli.main", "up", "--help"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    assert "0 stopped on request (SIGTERM or SIGINT) after the ready line" in text
    assert "130 stopped by SIGTERM or SIGINT before the ready line" in text and "cancelled venv build" in text


def test_a_cancelled_build_is_an_interruption() -> None:
    from gym_runtime.errors import BuildError
    from gym_runtime.supervise.interrupted import as_interrupted

    err = as_interrupted(BuildError("venv builds were cancelled", code="GR-BUILD-CANCELLED"), "building venvs")
    assert err.exit_code == 130 and err.code == "GR-START-INTERRUPTED" and "building venvs" in err.message
    other = BuildError("uv failed", code="GR-BUILD-RESOLVE")
    assert as_interrupted(other, "building venvs") is other
