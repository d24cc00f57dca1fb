"""Case C50: a wheel whose file name and METADATA disagree on its version.

The case (group G, described in words): a wheels-v1 package whose
``wheels/tinyparse-1.0.0-py3-none-any.whl`` holds ``tinyparse-0.9.0.dist-info`` with ``Version:
0.9.0`` (a hand-renamed build), required as ``tinyparse==1.0.0``. uv's resolver accepts the file
name, then ``uv pip install`` refuses the wheel ("Wheel version does not match filename"). The
runtime opens each wheel's dist-info: ``validate`` and the build's preflight name the file and
both versions before any install, and uv's own refusal, should it happen, has a code of its own
whose hint names no variable the runtime scrubs.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gym_runtime.cli.main import main
from gym_runtime.venvs.diagnose import diagnose
from gym_runtime.venvs.digest import HashCache
from gym_runtime.venvs.plan import plan_instance
from gym_runtime.venvs.stages import StepFailure
from gym_runtime.venvs.uvrun import make_env, run_uv
from tests.helpers.wheels import build_wheel
from tests.venvs.conftest import empty_index, make_settings, merged_config, synthetic_pkg, uv_cache  # noqa: F401

WHEEL = "tinyparse-1.0.0-py3-none-any.whl"


def c50_package(tmp_path: Path) -> Path:
    """The case's package: the 0.9.0 build of tinyparse, renamed to 1.0.0."""
    built = build_wheel(tmp_path / "built", "tinyparse", "0.9.0")
    renamed = tmp_path / "renamed" / WHEEL
    renamed.parent.mkdir()
    shutil.copy(built, renamed)
    return synthetic_pkg(
        tmp_path / "pkg", {"acme_parse": ("resources_servers", "tinyparse==1.0.0\n")}, wheels=[renamed]
    )


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def test_validate_names_the_file_and_both_versions(tmp_path: Path, capsys) -> None:
    """Case C50: validate opens the wheel's dist-info (it said valid before)."""
    pkg = c50_package(tmp_path)
    code, out, err = _run(capsys, "validate", str(pkg), "--json")
    assert code == 1, err
    (v,) = [v for v in json.loads(out)["error"]["violations"] if v["code"] == "GR-PKG-WHEEL-METADATA"]
    assert v["file"] == f"wheels/{WHEEL}"
    assert "the file name says tinyparse 1.0.0" in v["message"]
    assert "METADATA (tinyparse-0.9.0.dist-info) says tinyparse 0.9.0" in v["message"]
    assert v["hint"].startswith("rebuild or rename the wheel")
    code, out, err = _run(capsys, "validate", str(pkg), "--platform", "linux/amd64", "--python", "3.13")
    assert code == 1 and f"[GR-PKG-WHEEL-METADATA] wheels/{WHEEL}:" in err


def test_build_stops_before_any_install(tmp_path: Path, capsys, monkeypatch) -> None:
    """Case C50: the build's preflight refuses the wheel; no stage runs, no venv is made."""
    pkg = c50_package(tmp_path)
    home = tmp_path / "home"
    monkeypatch.setenv("GYM_RUNTIME_HOME", str(home))
    monkeypatch.setenv("UV_INDEX_URL", "http://127.0.0.1:1/simple")  # never asked: nothing gets that far
    code, out, err = _run(capsys, "build", str(pkg), "--json")
    assert code == 3, err
    assert err.startswith(f"error[GR-PKG-WHEEL-METADATA]: wheels/{WHEEL}: the file name says tinyparse 1.0.0")
    assert json.loads(out)["error"]["code"] == "GR-PKG-WHEEL-METADATA"
    assert not any((home / "venvs").glob("*/.gym-runtime-ready")) and not (home / "logs").exists()


@pytest.mark.slow
def test_uvs_own_refusal_has_its_own_code(tmp_path: Path, make_settings) -> None:
    """Case C50: should uv meet the wheel anyway, its "Wheel version does not match filename" is
    ``GR-BUILD-WHEEL-METADATA``, and the hint does not send the user to UV_SKIP_WHEEL_FILENAME_CHECK
    (the runtime scrubs what uv suggests)."""
    pkg = c50_package(tmp_path)
    settings = make_settings(pin_mode="none")
    merged = merged_config(pkg)
    uv_env = make_env(settings.environ, settings.uv_cache_dir)
    vp = plan_instance(merged.instances["acme_parse"], merged, settings, None, uv_env, HashCache(None))
    venv, log = tmp_path / "venv", tmp_path / "uv.log"
    assert (
        run_uv(
            ["venv", "--quiet", "--python", str(vp.python.path), str(venv)], env=uv_env.env, log=log, cwd=tmp_path
        ).returncode
        == 0
    )
    result = run_uv(
        [
            "pip",
            "install",
            "--python",
            str(venv / "bin" / "python"),
            "--no-index",
            "--offline",
            "--find-links",
            str(pkg / "wheels"),
            "tinyparse==1.0.0",
        ],
        env=uv_env.env,
        log=log,
        cwd=tmp_path,
    )
    assert result.returncode != 0 and "Wheel version does not match filename" in result.output
    err = diagnose(vp, StepFailure("stage2", result))
    assert err.code == "GR-BUILD-WHEEL-METADATA"
    assert "0.9.0 != 1.0.0" in err.message and "UV_SKIP_WHEEL_FILENAME_CHECK" not in (err.hint or "")
    assert "gym-runtime validate" in err.hint
