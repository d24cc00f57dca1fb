"""Stage 2 proves offline that ``wheels/`` holds the whole closure, whatever the index can give:
a missing transitive dependency fails the build naming the project, the chain that needs it and
the ``gym-runtime vendor`` fix, with the index reachable (bug: built silently) or not (bug: the
wrong file was named); ``validate --platform --python`` runs the same proof without building."""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import pytest

from gym_runtime.cli.main import main
from gym_runtime.errors import BuildError
from gym_runtime.venvs import build_venvs, plan_venvs
from tests.helpers.index import SimpleIndex
from tests.helpers.wheels import build_wheel
from tests.venvs.conftest import merged_config, synthetic_pkg

HOST = {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}[platform.machine()]
PY = f"{sys.version_info[0]}.{sys.version_info[1]}"


@pytest.fixture
def pkg(tmp_path: Path) -> Path:
    """A wheels-v1 package whose server needs uvicorn; wheels/ has uvicorn (-> h11, click) and click."""
    wheels = [
        build_wheel(tmp_path / "w", "uvicorn", "0.30.0", requires=["h11>=0.8", "click>=7"]),
        build_wheel(tmp_path / "w", "click", "8.1.0"),
    ]
    return synthetic_pkg(tmp_path / "pkg", {"acme_math": ("resources_servers", "uvicorn>=0.29\n")}, wheels=wheels)


@pytest.mark.parametrize("index", ["reachable", "unreachable"])
def test_missing_transitive_dependency_fails_the_build(pkg: Path, tmp_path: Path, make_settings, index: str) -> None:
    build_wheel(tmp_path / "files", "h11", "0.14.0")  # the index could fill the gap: it must not
    with SimpleIndex(tmp_path / "files") as idx:
        url = idx.url if index == "reachable" else "http://127.0.0.1:1/simple"
        settings = make_settings(url, pin_mode="none")
        with pytest.raises(BuildError) as ei:
            build_venvs(plan_venvs(merged_config(pkg), settings), settings)
        assert not [r for r in idx.requests if "h11" in r]  # decided on wheels/ alone
    e = ei.value
    assert e.code == "GR-BUILD-CLOSURE" and e.extra["stage"] == "stage2" and e.extra["server"] == "acme_math"
    assert e.extra["missing"] == "h11" and e.extra["chain"] == ["acme_math", "uvicorn", "h11"]
    assert f"wheels/ does not hold the whole closure for CPython {PY} {HOST}" in e.message
    assert "h11 is missing in wheels/ (needed by acme_math -> uvicorn -> h11)" in e.message
    assert e.hint.startswith(f"vendor the closure: `gym-runtime vendor {pkg} --platform {HOST} --python {PY}`")
    assert "h11 was not found in the provided package locations" in e.cause  # uv's own words
    assert not list((settings.logs_dir / "build").glob("*.stage1.log"))  # stage 1 never ran
    assert not list((settings.venv_dir / ".tmp").glob("*"))


def test_validate_runs_the_same_proof_for_the_target(pkg: Path, tmp_path: Path, capsys) -> None:
    code = main(["validate", str(pkg), "--platform", "linux/arm64", "--python", "3.13", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1
    (v,) = [e for e in out["error"]["violations"] if e["code"] == "GR-BUILD-CLOSURE"]
    assert v["file"] == "resources_servers/acme_math/requirements.txt"
    assert v["message"] == (
        "acme_math: wheels/ does not hold the whole closure for CPython 3.13 linux/arm64 (glibc "
        "2.36): h11 is missing in wheels/ (needed by acme_math -> uvicorn -> h11)"
    )
    assert f"gym-runtime vendor {pkg} --platform linux/arm64 --python 3.13" in v["hint"]
    build_wheel(pkg / "wheels", "h11", "0.14.0")
    assert main(["validate", str(pkg), "--platform", "linux/arm64", "--python", "3.13"]) == 0
    capsys.readouterr()
    # a wheel the target cannot install is a gap too (only a cp312 build of h11 for 3.13)
    (pkg / "wheels" / "h11-0.14.0-py3-none-any.whl").unlink()
    build_wheel(pkg / "wheels", "h11", "0.14.0", tags="cp312-cp312-manylinux_2_17_aarch64")
    assert main(["validate", str(pkg), "--platform", "linux/arm64", "--python", "3.13"]) == 1
    assert "GR-PKG-WHEEL-TAG" in capsys.readouterr().err


def test_vendor_completes_an_adapter_packages_environment_wheels(tmp_path: Path, make_settings) -> None:
    """In adapter-wheels-v1 the wheels already in wheels/ are the environment (named by vf_env_id, not by
    any install file): vendor keeps them as requirements; in wheels-v1 they are only candidates."""
    from gym_runtime.venvs.vendor import requirement_lines
    from tests.helpers.packages import make_package

    policy = ["policy_base_url=http://127.0.0.1:1/v1", "policy_model_name=m", "policy_api_key=${oc.env:HOME}"]
    adapter = make_package(tmp_path / "adapter", "adapter-wheels-v1")  # 0.7-shaped: it declares environment servers
    reqs, _ = requirement_lines(merged_config(adapter, policy, "0.7.0"), make_settings())
    assert {"acme-math-lib==0.1.0", "pip==24.0"} <= set(reqs)
    wheels = make_package(tmp_path / "wheels", "wheels-v1")
    reqs, _ = requirement_lines(merged_config(wheels, policy, "0.7.0"), make_settings())
    assert "acme-math-lib==0.1.0" not in reqs
