"""Every string constant in the servers' and the daemon's sources is text UTF-8 can encode.

A ``"\\ud83d"`` escape written in a plain (non-raw) docstring is a lone surrogate: Python 3.13
failed to start the model server with ``UnicodeEncodeError: ... surrogates not allowed`` while
3.12 ran it, so the bundled example broke only on the Python NeMo Gym 0.5+ needs. Tests may hold
such literals on purpose (they feed them to the servers); the code that runs in a server may not.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted(p for top in ("servers", "gym_runtime") for p in (ROOT / top).rglob("*.py"))


def _unencodable(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                node.value.encode("utf-8")
            except UnicodeEncodeError as e:
                found.append((node.lineno, repr(node.value[e.start : e.end])))
    return found


def test_string_constants_encode_as_utf8() -> None:
    found = {str(p.relative_to(ROOT)): bad for p in SOURCES if (bad := _unencodable(p))}
    assert found == {}, "write the escape as \\\\uXXXX (or in a raw regex) so the constant stays text"
