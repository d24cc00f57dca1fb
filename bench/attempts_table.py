"""Render the hostile-server attempts x isolation levels table from a test run's JSON files.

    GYM_RUNTIME_TESTS_REPORT_DIR=out ./uvw run pytest tests/reliability/test_hostile.py
    ./uvw run python bench/attempts_table.py out                      # print the table
    ./uvw run python bench/attempts_table.py out --write docs/reliability.md

``tests/reliability/test_hostile.py`` writes ``hostile-<level>.json`` and ``squat-<level>.json``
(``{"level", "attempts": {attempt: {"outcome", "detail"}}}``). The table has one row per attempt
and one column per level; below it, what each run saw (the attempt's own words). ``--write``
replaces the text between ``<!-- attempts-table:begin -->`` and ``<!-- attempts-table:end -->``.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

LEVELS = ("full", "partial", "none")
SHOWN = {
    "blocked": "blocked",
    "contained": "contained",
    "not blocked": "**not blocked**",
    "skipped": "not run",
    "error": "**attempt failed**",
}
BEGIN, END = "<!-- attempts-table:begin -->", "<!-- attempts-table:end -->"


def load(directory: Path) -> dict[str, dict[str, dict]]:
    """``{attempt: {level: {"outcome", "detail"}}}`` from every JSON file of ``directory``."""
    table: dict[str, dict[str, dict]] = {}
    for path in sorted(directory.glob("*.json")):
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or data.get("level") not in LEVELS:
            continue
        for attempt, result in data["attempts"].items():
            table.setdefault(attempt, {})[data["level"]] = result
    return table


def _cell(text: str) -> str:
    return re.sub(r"/tmp/\S+?/(?=[^/\s]+)", ".../", text).replace("|", "\\|").replace("\n", " ")


def render(table: dict[str, dict[str, dict]]) -> str:
    """The markdown table, then what each run saw."""
    levels = [lv for lv in LEVELS if any(lv in row for row in table.values())]
    lines = ["| attempt | " + " | ".join(f"`{lv}`" for lv in levels) + " |", "|---|" + "---|" * len(levels)]
    for attempt, row in table.items():
        cells = [SHOWN.get(row[lv]["outcome"], row[lv]["outcome"]) if lv in row else "-" for lv in levels]
        lines.append(f"| {attempt} | " + " | ".join(cells) + " |")
    lines += ["", "What each run saw:", ""]
    for attempt, row in table.items():
        lines.append(
            f"- **{attempt}**: " + "; ".join(f"`{lv}`: {_cell(row[lv]['detail'])}" for lv in levels if lv in row)
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("directory", type=Path)
    ap.add_argument("--write", type=Path, help="replace the table between the markers in this file")
    args = ap.parse_args()
    text = render(load(args.directory))
    if args.write is None:
        print(text, end="")
        return
    doc = args.write.read_text()
    start, end = doc.index(BEGIN) + len(BEGIN), doc.index(END)
    args.write.write_text(doc[:start] + "\n" + text + doc[end:])


if __name__ == "__main__":
    main()
