"""A failed build prints its real duration (bug: every failure said ``(0.0s)``), in text and in
the ``--json`` error. The loopback index holds its one file back 1.5 s, then the build fails."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.helpers.index import SimpleIndex
from tests.helpers.wheels import build_wheel
from tests.venvs.conftest import synthetic_pkg


def test_failed_build_reports_its_real_duration(tmp_path: Path, uv_cache: Path) -> None:
    build_wheel(tmp_path / "files", "slowbad", "1.0", requires=["missingdep"])
    pkg = synthetic_pkg(tmp_path / "pkg", {"acme": ("resources_servers", "slowbad\n")})
    with SimpleIndex(tmp_path / "files", delay_s=1.5) as idx:
        env = {k: v for k, v in os.environ.items() if not k.startswith("UV_")}
        env.update(
            {
                "GYM_RUNTIME_HOME": str(tmp_path / "home"),
                "GYM_RUNTIME_UV_CACHE_DIR": str(tmp_path / "uvc"),
                "UV_INDEX_URL": idx.url,
                "GYM_RUNTIME_PIN_MODE": "none",
            }
        )
        done = subprocess.run(
            [sys.executable, "-m", "gym_runtime.cli.main", "build", str(pkg)],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        as_json = subprocess.run(
            [sys.executable, "-m", "gym_runtime.cli.main", "build", str(pkg), "--json"],
            capture_output=True,
            text=True,
            env={**env, "GYM_RUNTIME_UV_CACHE_DIR": str(tmp_path / "uvc2")},
            timeout=300,
        )
    assert done.returncode == 3, done.stderr
    m = re.search(r"\[build\] acme: FAILED \[GR-BUILD-[A-Z-]+\] \((\d+\.\d)s\)", done.stderr)
    assert m, done.stderr
    assert float(m.group(1)) >= 1.5
    assert json.loads(as_json.stdout)["error"]["seconds"] >= 1.5
