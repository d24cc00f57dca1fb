"""The Python of a server that uses the Gym SDK follows the release's ``Requires-Python``
(``gym_runtime/venvs/python_choice.py``): chosen on the host when nobody asked, refused before any
install when the one asked for is below it; and servers that use Ray get one Python, since they
share one Ray head (``GR-RAY-PYTHON``). The host's interpreters are stand-ins that report a
version (the planner only asks them for it), so nothing depends on what this machine has."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gym_runtime.cli.main import main
from gym_runtime.errors import EXIT_RUNTIME, BuildError
from gym_runtime.gym_release import choose_release
from gym_runtime.venvs import plan_venvs
from tests.venvs.conftest import merged_config, synthetic_pkg

RUNTIME = "%d.%d.%d" % sys.version_info[:3]
FAKE = ("3.12.1", "3.13.0", "3.13.15", "3.13.18", "3.14.1")
SDK = "-e nemo-gym[dev] @ ../../\n"
NO_RAY = "class Acme:\n    ray_enabled = False\n\n\nAcme.run_webserver()\n"


@pytest.fixture
def host(tmp_path: Path) -> dict[str, str]:
    """A host whose pyenv root holds :data:`FAKE` (plus the runtime's own interpreter)."""
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
    (tmp_path / "fake-home").mkdir()  # a usable, empty HOME: no interpreters of the caller's
    return {
        "PYENV_ROOT": str(root),
        "HOME": str(tmp_path / "fake-home"),
        "XDG_DATA_HOME": str(tmp_path / "xdg"),
        "PATH": str(tmp_path / "empty-bin"),
    }


def _plan(pkg: Path, make_settings, host: dict[str, str], pin: str | None = None, python: str | None = None):
    settings = make_settings(
        env=host, pins={"nemo-gym": pin, "ray[default]": "2.60.0", "openai": "2.7.2"} if pin else None
    )
    merged = merged_config(pkg)
    merged = type(merged)(**{**merged.__dict__, "release": choose_release(merged.package, settings)})
    return plan_venvs(merged, settings, python=python), settings


@pytest.mark.skipif(sys.version_info[:2] >= (3, 13), reason="the runtime's own Python already meets >=3.13.14")
def test_nobody_asked_gets_the_oldest_fitting_minor_at_its_newest_patch(tmp_path: Path, make_settings, host) -> None:
    """nemo-gym 0.7.0 needs >=3.13.14: 3.13.18 (not 3.13.15, not 3.14.1, not the runtime's own);
    a server without the SDK keeps the runtime's own Python."""
    pkg = synthetic_pkg(
        tmp_path / "pkg", {"acme_sdk": ("resources_servers", SDK), "acme_plain": ("resources_servers", "# nothing\n")}
    )
    plan, _ = _plan(pkg, make_settings, host, pin="0.7.0")
    sdk, plain = plan.for_instance("acme_sdk"), plan.for_instance("acme_plain")
    assert sdk.python.version == "3.13.18"
    assert (
        sdk.python_origin == "chosen for Python >=3.13.14 (nobody asked; the runtime's own "
        f"{sys.version_info[0]}.{sys.version_info[1]} does not meet it)"
    )
    assert plain.python.version == RUNTIME and plain.python_origin == "the runtime's own Python version"


@pytest.mark.skipif(sys.version_info[:2] >= (3, 12), reason="the runtime's own Python already meets >=3.12")
def test_the_04_pin_needs_312(tmp_path: Path, make_settings, host) -> None:
    pkg = synthetic_pkg(tmp_path / "pkg", {"acme_sdk": ("resources_servers", SDK)})
    plan, _ = _plan(pkg, make_settings, host, pin="0.4.0")
    assert plan.for_instance("acme_sdk").python.version == "3.12.1"


def test_one_python_for_every_server_that_needs_one(tmp_path: Path, make_settings, host) -> None:
    """A pyproject server asking for >=3.14 moves the other SDK servers to 3.14 too: one Ray head."""
    pkg = synthetic_pkg(tmp_path / "pkg", {"acme_a": ("resources_servers", SDK), "acme_b": ("resources_servers", SDK)})
    tree = pkg / "resources_servers" / "acme_b"
    (tree / "requirements.txt").unlink()
    (tree / "pyproject.toml").write_text(
        "[project]\nname = 'acme-b'\nversion = '0'\nrequires-python = '>=3.14'\ndependencies = ['nemo-gym[dev]']\n"
    )
    plan, _ = _plan(pkg, make_settings, host, pin="0.7.0")
    assert {plan.for_instance(n).python.version for n in ("acme_a", "acme_b")} == {"3.14.1"}


def test_an_asked_python_below_requires_python_is_refused_before_any_install(
    tmp_path: Path, make_settings, host
) -> None:
    pkg = synthetic_pkg(tmp_path / "pkg", {"acme_sdk": ("resources_servers", SDK)})
    with pytest.raises(BuildError) as ei:
        _plan(pkg, make_settings, host, pin="0.7.0", python="3.12")
    e = ei.value
    assert e.code == "GR-BUILD-PYTHON" and e.exit_code == EXIT_RUNTIME and e.extra["server"] == "acme_sdk"
    assert e.message.startswith(
        "acme_sdk: python 3.12 (set in the job's --python): that is CPython 3.12.1, but "
        "nemo-gym 0.7.0 (the Gym SDK release this environment runs; "
        "resources_servers/acme_sdk/requirements.txt installs it) needs Python >=3.13.14"
    )
    assert e.extra["found"] == ["3.13.15", "3.13.18", "3.14.1"] and e.extra["requires_python"] == ">=3.13.14"
    assert e.hint.endswith("or run a Gym release whose Requires-Python it meets (GYM_RUNTIME_PIN_NEMO_GYM=0.4.0)")


def test_validate_and_build_report_it(tmp_path: Path, capsys, monkeypatch, host) -> None:
    for k, v in host.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("GYM_RUNTIME_HOME", str(tmp_path / "home"))
    pkg = synthetic_pkg(tmp_path / "pkg", {"acme_sdk": ("resources_servers", SDK)})
    assert main(["validate", str(pkg), "--json", "--python", "3.13.0"]) == 1
    (v,) = json.loads(capsys.readouterr().out)["error"]["violations"]
    assert v["code"] == "GR-BUILD-PYTHON" and v["file"] == "resources_servers/acme_sdk/requirements.txt"
    assert "that is CPython 3.13.0, but nemo-gym 0.7.0" in v["message"]
    assert main(["validate", str(pkg), "--platform", "linux/amd64", "--python", "3.12"]) == 1
    assert "acme_sdk: the target Python 3.12 does not meet nemo-gym 0.7.0" in capsys.readouterr().err
    assert main(["build", str(pkg), "--python", "3.13.0"]) == 3
    assert capsys.readouterr().err.startswith("error[GR-BUILD-PYTHON]: acme_sdk: python 3.13.0")
    assert not (tmp_path / "home" / "venvs").exists()


def test_ray_servers_on_two_pythons(tmp_path: Path, make_settings, host, capsys, monkeypatch) -> None:
    """Two SDK servers of 0.7.0 that use Ray, on 3.13.15 and 3.13.18: refused (both named); a server
    that declares ``ray_enabled = False`` may run another Python."""
    pkg = synthetic_pkg(
        tmp_path / "pkg",
        {
            "acme_a": ("resources_servers", SDK),
            "acme_b": ("resources_servers", SDK),
            "acme_c": ("resources_servers", SDK),
        },
    )
    (pkg / "resources_servers" / "acme_c" / "app.py").write_text(NO_RAY)
    for name in ("acme_a", "acme_b"):  # undeclared classes whose trees import Ray (read, never run)
        (pkg / "resources_servers" / name / "app.py").write_text("import ray\n")
    cfg = pkg / "resources_servers" / "acme_a" / "configs" / "env.yaml"
    text = cfg.read_text()
    for name, version in (("acme_a", "3.13.15"), ("acme_b", "3.13.18"), ("acme_c", "3.14.1")):
        text = text.replace(
            f"  resources_servers:\n    {name}:\n",
            f"  resources_servers:\n    {name}:\n      python_version: '{version}'\n",
        )
    cfg.write_text(text)
    with pytest.raises(BuildError) as ei:
        _plan(pkg, make_settings, host, pin="0.7.0")
    e = ei.value
    assert e.code == "GR-RAY-PYTHON" and e.exit_code == EXIT_RUNTIME
    assert "acme_a: Python 3.13.15" in e.message and "acme_b: Python 3.13.18" in e.message
    assert "acme_c" not in e.message and "the same python_version on each (e.g. 3.13.18)" in e.hint
    for k, val in host.items():
        monkeypatch.setenv(k, val)
    assert main(["validate", str(pkg)]) == 1
    assert "[GR-RAY-PYTHON] servers that use Ray would run different Pythons" in capsys.readouterr().err
