"""``--sandbox-backend`` / ``GYM_RUNTIME_SANDBOX_BACKEND``: the backend is chosen once, before
anything is built; an OpenSandbox backend that cannot be used stops ``up`` at once with one
``GR-OSB-*`` block and its exit code, never showing the API key."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "native-quickstart"
KEY = "k-never-printed-123"


def _up(tmp_path: Path, *flags: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENSANDBOX_", "GYM_RUNTIME_OPENSANDBOX_"))}
    return subprocess.run(
        [sys.executable, "-m", "gym_runtime.cli.main", "up", str(EXAMPLE), "--work-dir", str(tmp_path / "run"), *flags],
        capture_output=True,
        text=True,
        timeout=120,
        env={**base, "GYM_RUNTIME_HOME": str(tmp_path / "home"), **env},
    )


def test_opensandbox_without_a_server_is_a_setting_error(tmp_path: Path) -> None:
    r = _up(tmp_path, "--sandbox-backend", "opensandbox")
    assert r.returncode == 1 and r.stdout == "", r.stderr
    assert "error[GR-OSB-SETTINGS]" in r.stderr and "OPENSANDBOX_DOMAIN" in r.stderr
    assert not (tmp_path / "home" / "venvs").exists()  # nothing was built


def test_an_unreachable_server_stops_up_before_any_build(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = _up(
        tmp_path,
        GYM_RUNTIME_SANDBOX_BACKEND="opensandbox",
        OPENSANDBOX_DOMAIN=f"127.0.0.1:{port}",
        OPENSANDBOX_API_KEY=KEY,
    )
    assert r.returncode == 3 and r.stdout == "", r.stderr
    assert "error[GR-OSB-UNREACHABLE]" in r.stderr and f"127.0.0.1:{port}" in r.stderr
    assert r.stderr.count("error[") == 1 and "Traceback" not in r.stderr and KEY not in r.stderr
    assert not (tmp_path / "home" / "venvs").exists()


def test_the_flag_wins_over_the_variable_and_a_bad_value_is_a_setting_error(tmp_path: Path) -> None:
    r = _up(tmp_path, "--sandbox-backend", "opensandbox", GYM_RUNTIME_SANDBOX_BACKEND="local")
    assert r.returncode == 1 and "GR-OSB-SETTINGS" in r.stderr
    bad = _up(tmp_path, GYM_RUNTIME_SANDBOX_BACKEND="docker")
    assert bad.returncode == 1 and "GR-SETTINGS-SANDBOX-BACKEND" in bad.stderr


def test_doctor_names_the_backends_and_an_unreachable_server(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENSANDBOX_", "GYM_RUNTIME_"))}
    r = subprocess.run(
        [sys.executable, "-m", "gym_runtime.cli.main", "doctor"],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **base,
            "GYM_RUNTIME_HOME": str(tmp_path / "home"),
            "OPENSANDBOX_DOMAIN": f"127.0.0.1:{port}",
            "OPENSANDBOX_API_KEY": KEY,
        },
    )
    lines = [line.strip() for line in r.stdout.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("backends:"))
    assert (
        lines[start] == "backends:  servers run in the local backend (GYM_RUNTIME_SANDBOX_BACKEND, --sandbox-backend)"
    )
    assert lines[start + 1].startswith("local: isolation ")
    assert lines[start + 2].startswith(f"opensandbox: server http://127.0.0.1:{port}: ERROR [GR-OSB-UNREACHABLE]")
    assert KEY not in r.stdout + r.stderr
    assert r.returncode in (0, 3)  # the local backend is the one in use: the server's state is only reported
