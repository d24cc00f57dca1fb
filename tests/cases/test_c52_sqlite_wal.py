"""Case C52 (tests/cases/data/C52/README.md): a WAL-mode SQLite database shipped in a server tree.

Opening it, even read-only, creates ``-wal`` / ``-shm`` files beside it, which the sandbox's
read-only tree refuses with SQLite's own words. ``validate`` names the database and the fixes
(``GR-PKG-SQLITE-WAL``); a start that crashes on it gets the read-only hint with those fixes, and
the package is left as it was. At isolation ``none`` (no bubblewrap) the server runs from a
private copy of its tree (sandbox/treecopy.py): it scores, and the package is left as it was too.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox import probe_isolation
from tests.examples.conftest import ROOT, dry_run
from tests.helpers.cases import CASES
from tests.helpers.daemon import FIXTURE_APP, kill_tree, up_process, write_fixture_package

CASE = CASES / "C52"
DB = "resources_servers/sql_env/data/tasks.db"


def validate(pkg: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "gym_runtime.cli.main", "validate", str(pkg), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_c52_validate_names_the_wal_database_and_the_three_fixes() -> None:
    (w,) = [w for w in validate(CASE / "pkg").get("warnings", []) if w["code"] == "GR-PKG-SQLITE-WAL"]
    assert w["file"] == DB
    assert "unable to open database file" in w["message"]
    for fix in ("PRAGMA journal_mode=DELETE", "immutable=1", "GYM_RUNTIME_WRITABLE_TREES=sql_env"):
        assert fix in w["hint"]


def test_c52_a_database_converted_to_the_rollback_journal_draws_no_warning(tmp_path: Path) -> None:
    pkg = shutil.copytree(CASE / "pkg", tmp_path / "pkg")
    db = pkg / DB
    db.chmod(0o644)
    db.parent.chmod(0o755)
    with sqlite3.connect(db) as con:  # the fix the warning names
        con.execute("PRAGMA journal_mode=DELETE")
    con.close()
    assert "GR-PKG-SQLITE-WAL" not in json.dumps(validate(pkg))


# The case's server opening its database at start-up, as a stdlib fixture (no venv to build).
OPENS_DB = (
    "import sqlite3\nfrom pathlib import Path\n"
    "DB = Path(__file__).resolve().parent / 'data' / 'tasks.db'\n"
    "sqlite3.connect(f'file:{DB}?mode=ro', uri=True).execute('SELECT count(*) FROM singer').fetchone()\n"
) + FIXTURE_APP


def test_c52_a_start_refused_by_sqlite_gets_the_read_only_hint(tmp_path: Path) -> None:
    if probe_isolation().details.get("bwrap") is None:
        pytest.skip("a read-only tree needs bubblewrap")
    pkg = write_fixture_package(
        tmp_path / "pkg",
        {"acme_sql": {"resources_servers": {"acme_sql": {"domain": "coding"}}}},
        apps={"acme_sql": OPENS_DB},
        name="acme-sql",
    )
    data = pkg / "resources_servers" / "acme_sql" / "data"
    data.mkdir()
    shutil.copyfile(CASE / "pkg" / DB, data / "tasks.db")
    proc = up_process(pkg, tmp_path, "--max-restarts", "0")
    try:
        _, err = proc.communicate(timeout=300)
    finally:
        kill_tree(proc)
    assert proc.returncode == 3, err[-3000:]
    assert "GR-START-CRASH" in err and "tried to write where the sandbox is read-only" in err, err[-3000:]
    assert "PRAGMA journal_mode=DELETE" in err and "GYM_RUNTIME_WRITABLE_TREES=acme_sql" in err
    assert sorted(p.name for p in data.iterdir()) == ["tasks.db"]  # no -wal / -shm left in the package


def files_of(root: Path) -> dict[str, tuple]:
    """Every entry below ``root``: mode, and for a file its size and SHA-256."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath) / name
            st = p.lstat()
            digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None
            out[str(p.relative_to(root))] = (st.st_mode, st.st_size if digest else None, digest)
    return out


@pytest.mark.pypi
@pytest.mark.slow
def test_c52_isolation_none_scores_and_leaves_the_package_as_it_was(tmp_path: Path) -> None:
    assert 'EXTRA="--isolation none" run none' in (CASE / "run.sh").read_text()  # the case's own run
    pkg = shutil.copytree(CASE / "pkg", tmp_path / "pkg")  # a failure must not write into the repository
    before = files_of(pkg)
    assert (pkg / DB).read_bytes()[18:20] == b"\x02\x02"  # WAL mode, as shipped
    run = dry_run(
        pkg,
        CASE / "rows.jsonl",
        "--samples",
        "2",
        "--isolation",
        "none",
        "--work-dir",
        str(tmp_path / "run"),
        timeout=900,
    )
    assert run.code == 0, run.stderr[-3000:]
    assert re.search(r"rollouts: 2\s+succeeded: 2\s+failed: 0", run.stdout), run.stdout[-2000:]
    assert "mean reward: 1.000" in run.stdout
    assert files_of(pkg) == before  # no tasks.db-wal / -shm, nothing changed: names, sizes, hashes, modes
    said = " ".join(run.stderr.split())
    assert "isolation none, no bubblewrap: each server runs from a private copy of its tree" in said, said[-3000:]
    assert not list((tmp_path / "run").rglob("tasks.db*"))  # the copies were removed at stop
