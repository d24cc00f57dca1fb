"""Every command chooses the Gym release once (``choose_release``) and says which; a vendored
``nemo_gym`` wheel and an explicit pin that disagree stop ``validate``, ``build`` and ``up`` with
``GR-SDK-SKEW`` naming the wheel and both versions (docs/runtime.md, "Gym releases")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gym_runtime.cli.main import main
from gym_runtime.placement.replica import ReplicaJob, job_settings, node_settings
from gym_runtime.settings import load_settings
from tests.helpers.wheels import build_wheel
from tests.venvs.conftest import synthetic_pkg

WHEEL = "wheels/nemo_gym-0.4.0-py3-none-any.whl"


def vendoring_package(tmp_path: Path) -> Path:
    """A wheels-v1 package vendoring (a stand-in of) nemo_gym 0.4.0."""
    sdk = build_wheel(
        tmp_path / "sdk",
        "nemo-gym",
        "0.4.0",
        files={"nemo_gym/__init__.py": ""},
        requires=["openai<=2.7.2", "ray[default]>=2.55.1"],
    )
    return synthetic_pkg(
        tmp_path / "pkg",
        {"acme": ("resources_servers", "# nothing\n")},
        wheels=[sdk, build_wheel(tmp_path / "sdk", "pip", "24.0")],
    )


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def test_the_vendored_sdk_decides_and_every_command_says_so(tmp_path: Path, capsys) -> None:
    pkg = vendoring_package(tmp_path)
    code, out, err = _run(capsys, "validate", str(pkg))
    assert code == 0 and json.loads(out)["gym_release"]["source"] == WHEEL
    assert err == f"gym release: NeMo Gym 0.4.0 (line 0.4, Requires-Python >=3.12; from {WHEEL})\n"
    code, out, _ = _run(capsys, "config", str(pkg), "--json")
    assert code == 0 and json.loads(out)["gym_release"] == {
        "version": "0.4.0",
        "line": "0.4",
        "source": WHEEL,
        "requires_python": ">=3.12",
        "openai": "<=2.7.2",
        "ray": ">=2.55.1",
    }
    code, out, _ = _run(capsys, "config", str(pkg))
    assert f"# gym release: NeMo Gym 0.4.0 (line 0.4, Requires-Python >=3.12; from {WHEEL})\n" in out
    code, out, _ = _run(capsys, "doctor", "--json", "--package", str(pkg))
    assert json.loads(out)["gym_release"]["why"] == f"the package vendors the SDK as {WHEEL}: it runs that release"


def test_skew_stops_validate_build_and_up(tmp_path: Path, capsys, monkeypatch) -> None:
    pkg = vendoring_package(tmp_path)
    monkeypatch.setenv("GYM_RUNTIME_PIN_NEMO_GYM", "0.7.0")
    monkeypatch.setenv("GYM_RUNTIME_HOME", str(tmp_path / "home"))
    code, out, _ = _run(capsys, "validate", str(pkg), "--json")
    (v,) = json.loads(out)["error"]["violations"]
    assert code == 1 and (v["code"], v["file"]) == ("GR-SDK-SKEW", WHEEL)
    assert "vendors nemo-gym 0.4.0; the pin is 0.7.0 (set by GYM_RUNTIME_PIN_NEMO_GYM)" in v["message"]
    want = (
        f"error[GR-SDK-SKEW]: the package vendors nemo-gym 0.4.0 ({WHEEL}) but the image pins nemo-gym 0.7.0 "
        "(set by GYM_RUNTIME_PIN_NEMO_GYM)"
    )
    code, _, err = _run(capsys, "build", str(pkg))
    assert code == 1 and err.startswith(want)
    up = subprocess.run(
        [sys.executable, "-m", "gym_runtime.cli.main", "up", str(pkg), "--work-dir", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert up.returncode == 1 and want in up.stderr and up.stdout == ""
    assert not (tmp_path / "home" / "venvs").exists()


def test_a_node_gets_the_daemons_release_and_pins(tmp_path: Path, monkeypatch) -> None:
    """Placement ``ray``: the job a replica's node receives carries the release profile and where
    each pin came from, so the node installs what the daemon chose (a default pin stays a default)."""
    from gym_runtime.gym_release import release_for

    daemon = load_settings(
        {"HOME": str(tmp_path), "GYM_RUNTIME_PIN_NEMO_GYM": "0.4.0", "GYM_RUNTIME_RAY_UNDECLARED": "always"}
    )
    release = release_for("0.4.0", "set by GYM_RUNTIME_PIN_NEMO_GYM")
    job = ReplicaJob(
        "acme",
        0,
        "acme",
        "run",
        str(tmp_path),
        "digest",
        {},
        None,
        {},
        {},
        None,
        None,
        settings=job_settings(daemon),
        release=release,
    )
    monkeypatch.delenv("GYM_RUNTIME_PIN_NEMO_GYM", raising=False)  # the node's own environment sets no pin
    node = node_settings(job)
    assert node.pins == daemon.pins and node.pin_explicit("nemo-gym") and not node.pin_explicit("openai")
    assert node.ray_undeclared == "always"  # the node decides Ray for undeclared classes as the daemon does
    assert job.release.pins(node) == release.pins(daemon)
