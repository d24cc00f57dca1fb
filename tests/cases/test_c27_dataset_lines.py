"""Case C27 (tests/cases/data/C27/README.md): a valid JSONL dataset keeps its rows.

Records end at ``\\n`` only: the raw U+2028 and U+0085 inside the case's prompts are data, line
numbers count ``\\n``, ``\\r\\n`` files load, a byte order mark is accepted with a note.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gym_runtime.errors import DatasetError
from gym_runtime.rollouts.rows import load_rows, parse_rows
from tests.examples.conftest import EXAMPLES, dry_run
from tests.helpers.cases import CASES

ROWS = CASES / "C27" / "rows_u2028.jsonl"


@dataclass
class Agent:
    implementation: str = "simple_agent"
    config: dict = field(default_factory=dict)


AGENTS = {"arithmetic_agent": Agent()}


def test_c27_unicode_line_breaks_inside_strings_are_data() -> None:
    """tests/cases/data/C27/README.md: both rows load, on lines 1 and 2, prompts unchanged."""
    rows = load_rows(ROWS, AGENTS)
    assert [(r.index, r.line) for r in rows] == [(0, 1), (1, 2)]
    prompts = [r.data["responses_create_params"]["input"][0]["content"] for r in rows]
    assert prompts == [
        "Compute 6 * 7.\u2028Reply with the number only.",
        "Compute 9 + 10.\u0085Reply with the number only.",
    ]


@pytest.mark.parametrize("breaker", ["\u2028", "\u2029", "\u0085"])
def test_every_unicode_line_break_json_allows_raw_is_data(breaker: str) -> None:
    """tests/cases/data/C27/README.md: what ``str.splitlines`` breaks on never splits a record."""
    first = json.loads(ROWS.read_text(encoding="utf-8").split("\n")[0])
    first["responses_create_params"]["input"][0]["content"] = f"a{breaker}b"
    text = json.dumps(first, ensure_ascii=False) + "\n"
    assert breaker in text
    assert parse_rows(text, "r.jsonl", AGENTS)[0].data == first


@pytest.mark.parametrize("control", ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e"])
def test_a_raw_control_character_is_one_error_on_its_own_line(control: str) -> None:
    """tests/cases/data/C27/README.md: JSON forbids these raw inside a string, so such a row is
    invalid, but it is ONE problem on the line it is on (no invented second line)."""
    good = ROWS.read_text(encoding="utf-8").split("\n")[0]
    text = good + "\n" + good.replace("Compute", f"Com{control}pute") + "\n"
    with pytest.raises(DatasetError) as e:
        parse_rows(text, "r.jsonl", AGENTS)
    assert [v.file for v in e.value.violations] == ["r.jsonl:2"]


def test_crlf_rows_load_and_a_broken_row_names_its_real_line(tmp_path: Path) -> None:
    """tests/cases/data/C27/README.md: ``\\r\\n`` is one record end; a bad row is reported at the
    physical line it is on (counting ``\\n``), not at a line ``str.splitlines`` invents."""
    lines = ROWS.read_text(encoding="utf-8").split("\n")[:2]
    crlf = tmp_path / "crlf.jsonl"
    crlf.write_bytes(("\r\n".join(lines) + "\r\n").encode())
    assert [r.line for r in load_rows(crlf, AGENTS)] == [1, 2]
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes((lines[0] + "\n{oops\u2028\n" + lines[1] + "\n").encode())
    with pytest.raises(DatasetError) as e:
        load_rows(broken, AGENTS)
    assert [v.file for v in e.value.violations] == [f"{broken}:2"]
    assert "1 problem on 1 line" in e.value.message


def test_a_byte_order_mark_is_accepted_with_a_note(tmp_path: Path) -> None:
    """tests/cases/data/C27/README.md (the same file saved by an editor that writes a BOM)."""
    with_bom = tmp_path / "bom.jsonl"
    with_bom.write_bytes(b"\xef\xbb\xbf" + ROWS.read_bytes())
    notes: list[str] = []
    rows = load_rows(with_bom, AGENTS, notes=notes)
    assert len(rows) == 2 and rows[0].data == json.loads(ROWS.read_text(encoding="utf-8").split("\n")[0])
    assert notes == [f"dataset {with_bom} starts with a UTF-8 byte order mark (BOM); it was ignored"]
    assert len(load_rows(with_bom, AGENTS)) == 2  # no notes list: still accepted


@pytest.mark.pypi
def test_c27_rows_run_in_a_dry_run_of_the_quickstart(tmp_path: Path) -> None:
    """tests/cases/data/C27/README.md, "Run on gym-runtime": both rows run (exit 0), on lines 1 and 2;
    with a BOM in front the run still succeeds and the JSON report carries the note."""
    with_bom = tmp_path / "rows_bom.jsonl"
    with_bom.write_bytes(b"\xef\xbb\xbf" + ROWS.read_bytes())
    run = dry_run(EXAMPLES / "native-quickstart", with_bom, "--samples", "1", "--json")
    assert run.code == 0, run.stderr
    report = run.json()
    assert [r["line"] for r in report["rows"]] == [1, 2]
    assert report["summary"]["failures"] == 0 and report["summary"]["succeeded"] == 2
    assert report["notes"] == [f"dataset {with_bom} starts with a UTF-8 byte order mark (BOM); it was ignored"]
    assert "note: dataset" in run.stderr
