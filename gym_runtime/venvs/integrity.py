"""Is every file an installed distribution lists actually in the venv? (a corrupted uv cache).

uv installs a wheel by linking or copying its unpacked copy from the uv cache
(``<cache>/archive-v0/<id>/``). If that copy was damaged (a file deleted or truncated by a crash,
a full disk, a hand clean-up), uv installs the damage without a word: the venv looks complete and
the server fails later with an ``ImportError``. After each install step the build therefore reads
every ``*.dist-info/RECORD`` under the venv (the wheel's own file list, PEP 376 / PEP 427) and
checks that each listed file exists with the listed size. Hashes are not recomputed (that would
read every byte of every venv); sizes catch deleted and truncated files.
"""

from __future__ import annotations

import csv
import io
import os
import re
from pathlib import Path

from gym_runtime.venv_layout import site_packages


def _dist_name(dist_info: Path) -> str:
    name = dist_info.name.removesuffix(".dist-info").rsplit("-", 1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def damaged(venv: Path) -> dict[str, list[str]]:
    """``{distribution: [problem, ...]}`` for every distribution whose RECORD lists a file that is
    missing or has another size (first 5 problems each); empty when all is in place."""
    out: dict[str, list[str]] = {}
    for site in site_packages(venv):
        for record in site.glob("*.dist-info/RECORD"):
            try:
                rows = list(csv.reader(io.StringIO(record.read_text(errors="replace"))))
            except (OSError, csv.Error):
                out[_dist_name(record.parent)] = [f"{record} cannot be read"]
                continue
            problems = []
            for row in rows:
                if not row or not row[0] or row[0].endswith(".dist-info/RECORD") or "__pycache__" in row[0]:
                    continue
                path = os.path.normpath(site / row[0])
                size = row[2] if len(row) > 2 else ""
                try:
                    actual = os.lstat(path).st_size
                except OSError:
                    problems.append(f"{row[0]} is missing")
                    continue
                if size.isdigit() and int(size) != actual and not os.path.islink(path):
                    problems.append(f"{row[0]} has {actual} bytes, its RECORD says {size}")
            if problems:
                out[_dist_name(record.parent)] = problems[:5]
    return out


def describe(found: dict[str, list[str]]) -> str:
    """One line per damaged distribution."""
    return "\n".join(f"{name}: {'; '.join(problems)}" for name, problems in sorted(found.items()))
