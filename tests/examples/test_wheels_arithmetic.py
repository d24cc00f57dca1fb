"""examples/wheels-arithmetic (wheels-v1): its wheels/ closure comes from `gym-runtime vendor` (run by
examples/vendor_wheels_arithmetic.sh), and it starts with stage 1 pointed at an EMPTY index and an
empty uv cache, so every server venv is built from the vendored wheels alone."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gym_runtime.errors import GymRuntimeError
from gym_runtime.venvs.pythons import find_python
from tests.examples.conftest import EXAMPLES, dry_run, rows_by_line
from tests.helpers.index import SimpleIndex

PKG = EXAMPLES / "wheels-arithmetic"
ROWS = EXAMPLES / "wheels-arithmetic.jsonl"
SCRIPT = EXAMPLES / "vendor_wheels_arithmetic.sh"
PLATFORM = {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}.get(platform.machine())


def _server_python() -> str:
    """3.13, the runtime image's server Python (vendored for a Python other than the runtime's
    own), when this host has one; else the Python the suite runs on (a stock distribution host)."""
    try:
        find_python("3.13", os.environ)
        return "3.13"
    except GymRuntimeError:
        return f"{sys.version_info[0]}.{sys.version_info[1]}"


PYTHON = _server_python()


def copy_package(dest: Path) -> Path:
    """The example package and its vendor script in ``dest`` (without any local wheels/)."""
    shutil.copytree(PKG, dest / PKG.name, ignore=shutil.ignore_patterns("wheels"))
    shutil.copy2(SCRIPT, dest / SCRIPT.name)
    return dest / PKG.name


@pytest.mark.pypi
@pytest.mark.skipif(PLATFORM is None, reason="vendoring targets linux/amd64 or linux/arm64 hosts")
def test_vendored_package_starts_from_an_empty_index(tmp_path: Path) -> None:
    pkg = copy_package(tmp_path)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run(["bash", str(tmp_path / SCRIPT.name), PLATFORM, PYTHON], check=True, env=env, timeout=600)
    wheels = sorted(p.name for p in (pkg / "wheels").iterdir())
    assert wheels and all(w.endswith(".whl") for w in wheels)
    assert any(w.startswith("fastapi-") for w in wheels) and any(w.startswith("uvicorn-") for w in wheels)

    (tmp_path / "empty-index").mkdir()
    with SimpleIndex(tmp_path / "empty-index") as index:
        empty = {"UV_DEFAULT_INDEX": index.url, "UV_INDEX_URL": index.url, "UV_CACHE_DIR": str(tmp_path / "uv-cache")}
        run = dry_run(pkg, ROWS, "--json", "--python", PYTHON, env=empty)
    assert run.code == 0, run.stderr
    assert index.requests, "stage 1 must have been pointed at the (empty) index"
    report = run.json()
    assert report["summary"]["failures"] == 0 and report["summary"]["rollouts"] == 20
    rows = rows_by_line(report)
    assert [line for line, r in rows.items() if r["flag"]] == [5]  # the Moon row: nothing to compute


def test_unvendored_package_is_refused_before_anything_starts(tmp_path: Path) -> None:
    pkg = copy_package(tmp_path)
    run = dry_run(pkg, ROWS, "--json")
    assert run.code == 1
    err = run.json()["error"]
    assert err["code"] == "GR-PKG-INVALID"
    assert any("wheels" in (v.get("file") or "") + v["message"] for v in err["violations"])
    assert not (Path(os.environ["GYM_RUNTIME_HOME"]) / "runs").exists()
