"""A server's own tree at each level (docs/runtime.md, "Sandbox and egress"; sandbox/treecopy.py).

Under bubblewrap the tree is bound read-only; without it (``none``, ``partial`` where bubblewrap
does not run: tests/sandbox/test_ladder.py) the server runs from a private copy, so what it
writes beside its own files never lands in the package: here, as in case C52, the ``-wal`` and
``-shm`` files SQLite makes beside a WAL-mode database opened read-only, a file of its own and an
append to a shipped file. The package is compared file by file (names, sizes, hashes, modes).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sqlite3
from pathlib import Path

import pytest

from sandbox import EgressPolicy, ProcessSpec, Sandbox

# A server that writes into its own tree, reads a sibling of the package root by a path relative
# to itself (as the built-in servers import servers/_kit), and says what it saw.
APP = """import json, os, sqlite3, sys
from pathlib import Path
here = Path(__file__).resolve().parent
sys.path.insert(0, str(here.parents[1] / "_kit"))
import shared
out = {"cwd": os.getcwd(), "here": str(here), "pythonpath": os.environ.get("PYTHONPATH"), "kit": shared.VALUE,
       "existed": (here / "data" / "written.txt").exists(), "seed": (here / "data" / "seed.txt").read_text()}
try:
    db = sqlite3.connect(f"file:{here / 'data' / 'tasks.db'}?mode=ro", uri=True)
    out["rows"] = db.execute("SELECT count(*) FROM singer").fetchone()[0]
except sqlite3.Error as e:
    out["rows"] = str(e)
try:
    (here / "data" / "written.txt").write_text("by the server")
    with open(here / "data" / "seed.txt", "a") as f:
        f.write("appended by the server")
    out["wrote"] = "ok"
except OSError as e:
    out["wrote"] = e.strerror
out["seen"] = sorted(p.name for p in (here / "data").iterdir())
print(json.dumps(out))
"""


def make_package(root: Path) -> Path:
    tree = root / "resources_servers" / "acme_sql"
    (tree / "data").mkdir(parents=True)
    (root / "_kit").mkdir()
    (root / "_kit" / "shared.py").write_text("VALUE = 'kit'\n")
    (root / "nemo-environment.yaml").write_text("format: native-v1\n")
    (root / "resources_servers" / "other").mkdir()
    (root / "resources_servers" / "other" / "app.py").write_text("")
    (tree / "app.py").write_text(APP)
    (tree / "data" / "seed.txt").write_text("shipped\n")
    with sqlite3.connect(tree / "data" / "tasks.db") as con:
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("CREATE TABLE singer (name TEXT)")
        con.executemany("INSERT INTO singer VALUES (?)", [("a",), ("b",), ("c",)])
    con.close()
    assert sorted(p.name for p in (tree / "data").iterdir()) == ["seed.txt", "tasks.db"]  # closed: no -wal left
    return tree


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry below ``root``: kind, size, mode and a SHA-256 of each file's bytes."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath) / name
            st = p.lstat()
            digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() and not p.is_symlink() else None
            out[str(p.relative_to(root))] = (st.st_mode, st.st_size if digest else None, digest)
    return out


async def start_twice(level: str, tmp_path: Path, python: Path, tree: Path) -> tuple[list[str], list[dict], list[bool]]:
    """Start the server twice in one sandbox (a restart; at level none the package's seed.txt is
    edited in between); returns the prepare lines, what it said each time, and whether each
    start's copy still existed after the second start."""
    sb = await Sandbox.start(EgressPolicy.from_environ({}), tmp_path / "sb", level=level)
    work = tmp_path / "work"
    work.mkdir()
    seen, cwds = [], []
    try:
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}  # as the daemon's
        spec = ProcessSpec(
            "acme_sql",
            [str(python), "app.py"],
            tree,
            env,
            read_only_paths=[tree.parent.parent, python.parent.parent],
            writable_paths=[work],
            tree=tree,
            tree_root=tree.parent.parent,
        )
        lines = await sb.prepare([spec])
        for i in range(2):
            out = work / f"out{i}.json"
            with open(out, "wb") as fo, open(work / f"err{i}.txt", "wb") as fe:
                spec.stdout_fd, spec.stderr_fd = fo.fileno(), fe.fileno()
                proc = sb.spawn(spec)
            assert await asyncio.wait_for(proc.wait(), 60) == 0, (work / f"err{i}.txt").read_text()
            seen.append(json.loads(out.read_text()))
            cwds.append(Path(seen[-1]["cwd"]))
            if level == "none":  # an edit of the package between two starts (dry-run --watch restarts on one)
                (tree / "data" / "seed.txt").write_text("edited\n")
        alive = [c.exists() for c in cwds]
    finally:
        await sb.close()
    assert not list((tmp_path / "sb").glob("*/trees/*")), "a copy outlived the sandbox"
    return lines, seen, alive


def test_without_bubblewrap_a_server_runs_from_a_private_copy_of_its_tree(tmp_path: Path, plain_python: Path) -> None:
    tree = make_package(tmp_path / "pkg")
    owed = snapshot(tmp_path / "pkg")
    seed = "resources_servers/acme_sql/data/seed.txt"
    owed[seed] = (owed[seed][0], 7, hashlib.sha256(b"edited\n").hexdigest())  # the test's own edit, no other
    lines, seen, alive = asyncio.run(start_twice("none", tmp_path, plain_python, tree))
    assert snapshot(tmp_path / "pkg") == owed  # nothing added, nothing changed by the server
    (line,) = lines
    assert "private copy of its tree" in line and "acme_sql" in line and "3 files" in line, line
    for out in seen:
        copy = Path(out["cwd"])
        assert copy != tree and copy.parts[-2:] == ("resources_servers", "acme_sql")
        assert (tmp_path / "sb") in copy.parents  # in the sandbox's state, under the run's work dir
        assert out["here"] == out["cwd"] == out["pythonpath"]  # cwd, __file__ and PYTHONPATH name the copy
        assert out["kit"] == "kit"  # the package's other entries are where they were, relative to the tree
        assert out["rows"] == 3 and out["wrote"] == "ok"
        assert out["seen"] == ["seed.txt", "tasks.db", "tasks.db-shm", "tasks.db-wal", "written.txt"]
        assert out["existed"] is False  # each start gets a fresh copy: the first start's writes are gone
    assert seen[0]["cwd"] != seen[1]["cwd"]
    assert [out["seed"] for out in seen] == ["shipped\n", "edited\n"]  # each start sees the package as it is then
    assert alive == [False, True]  # the first start's copy was removed when the second started


def test_under_bubblewrap_the_tree_is_used_in_place_read_only(
    tmp_path: Path, plain_python: Path, full_available: bool
) -> None:
    if not full_available:
        pytest.skip("bubblewrap with a user namespace is not available on this host")
    tree = make_package(tmp_path / "pkg")
    before = snapshot(tmp_path / "pkg")
    lines, seen, _ = asyncio.run(start_twice("full", tmp_path, plain_python, tree))
    assert lines == [] and snapshot(tmp_path / "pkg") == before
    out = seen[0]
    assert out["cwd"] == str(tree) and out["kit"] == "kit"
    assert out["rows"] == "unable to open database file"  # SQLite's wording of the read-only tree (case C52)
    assert out["wrote"] == "Read-only file system" and out["seen"] == ["seed.txt", "tasks.db"]
