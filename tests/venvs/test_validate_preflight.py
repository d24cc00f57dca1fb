"""``gym-runtime validate`` reports what the venv builder's preflight knows statically about each
server's install file (cases C10 variant b, C11; unparseable files and lines), with the same
violations ``build`` would stop on, and stays quiet where the build would not (native-v1)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gym_runtime.cli.main import main
from gym_runtime.errors import BuildError
from gym_runtime.venvs import plan_venvs
from tests.helpers.cases import CASES
from tests.helpers.wheels import build_wheel, materialise_listing
from tests.venvs.conftest import case_pkg, merged_config, synthetic_pkg


def _validate(capsys, pkg: Path) -> tuple[int, list[dict]]:
    code = main(["validate", str(pkg), "--json"])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    if code == 0:
        return code, []
    doc = json.loads(out[: out.rindex("}") + 1])
    return code, doc["error"]["violations"]


def _same_as_build(errors: list[dict], pkg: Path, make_settings) -> None:
    with pytest.raises(BuildError) as ei:
        plan_venvs(merged_config(pkg), make_settings())
    e = ei.value
    as_build = {(v.code, v.file, v.key, v.hint) for v in e.violations} or {
        (e.code, e.extra["file"], e.extra["key"], e.hint)
    }
    assert {(e["code"], e["file"], e.get("key"), e["hint"]) for e in errors} == as_build


def test_c11_url_and_git_lines_are_invalid(tmp_path, capsys, make_settings) -> None:
    wheels = materialise_listing(CASES / "C11" / "wheels_listing.txt", tmp_path / "w")
    pkg = case_pkg("C11", tmp_path / "pkg", wheels=wheels)
    code, errors = _validate(capsys, pkg)
    assert code == 1 and [e["code"] for e in errors] == ["GR-BUILD-NEEDS-NETWORK"] * 2
    first, second = errors
    assert first["file"] == second["file"] == "resources_servers/acme_web/requirements.txt"
    assert first["key"] == "line 1" and "git+https://git.example.invalid" in first["message"]
    assert first["hint"] == "wheels/ has httpx_lite-0.2.0-py3-none-any.whl: use `httpx-lite==0.2.0`"
    assert second["key"] == "line 2" and "use `judge-sdk==1.0.0`" in second["hint"]
    _same_as_build(errors, pkg, make_settings)


def test_c10_variant_b_local_project_without_backend_is_invalid(tmp_path, capsys, make_settings) -> None:
    pkg = case_pkg("C10", tmp_path / "pkg", wheels=[build_wheel(tmp_path / "w", "tinyparse", "0.3.0")])
    srv = pkg / "resources_servers" / "acme_parse"
    shutil.copytree(CASES / "C10" / "variant_b" / "shared_utils", srv / "shared_utils")
    shutil.copy(CASES / "C10" / "variant_b" / "requirements.txt", srv / "requirements.txt")
    code, errors = _validate(capsys, pkg)
    assert code == 1 and [e["code"] for e in errors] == ["GR-BUILD-SDIST-BACKEND"]
    (e,) = errors
    assert e["file"] == "resources_servers/acme_parse/requirements.txt" and e["key"] == "line 2"
    assert "`-e ./shared_utils`" in e["message"] and "needs setuptools, which is not in wheels/" in e["message"]
    assert "add the build backend's wheel (setuptools)" in e["hint"]
    _same_as_build(errors, pkg, make_settings)


def test_network_lines_are_fine_when_the_package_installs_online(tmp_path, capsys) -> None:
    text = (CASES / "C11" / "resources_servers" / "acme_web" / "requirements.txt").read_text()
    pkg = synthetic_pkg(tmp_path / "pkg", {"acme_web": ("resources_servers", text)})  # native-v1: stage 1 only
    assert _validate(capsys, pkg) == (0, [])


def test_unparseable_line_and_file(tmp_path, capsys, make_settings) -> None:
    pkg = synthetic_pkg(
        tmp_path / "pkg",
        {
            "acme": ("resources_servers", "# tools\nsympy==1.13\nacme-lib >>= 1.0\n"),
            "judge": ("resources_servers", "# nothing\n"),
        },
    )
    code, errors = _validate(capsys, pkg)
    assert code == 1 and [e["code"] for e in errors] == ["GR-BUILD-REQUIREMENT"]
    assert errors[0]["file"] == "resources_servers/acme/requirements.txt" and errors[0]["key"] == "line 3"
    assert "`acme-lib >>= 1.0` is not a valid requirement" in errors[0]["message"]
    _same_as_build(errors, pkg, make_settings)
    judge = pkg / "resources_servers" / "judge"
    (judge / "requirements.txt").unlink()
    (judge / "pyproject.toml").write_text("[project\nname = 'judge'\n")
    code, errors = _validate(capsys, pkg)
    assert code == 1 and [e["code"] for e in errors] == ["GR-BUILD-REQUIREMENT", "GR-BUILD-INSTALL-FILE"]
    assert errors[1]["file"] == "resources_servers/judge/pyproject.toml" and "is not valid TOML" in errors[1]["message"]
