"""The static checks run with the suite, so the README's test command (and CI, which runs it) holds
the tree to them: ``ruff check``, ``ruff format --check``, ``mypy`` and ``lint-imports``, each from
the project's venv with the configuration in ``pyproject.toml`` (CONTRIBUTING.md, "Checks"). A
finding fails the test with the tool's own output."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent  # the venv the suite runs in: the dev group's tools are there
DEADLINE_S = 900  # a hung tool must not hang the suite; a cold mypy run takes about a minute


def _run(argv: list[str]) -> None:
    """Run ``argv`` at the repository root; fail with its output when it exits non-zero."""
    exe = BIN / argv[0]
    if not exe.is_file():
        pytest.fail(f"{argv[0]} is not installed in {BIN}: run `./uvw sync` (it is in the dev group)", pytrace=False)
    p = subprocess.run([str(exe), *argv[1:]], cwd=ROOT, capture_output=True, text=True, timeout=DEADLINE_S, check=False)
    if p.returncode != 0:
        pytest.fail(
            f"`{' '.join(argv)}` exited with {p.returncode}:\n{p.stdout}{p.stderr}"
            f"\n(run it by hand from the repository root: CONTRIBUTING.md, 'Checks')",
            pytrace=False,
        )


def test_ruff_check_finds_nothing() -> None:
    _run(["ruff", "check", "--no-cache", "."])


def test_ruff_format_leaves_every_file_as_it_is() -> None:
    _run(["ruff", "format", "--check", "--no-cache", "."])


@pytest.mark.slow
def test_mypy_finds_no_type_errors() -> None:
    _run(["mypy"])  # files and options: [tool.mypy] of pyproject.toml


def _import_contracts() -> bool:
    """Whether import-linter has a configuration: ``[tool.importlinter]`` in pyproject.toml, or
    a ``.importlinter`` / ``setup.cfg`` section of its own."""
    if "importlinter" in tomllib.loads((ROOT / "pyproject.toml").read_text()).get("tool", {}):
        return True
    if (ROOT / ".importlinter").is_file():
        return True
    cfg = ROOT / "setup.cfg"
    return cfg.is_file() and "[importlinter]" in cfg.read_text()


def test_imports_keep_to_the_layer_contracts() -> None:
    if not _import_contracts():
        pytest.skip("no import-linter contract is configured yet ([tool.importlinter] in pyproject.toml)")
    _run(["lint-imports", "--no-cache"])
