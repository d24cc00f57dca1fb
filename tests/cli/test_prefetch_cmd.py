"""``gym-runtime prefetch PKG``: a real start of the package until its imports are compiled and
saved, then a stop; afterwards a start on the same caches (venvs removed with ``--drop-venvs``, as
on a pod seeded by an image) replays the recorded resolution, places the stored bytecode and learns
nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gym_runtime.venvs import resolutions
from gym_runtime.venvs.bytecode import PRELOADED_PARENT
from gym_runtime.venvs.pyc_store import PycStore
from tests.helpers.daemon import SIMPLE_SERVERS, kill_tree, read_ready_line, simple_env, up_process
from tests.helpers.index import SimpleIndex
from tests.helpers.wheels import build_wheel


@pytest.fixture
def index(tmp_path: Path):
    """A loopback index with one tiny wheel, which records every request."""
    build_wheel(tmp_path / "index-files", "tinyparse", "0.3.0")
    with SimpleIndex(tmp_path / "index-files") as idx:
        yield idx


def _package(root: Path) -> Path:
    """:func:`simple_env` whose three servers need ``tinyparse`` from the index (one venv, stage 1)."""
    pkg = simple_env(root)
    for req in pkg.glob("*/*/requirements.txt"):
        req.write_text("tinyparse==0.3.0\n")
    return pkg


def _env(tmp: Path, index: SimpleIndex) -> dict[str, str]:
    return {
        "GYM_RUNTIME_HOME": str(tmp / "home"),
        "GYM_RUNTIME_UV_CACHE_DIR": str(tmp / "uv-cache"),
        "UV_INDEX_URL": index.url,
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def _prefetch(pkg: Path, tmp: Path, index: SimpleIndex, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "gym_runtime.cli.main",
            "prefetch",
            str(pkg),
            "--work-dir",
            str(tmp / "prefetch"),
            *args,
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **_env(tmp, index)},
        timeout=300,
    )


def test_prefetch_fills_the_caches_and_the_next_start_learns_nothing(tmp_path: Path, index: SimpleIndex) -> None:
    pkg, home = _package(tmp_path / "pkg"), tmp_path / "home"
    done = _prefetch(pkg, tmp_path, index, "--json", "--drop-venvs")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    report = json.loads(done.stdout)
    (venv,) = report["venvs"]
    assert set(venv["servers"]) == SIMPLE_SERVERS and venv["status"] == "built" and venv["dropped"]
    assert not Path(venv["path"]).exists(), "--drop-venvs removes the venv it built"
    digest = venv["digest"]
    saved = PycStore(home / "bytecode").users(digest) - {PRELOADED_PARENT}  # the venv's parent, under bubblewrap
    assert len(saved) == len(SIMPLE_SERVERS), "every server's imports saved"
    assert resolutions.recorded(home / "resolutions", digest), "the resolution of the plan is recorded"

    asked = len(index.requests)
    proc = up_process(pkg, tmp_path / "up", "--policy-base-url", "http://127.0.0.1:9/v1", env=_env(tmp_path, index))
    try:
        info = json.loads(read_ready_line(proc))
        for name in info["servers"]:
            env = json.loads((tmp_path / "up/run/servers" / name / "contract.json").read_text())["env"]
            assert "PYTHONPYCACHEPREFIX" not in env and env["PYTHONDONTWRITEBYTECODE"] == "1", name
        proc.terminate()
        assert proc.wait(30) == 0
        err = proc.stderr.read()
        assert "files placed from the store" in err, err
        assert len(index.requests) == asked, "the venv was rebuilt offline from the recorded resolution"
    finally:
        kill_tree(proc)


def test_prefetch_keeps_the_venvs_by_default_and_reports_them_as_text(tmp_path: Path, index: SimpleIndex) -> None:
    pkg, home = _package(tmp_path / "pkg"), tmp_path / "home"
    done = _prefetch(pkg, tmp_path, index)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("venv ") and ": built  " in lines[0] and "removed" not in lines[0]
    assert Path(lines[0].split("  ")[1]).is_dir()
    assert lines[-1].startswith(f"bytecode store: {home / 'bytecode'} (saved ")
    again = _prefetch(pkg, tmp_path, index)  # everything is there: nothing to learn, nothing to save
    assert again.returncode == 0, again.stderr
    assert ": reused  " in again.stdout.splitlines()[0]


def test_prefetch_wants_a_package_or_the_gym_release_not_both(tmp_path: Path, capsys) -> None:
    from gym_runtime.cli.main import main

    for argv in (["prefetch"], ["prefetch", str(tmp_path), "--gym-release"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "error[GR-USAGE]: give either PKG or --gym-release" in err and "Traceback" not in err


@pytest.mark.pypi
def test_the_gym_release_closure_is_the_venv_every_sdk_only_gym_tree_gets(tmp_path: Path, monkeypatch) -> None:
    """NeMo Gym 0.7.0's own trees (``example_single_tool_call``, ``simple_agent``, ``legacy_agent``)
    hold only ``-e nemo-gym[dev] @ ../../``: their plan is the one ``--gym-release`` builds."""
    from gym_runtime.config import build_config
    from gym_runtime.gym_release import choose_release
    from gym_runtime.package import load_package
    from gym_runtime.settings import load_settings
    from gym_runtime.venvs import plan_venvs
    from tests.helpers.daemon import write_fixture_package
    from tests.helpers.gym07 import gym07_python

    python = gym07_python()
    env = {**os.environ, "GYM_RUNTIME_HOME": str(tmp_path / "home"), "GYM_RUNTIME_PIN_NEMO_GYM": "0.7.0"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gym_runtime.cli.main",
            "prefetch",
            "--gym-release",
            "--python",
            python,
            "--drop-venvs",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["gym_release"]["version"] == "0.7.0"
    (venv,) = report["venvs"]
    assert venv["dropped"] and not Path(venv["path"]).exists()
    assert resolutions.recorded(tmp_path / "home" / "resolutions", venv["digest"])

    pkg = write_fixture_package(
        tmp_path / "pkg",
        {
            "acme_math": {"resources_servers": {"acme_math": {"domain": "math"}}},
            "acme_agent": {
                "responses_api_agents": {
                    "acme_agent": {"resources_server": {"type": "resources_servers", "name": "acme_math"}}
                }
            },
        },
    )
    for req in pkg.glob("*/*/requirements.txt"):
        req.write_text("-e nemo-gym[dev] @ ../../\n")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    settings = load_settings()
    package = load_package(pkg)
    merged = build_config(package, [], None, release=choose_release(package, settings))
    plan = plan_venvs(merged, settings, python=python)
    assert {vp.digest for vp in plan.venvs} == {venv["digest"]}, "one venv, the release closure's"
