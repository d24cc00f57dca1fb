"""WAL-mode SQLite databases shipped inside a server tree, which the sandbox mounts read-only.

SQLite's file format (https://www.sqlite.org/fileformat2.html, "The Database Header"): a database
starts with the 16 bytes ``SQLite format 3\\0``; bytes 18 and 19 (file format write / read version)
are 2 for a database in WAL mode, 1 for the rollback journal. The mode persists in the file. Opening
a WAL database, even ``?mode=ro``, creates ``-wal`` and ``-shm`` files beside it, so in a read-only
tree the open fails with "unable to open database file" or "attempt to write a readonly database",
and whether it fails depends on whether an earlier writable run left those files behind.
:func:`wal_databases` finds such files by their header (bounded walk, 20 bytes read per file);
:func:`wal_warnings` says so at ``validate`` (``GR-PKG-SQLITE-WAL``) with the three fixes.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from gym_runtime.errors import Violation

MAGIC = b"SQLite format 3\x00"
HEADER = 20
MAX_FILES = 50_000  # per server tree: a walk bounded for an untrusted package
SKIP_DIRS = frozenset({".git", ".venv", "__pycache__", "node_modules"})


def is_wal_database(path: Path) -> bool:
    """True when ``path`` is a SQLite database whose header says WAL mode (bytes 18 and 19 are 2)."""
    try:
        with path.open("rb") as f:
            head = f.read(HEADER)
    except OSError:
        return False
    return len(head) == HEADER and head.startswith(MAGIC) and head[18] == 2 and head[19] == 2


def wal_databases(tree: Path) -> list[Path]:
    """Every WAL-mode SQLite database under ``tree`` (symlinks not followed, at most
    :data:`MAX_FILES` files looked at), sorted."""
    found: list[Path] = []
    seen = 0
    for top, dirs, files in os.walk(tree):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in sorted(files):
            seen += 1
            if seen > MAX_FILES:
                return sorted(found)
            p = Path(top) / name
            if not p.is_symlink() and is_wal_database(p):
                found.append(p)
    return sorted(found)


def wal_warnings(root: Path, trees: Iterable[tuple[str, Path]]) -> list[Violation]:
    """One ``GR-PKG-SQLITE-WAL`` warning per WAL-mode database in the package's server ``trees``
    (``(instance names, tree)`` pairs; ``root``: the package root, for the file names shown)."""
    out = []
    for names, tree in trees:
        for db in wal_databases(tree):
            rel = db.relative_to(root).as_posix() if db.is_relative_to(root) else str(db)
            out.append(
                Violation(
                    "GR-PKG-SQLITE-WAL",
                    "a SQLite database in WAL mode inside a server tree: opening it (even "
                    "read-only) creates -wal and -shm files beside it, which the sandbox's read-only tree refuses "
                    "('unable to open database file', 'attempt to write a readonly database')",
                    file=rel,
                    hint=f"convert it once: sqlite3 {db.name} 'PRAGMA journal_mode=DELETE;' (the mode is stored in the "
                    "file); or open it with 'file:...?immutable=1' (uri=True); or have the operator give the tree a "
                    f"writable copy-on-write view: GYM_RUNTIME_WRITABLE_TREES={names}",
                )
            )
    return out
