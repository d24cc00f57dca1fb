"""The interpreter must fit the server (issue: ``--python 3.9`` built venvs in which every built-in
server crashed at start): built-in servers need the runtime's own minimum, a pyproject server its
``requires-python``; refused at plan time, before anything is installed, listing only fitting
interpreters. The host's interpreters are stand-ins that report a version (the planner only asks
them for it), so the listing does not depend on what this machine has installed."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest
from packaging.version import Version

from gym_runtime.cli.validate import PLACEHOLDERS
from gym_runtime.config import PolicyValues, build_config
from gym_runtime.errors import EXIT_RUNTIME, BuildError
from gym_runtime.package import load_package
from gym_runtime.venvs import plan_venvs
from gym_runtime.venvs.python_choice import BUILTIN_REQUIRES_PYTHON
from tests.venvs.conftest import merged_config, synthetic_pkg

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = "%d.%d.%d" % sys.version_info[:3]
FAKE = ("3.9.18", "3.10.13", "3.12.1")


@pytest.fixture
def host(tmp_path: Path) -> dict[str, str]:
    """Environment of a host whose pyenv root holds 3.9.18, 3.10.13 and 3.12.1 (plus the runtime's own)."""
    root = tmp_path / "fake-pyenv"
    for version in FAKE:
        bindir = root / "versions" / version / "bin"
        bindir.mkdir(parents=True)
        minor = version.rsplit(".", 1)[0]
        for name in (f"python{minor}", "python3"):
            exe = bindir / name
            exe.write_text(f"#!/bin/sh\necho CPython {version}\n")
            exe.chmod(0o755)
    (tmp_path / "empty-bin").mkdir()
    return {
        "PYENV_ROOT": str(root),
        "HOME": str(tmp_path / "fake-home"),
        "XDG_DATA_HOME": str(tmp_path / "xdg"),
        "PATH": str(tmp_path / "empty-bin"),
    }


def _would_work(message: str) -> list[str]:
    listing = message.split("found that would work (Python >=", 1)[1].split(": ", 1)[1]
    return [item.split(" (")[0] for item in listing.split(", ")]


def test_builtin_minimum_is_the_projects_requires_python() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert BUILTIN_REQUIRES_PYTHON == project["requires-python"]


@pytest.mark.parametrize("request_", ["3.9", "3.10"])
def test_builtin_servers_refuse_an_old_python(tmp_path, make_settings, host, request_) -> None:
    pkg = load_package(ROOT / "examples" / "native-quickstart")
    merged = build_config(pkg, [], PolicyValues(), defaults=PLACEHOLDERS)
    first = next(iter(merged.instances.values()))
    assert first.server_dir.origin == "builtin"
    settings = make_settings(env=host)
    with pytest.raises(BuildError) as ei:
        plan_venvs(merged, settings, python=request_)
    e = ei.value
    assert e.code == "GR-BUILD-PYTHON" and e.exit_code == EXIT_RUNTIME
    assert e.extra["stage"] == "python" and e.extra["server"] == first.name
    got = next(v for v in FAKE if v.startswith(request_ + "."))
    assert e.message.startswith(f"{first.name}: python {request_} (set in the job's --python): that is CPython {got}")
    assert f"the built-in server {first.server_type}/{first.implementation}" in e.message
    assert "needs Python >=3.11" in e.message
    assert sorted(_would_work(e.message)) == sorted([RUNTIME, "3.12.1"])  # 3.9 and 3.10 are not offered
    assert e.extra["found"] == [RUNTIME, "3.12.1"] and e.extra["requires_python"] == ">=3.11"
    assert not settings.venv_dir.exists()


def test_builtin_missing_old_version_lists_only_fitting_interpreters(make_settings, host) -> None:
    merged = build_config(
        load_package(ROOT / "examples" / "native-quickstart"), [], PolicyValues(), defaults=PLACEHOLDERS
    )
    with pytest.raises(BuildError) as ei:
        plan_venvs(merged, make_settings(env=host), python="3.8")
    assert "Python 3.8 is not available on this host" in ei.value.message
    assert sorted(_would_work(ei.value.message)) == sorted([RUNTIME, "3.12.1"])


def _pyproject_pkg(tmp_path: Path, requires_python: str) -> Path:
    pkg = synthetic_pkg(tmp_path / "pkg", {"acme": ("resources_servers", "")})
    srv = pkg / "resources_servers" / "acme"
    (srv / "requirements.txt").unlink()
    (srv / "pyproject.toml").write_text(
        f"[project]\nname = 'acme'\nversion = '0.1.0'\nrequires-python = '{requires_python}'\ndependencies = []\n"
    )
    return pkg


def test_pyproject_requires_python_is_honoured(tmp_path, make_settings, host) -> None:
    pkg = _pyproject_pkg(tmp_path, ">=3.12")
    settings = make_settings(env=host)
    key = "acme.resources_servers.acme.python_version"
    with pytest.raises(BuildError) as ei:
        plan_venvs(merged_config(pkg, [f"{key}=3.9"]), settings)
    e = ei.value
    assert e.code == "GR-BUILD-PYTHON" and e.extra["server"] == "acme" and e.extra["stage"] == "python"
    assert f"acme: python 3.9 (set in override ({key})): that is CPython 3.9.18" in e.message
    assert "resources_servers/acme/pyproject.toml ([project].requires-python) needs Python >=3.12" in e.message
    assert sorted(_would_work(e.message)) == sorted(v for v in (RUNTIME, "3.12.1") if Version(v) >= Version("3.12"))
    vp = plan_venvs(merged_config(pkg), settings, python="3.12").for_instance("acme")
    assert vp.python.version == "3.12.1"


def test_pyproject_with_a_malformed_requires_python(tmp_path, make_settings) -> None:
    pkg = _pyproject_pkg(tmp_path, "three point twelve")
    with pytest.raises(BuildError) as ei:
        plan_venvs(merged_config(pkg), make_settings())
    assert ei.value.code == "GR-BUILD-INSTALL-FILE" and "requires-python 'three point twelve'" in ei.value.message
