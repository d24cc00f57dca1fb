"""examples/verifiers-tiny-math (adapter-wheels-v1): a verifiers environment run by the built-in
verifiers_agent; its two tiny wheels are built from examples/src and committed, and `gym-runtime
vendor` completes them into the agent's whole closure (the README's first step).

Vendoring needs the package index, hence ``pypi``; the vendored wheels are installed offline
(stage 2), after stage 2's proof that they are the whole closure.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.examples.conftest import EXAMPLES, ROOT, dry_run, rows_by_line

PKG = EXAMPLES / "verifiers-tiny-math"
ROWS = EXAMPLES / "verifiers-tiny-math.jsonl"
SOURCES = {"verifiers": EXAMPLES / "src" / "verifiers-lite", "tiny_math": EXAMPLES / "src" / "tiny-math"}


HOST = {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}.get(platform.machine(), "linux/amd64")
PY = f"{sys.version_info[0]}.{sys.version_info[1]}"


def _cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gym_runtime.cli.main", *argv], capture_output=True, text=True, cwd=ROOT, timeout=600
    )


def test_committed_wheels_are_completed_by_vendor_first() -> None:
    """The two committed wheels are not the whole closure: validate's offline proof says so and how."""
    done = _cli("validate", str(PKG), "--platform", "linux/amd64", "--python", "3.13")
    assert done.returncode == 1 and "[GR-BUILD-CLOSURE]" in done.stderr
    assert "is missing in wheels/ (needed by verifiers_agent -> " in done.stderr
    assert f"gym-runtime vendor {PKG} --platform linux/amd64 --python 3.13" in done.stderr


@pytest.mark.pypi
def test_dry_run_through_verifiers_agent(tmp_path: Path) -> None:
    pkg = tmp_path / PKG.name
    shutil.copytree(PKG, pkg)
    vendored = _cli("vendor", str(pkg), "--platform", HOST, "--python", PY)  # the README's first step
    assert vendored.returncode == 0, vendored.stderr
    assert (pkg / "wheels" / "tiny_math-0.1.0-py3-none-any.whl").is_file()  # the environment is kept
    assert any(p.name.startswith("fastapi-") for p in (pkg / "wheels").iterdir())
    run = dry_run(pkg, ROWS, "--json")
    assert run.code == 0, run.stderr
    report = run.json()
    rows = rows_by_line(report)
    assert {r["agent"] for r in rows.values()} == {"verifiers_agent"}
    assert [line for line, r in rows.items() if r["flag"]] == [6]  # the spider row: nothing to compute
    assert all(r["signal"] for line, r in rows.items() if line != 6)
    assert report["summary"]["failures"] == 0 and report["summary"]["rollouts"] == 24


def test_vf_env_id_of_rows_is_checked_before_start(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text(ROWS.read_text().replace('"vf_env_id": "tiny-math"', '"vf_env_id": "ascii-tree"', 1))
    run = dry_run(PKG, rows, "--json")
    assert run.code == 1
    [v] = run.json()["error"]["violations"]
    assert (v["file"], v["key"], v["code"]) == (f"{rows}:1", "vf_env_id", "GR-DATASET-VF-ENV-ID")
    assert "'ascii-tree' != expected 'tiny-math'" in v["message"]


def test_committed_wheels_hold_exactly_the_sources() -> None:
    wheels = sorted(p.name for p in (PKG / "wheels").iterdir())
    assert wheels == ["tiny_math-0.1.0-py3-none-any.whl", "verifiers-0.1.14+lite-py3-none-any.whl"]
    for wheel in (PKG / "wheels").iterdir():
        with zipfile.ZipFile(wheel) as z:
            modules = {n: z.read(n) for n in z.namelist() if n.endswith(".py")}
        top = next(iter(modules)).split("/")[0]
        source = SOURCES[top]
        expected = {p.relative_to(source).as_posix(): p.read_bytes() for p in (source / top).rglob("*.py")}
        assert modules == expected, f"{wheel.name} is stale: run python3 examples/build_tiny_wheels.py"


@pytest.mark.pypi
def test_build_script_reproduces_the_committed_wheels(tmp_path: Path) -> None:
    copy = tmp_path / "examples"
    shutil.copytree(EXAMPLES, copy, ignore=shutil.ignore_patterns("*.whl", "__pycache__"))
    subprocess.run([sys.executable, str(copy / "build_tiny_wheels.py")], check=True, cwd=ROOT, timeout=300)
    for wheel in (PKG / "wheels").iterdir():
        assert (copy / PKG.name / "wheels" / wheel.name).read_bytes() == wheel.read_bytes(), wheel.name
