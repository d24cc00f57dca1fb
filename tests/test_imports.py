"""Imports go down and never in a circle (docs/architecture.md §2, "Layers"): the import-linter
contracts of pyproject.toml (``[tool.importlinter]``) are kept, as ``lint-imports`` checks them."""

from __future__ import annotations

from pathlib import Path

from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[1]


def test_the_layers_acyclic_and_servers_contracts_are_kept(capsys) -> None:
    code = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "3 kept, 0 broken" in out
