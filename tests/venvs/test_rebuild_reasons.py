"""A rebuilt venv says why: the input that changed since its server's last build, in text and
``--json`` (case C14's kind: a wheel rebuilt under the same version; a requirements line; the
Python). Real uv, a ``file://`` index, tiny wheels."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gym_runtime.venvs import build_venvs, plan_venvs
from tests.helpers.index import write_simple_index
from tests.helpers.wheels import build_wheel, sha256_file
from tests.venvs.conftest import merged_config, synthetic_pkg

WHEEL = "acme_env-1.0.0-py3-none-any.whl"
REQS = "resources_servers/acme/requirements.txt"


def test_rebuilt_wheel_same_version_and_changed_line_are_named(tmp_path: Path, make_settings) -> None:
    w = build_wheel(tmp_path / "w", "acme-env", "1.0.0")
    pkg = synthetic_pkg(tmp_path / "pkg", {"acme": ("resources_servers", "acme-env\n")}, wheels=[w])
    settings = make_settings()
    first = build_venvs(plan_venvs(merged_config(pkg), settings), settings).for_instance("acme")
    assert (first.status, first.reasons) == ("built", ())
    old = sha256_file(pkg / "wheels" / WHEEL)
    build_wheel(pkg / "wheels", "acme-env", "1.0.0", salt="rebuilt")  # same name and version, new bytes
    new = sha256_file(pkg / "wheels" / WHEEL)
    second = build_venvs(plan_venvs(merged_config(pkg), settings), settings).for_instance("acme")
    assert second.reasons == (
        f"wheels/{WHEEL} changed: sha256 {old[:12]}... -> {new[:12]}... (same file name, new contents)",
    )
    assert second.status.startswith("rebuilt (wheels/")
    again = build_venvs(plan_venvs(merged_config(pkg), settings), settings).for_instance("acme")
    assert again.reused and again.reasons == ()
    (pkg / REQS).write_text("acme-env==1.0.0\n")
    third = build_venvs(plan_venvs(merged_config(pkg), settings), settings).for_instance("acme")
    assert third.reasons == (f"{REQS}: `acme-env` -> `acme-env==1.0.0`",)


def test_build_command_prints_the_reasons_in_text_and_json(tmp_path: Path, uv_cache: Path) -> None:
    files = tmp_path / "files"
    build_wheel(files, "tinyparse", "0.3.0")
    pkg = synthetic_pkg(tmp_path / "pkg", {"acme": ("resources_servers", "# nothing\n")})
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_")}
    env.update(
        {
            "GYM_RUNTIME_HOME": str(tmp_path / "home"),
            "GYM_RUNTIME_UV_CACHE_DIR": str(uv_cache),
            "UV_INDEX_URL": write_simple_index(files, tmp_path / "idx"),
            "GYM_RUNTIME_PIN_MODE": "none",
        }
    )

    def build(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "gym_runtime.cli.main", "build", str(pkg), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )

    assert build("--python", "3.11").returncode == 0
    (pkg / REQS).write_text("# now one requirement\ntinyparse==0.3.0\n")
    text = build("--python", "3.11")
    assert text.returncode == 0, text.stderr
    assert "acme: rebuilt in " in text.stdout and f"  changed: {REQS}: added `tinyparse==0.3.0`" in text.stdout
    done = build("--python", "3.12", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["gym_release"]["version"] == "0.7.0"  # which Gym release, as every command says
    assert "gym release: NeMo Gym 0.7.0 (line 0.7" in text.stderr
    (why,) = json.loads(done.stdout)["servers"]["acme"]["reasons"]
    assert why.startswith("Python 3.11.") and " -> 3.12." in why
