"""File names in a server tree that are not UTF-8.

Linux file names are bytes; Python shows one that does not decode as UTF-8 with surrogate escapes
(PEP 383), and many tools refuse it: anything that writes the name as UTF-8 text (JSON, YAML,
``str.encode()``, NeMo Gym's tooling) raises ``UnicodeEncodeError``, and ``watchfiles``, under
``dry-run --watch``, cannot decode it (the watch carries the name on as Python gives it,
gym_runtime/dryrun/edits.py). :func:`name_warnings` says so at ``validate``
(``GR-PKG-NAME-ENCODING``): one warning per such file or directory of the package's server trees
(a directory's contents are not named again: renaming it is the fix for all of them), its path shown
with the undecodable bytes as backslash escapes (``caf\\xe9.txt``), and the fix (rename it).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from gym_runtime.errors import Violation
from gym_runtime.package.sqlite_wal import MAX_FILES, SKIP_DIRS


def _decodes(name: str) -> bool:
    try:
        name.encode("utf-8")  # an undecodable byte is a lone surrogate here (os.fsdecode's surrogateescape)
    except UnicodeEncodeError:
        return False
    return True


def shown(path: str) -> str:
    """``path`` (as ``os.fsdecode`` gives it) with each byte that is not UTF-8 as ``\\xNN``."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def undecodable_names(tree: Path) -> list[Path]:
    """Every file or directory under ``tree`` whose own name is not UTF-8 (not descending into such
    a directory, symlinks not followed, at most :data:`MAX_FILES` entries looked at), sorted by bytes."""
    found: list[Path] = []
    seen = 0
    for top, dirs, files in os.walk(tree):
        bad_dirs = [d for d in dirs if not _decodes(d)]
        found += [Path(top) / d for d in bad_dirs]
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and d not in bad_dirs)
        for name in files:
            seen += 1
            if seen > MAX_FILES:
                return sorted(found, key=os.fsencode)
            if not _decodes(name):
                found.append(Path(top) / name)
    return sorted(found, key=os.fsencode)


def name_warnings(root: Path, trees: Iterable[tuple[str, Path]]) -> list[Violation]:
    """One ``GR-PKG-NAME-ENCODING`` warning per file or directory with a name that is not UTF-8 in the
    package's server ``trees`` (``(instance names, tree)`` pairs; ``root``: the package root, for the
    paths shown)."""
    out = []
    for _names, tree in trees:
        for p in undecodable_names(tree):
            rel = shown(p.relative_to(root).as_posix() if p.is_relative_to(root) else str(p))
            kind = "directory" if p.is_dir() and not p.is_symlink() else "file"
            out.append(
                Violation(
                    "GR-PKG-NAME-ENCODING",
                    f"a {kind} name that is not UTF-8 inside a server tree (the bytes shown as \\xNN): "
                    "tools that write names as UTF-8 text (NeMo Gym's tooling, JSON, YAML) fail on it, and "
                    "dry-run --watch's file watcher cannot decode it",
                    file=rel,
                    hint=f"rename it to a UTF-8 name, e.g. mv {shell_quoted(p)} <new name> (in a shell, "
                    "$'...' writes the bytes as shown)",
                )
            )
    return out


def shell_quoted(p: Path) -> str:
    """``p``'s last name as bash's ``$'...'`` quoting (its bytes as ``\\xNN``), ready to paste."""
    raw = os.fsencode(p.name)
    body = "".join(chr(b) if 32 <= b < 127 and chr(b) not in "'\\" else f"\\x{b:02x}" for b in raw)
    return f"$'{body}'"
