"""Fault: a corrupted entry in the uv cache.

uv installs a wheel from its unpacked copy in the cache (``archive-v0/<id>/``) without checking it,
so a file deleted or cut there would silently reach the next venv built from it. Expected: the
build notices (the distribution's RECORD lists a file that is missing or has another size),
installs that distribution again without the cache, succeeds, and warns naming the cache and
``uv cache clean NAME``; the venv is complete."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.daemon import simple_env
from tests.helpers.index import write_simple_index
from tests.helpers.wheels import build_wheel


def _build(pkg: Path, tmp: Path, index: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_")}
    env.update(
        {
            "GYM_RUNTIME_HOME": str(tmp / "home"),
            "GYM_RUNTIME_UV_CACHE_DIR": str(tmp / "uv-cache"),
            "GYM_RUNTIME_PIN_MODE": "none",
            "UV_INDEX_URL": index,
        }
    )
    done = subprocess.run(
        [sys.executable, "-m", "gym_runtime.cli.main", "build", "--json", str(pkg)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["servers"]["acme_math"]


@pytest.mark.parametrize("damage", ["deleted", "truncated"])
def test_a_damaged_uv_cache_entry_is_installed_again_without_the_cache(tmp_path: Path, damage: str) -> None:
    build_wheel(tmp_path / "files", "tinypkg", "1.0", files={"tinypkg/data.py": "VALUE = 42\n" * 50})
    index = write_simple_index(tmp_path / "files", tmp_path / "index")
    pkg = simple_env(tmp_path / "pkg")
    req = pkg / "resources_servers/acme_math/requirements.txt"
    req.write_text("tinypkg\n")
    first = _build(pkg, tmp_path, index)
    assert first["warnings"] == []
    [cached] = (tmp_path / "uv-cache").glob("archive-v*/*/tinypkg/data.py")
    if damage == "deleted":
        cached.unlink()
    else:
        cached.write_text("VALUE = 4")
    req.write_text("tinypkg>=1\n")  # another venv, built from the same cache entry
    second = _build(pkg, tmp_path, index)
    assert not second["reused"] and second["path"] != first["path"]
    [warning] = second["warnings"]
    assert "the uv cache's copy of tinypkg was damaged" in warning
    assert ("tinypkg/data.py is missing" if damage == "deleted" else "tinypkg/data.py has 9 bytes") in warning
    assert "`uv cache clean tinypkg`" in warning and str(tmp_path / "uv-cache") in warning
    python = Path(second["python"])
    out = subprocess.run(
        [str(python), "-c", "import tinypkg.data as d; print(d.VALUE)"], capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == "42", out.stderr
