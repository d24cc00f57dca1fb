"""Fault: the disk of the venv root fills during a venv build (a small tmpfs as the venv root).

Expected: the build fails with one ``GR-BUILD-NO-SPACE`` error naming the venv root's disk, what is
free and what the distribution being copied needs; nothing half-built is left (no temp dir, no venv
looking ready for that server); once space is freed, the next build succeeds."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

from tests.helpers.daemon import simple_env
from tests.helpers.disks import fill, small_disk
from tests.helpers.index import write_simple_index
from tests.helpers.wheels import build_wheel


def _build(pkg: Path, tmp: Path, venvs: Path, index: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_")}
    env.update(
        {
            "GYM_RUNTIME_HOME": str(tmp / "home"),
            "GYM_RUNTIME_VENV_DIR": str(venvs),
            "GYM_RUNTIME_UV_CACHE_DIR": str(tmp / "uv-cache"),
            "GYM_RUNTIME_PIN_MODE": "none",
            "UV_INDEX_URL": index,
        }
    )
    return subprocess.run(
        [sys.executable, "-m", "gym_runtime.cli.main", "build", "--json", str(pkg)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_disk_full_during_a_venv_build_is_one_error_and_the_next_build_succeeds(tmp_path: Path) -> None:
    # a wheel of ~8 MB unpacked that does not compress below ~4 MB: bigger than what is left free
    build_wheel(tmp_path / "files", "bigpkg", "1.0", files={"bigpkg/blob.txt": secrets.token_hex(4 << 20)})
    index = write_simple_index(tmp_path / "files", tmp_path / "index")
    pkg = simple_env(tmp_path / "pkg")
    (pkg / "resources_servers/acme_math/requirements.txt").write_text("bigpkg\n")
    with small_disk(tmp_path / "venvs", 24) as venvs:
        filler = fill(venvs / "filler.bin", leave_mb=4)
        full = _build(pkg, tmp_path, venvs, index)
        assert full.returncode == 3, full.stderr
        error = json.loads(full.stdout)["error"]
        assert error["code"] == "GR-BUILD-NO-SPACE", error
        assert f"the disk holding the venv root {venvs} is full" in error["message"]
        assert "acme_math" in error["message"] and "MB free" in error["message"]
        assert "installing bigpkg-1.0-py3-none-any.whl alone needs 8.0 MB" in error["message"]
        assert "GYM_RUNTIME_VENV_DIR" in error["hint"] and "Traceback" not in full.stderr
        assert full.stderr.count("error[GR-BUILD-NO-SPACE]") == 1
        assert list((venvs / ".tmp").iterdir()) == []  # nothing half-built
        ready = [m for m in venvs.glob("*/.gym-runtime-ready") if "acme_math" in m.read_text()]
        assert ready == []

        filler.unlink()  # space freed
        again = _build(pkg, tmp_path, venvs, index)
        assert again.returncode == 0, again.stderr
        report = json.loads(again.stdout)
        math_venv = Path(report["servers"]["acme_math"]["path"])
        assert (math_venv / "lib").is_dir() and list(math_venv.glob("lib/python*/site-packages/bigpkg/blob.txt"))
