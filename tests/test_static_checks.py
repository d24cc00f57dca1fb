"""The static checks run with the suite, so the README's test command (and CI, which runs it) holds
the tree to them: ``ruff check``, ``ruff format --check``, ``mypy`` and ``lint-imports``, each from
the project's venv with the configuration in ``pyproject.toml`` (CONTRIBUTING.md, "Checks"). A
finding fails the test with the tool's own output. In the code mypy checks, every ``# noqa`` and
``# type: ignore`` also says why beside it."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import tokenize
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent  # the venv the suite runs in: the dev group's tools are there
DEADLINE_S = 900  # a hung tool must not hang the suite; a cold mypy run takes about a minute
TYPED = ("gym_runtime", "sandbox")  # [tool.mypy] files
# a silencing comment and what follows its codes: ``# noqa: E402 - why``, ``# type: ignore[x]  # why``
SILENCED = re.compile(r"#\s*(?:noqa(?::\s*[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*)?|type:\s*ignore(?:\[[^\]]*\])?)(.*)")


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


def _unexplained(path: Path) -> list[str]:
    """``file:line: comment`` for each ``# noqa`` / ``# type: ignore`` comment in ``path`` with no
    reason after its codes."""
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        m = SILENCED.search(tok.string) if tok.type == tokenize.COMMENT else None
        if m is not None and not re.search(r"[A-Za-z]{2}", m.group(1)):
            out.append(f"{path.relative_to(ROOT)}:{tok.start[0]}: {tok.string}")
    return out


def test_every_noqa_and_type_ignore_of_the_typed_code_says_why() -> None:
    found = [hit for top in TYPED for path in sorted((ROOT / top).rglob("*.py")) for hit in _unexplained(path)]
    assert not found, "say why beside each (CONTRIBUTING.md, 'Checks'):\n" + "\n".join(found)


LONG = 400  # lines; a module past it says why in its docstring (CONTRIBUTING.md, "Checks")


def test_every_long_module_says_why_it_is_long() -> None:
    import ast

    unexplained = []
    for folder in ("gym_runtime", "sandbox", "servers"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            text = path.read_text()
            if text.count("\n") > LONG:
                doc = ast.get_docstring(ast.parse(text)) or ""
                if "The module is long because" not in doc:
                    unexplained.append(f"{path.relative_to(ROOT)}: {text.count(chr(10))} lines")
    assert unexplained == [], "split the module, or say 'The module is long because ...' in its docstring"
