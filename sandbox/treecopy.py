"""A server's tree where no bubblewrap makes its view: a private copy (docs/architecture.md §6).

Under bubblewrap a server's own tree (``ProcessSpec.tree``) is bound read-only, or is a
copy-on-write overlay (``ProcessSpec.cow_paths``), so nothing the server writes reaches the
package. Without bubblewrap (isolation ``none``, ``partial`` where bubblewrap does not run) the
process would run inside the package itself, and what it writes beside its own files would stay
there: the ``-wal`` / ``-shm`` files SQLite makes beside a WAL-mode database it only reads (case
C52), a download, a cache; a later sandboxed run of the same package would then pass only
because of them. So the process runs from a private copy instead:

* The copy is made in the sandbox's state directory (``trees/<server>-<n>/``, under the run's
  work directory): the tree whole (files with their modes and times; symbolic links as links),
  and, between ``ProcessSpec.tree_root`` (the package root) and the tree, real directories whose
  every other entry is a symbolic link to the original. What a server reaches by a path relative
  to its own files (``Path(__file__).resolve().parents[2] / "_kit"``, as the built-in servers do)
  is thus where it was. Nothing of the venv or the interpreter is copied.
* The process's working directory, and every argv element and environment value naming the tree
  (``PYTHONPATH``, Ray's job runtime environment), name the copy. Its config
  (``ProcessSpec.private_env``) is passed as it is.
* Each start of the server gets a fresh copy (a restart, and ``dry-run --watch``'s restart after
  an edit, see the package as it is then); the previous copy is removed then, and every copy when
  the sandbox closes. So what a server writes into its tree lasts until its next start, as the
  read-only tree of ``full`` keeps nothing at all.

Cost: one copy of the tree per start, said on a progress line (files, bytes, seconds). The first
starts' copies are made before any server starts, in a worker thread (:meth:`Sandbox.prepare`); a
restart's copy is made by ``spawn``, on the event loop's thread (a spawn is synchronous). Every
tree is copied, whatever its size: the copy is what keeps the package unchanged at these levels,
and a refusal would stop starts that work today. A tree over :data:`LARGE_BYTES` gets a warning
naming its size and time (the figures: ``bench/tree_copy.py``, docs/runtime.md).

A server still runs as the daemon's user with the host's files at these levels: what it writes by
an absolute path, or through the links to the package's other entries, is not redirected.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import time
from dataclasses import dataclass, replace
from pathlib import Path

from gym_runtime.errors import StartError

from .launch import ProcessSpec

LARGE_BYTES = 256 << 20  # a tree above this (256 MiB) gets a warning line with its size and copy time


@dataclass(frozen=True)
class TreeCopy:
    """One copy: ``tree`` (the original, as the spec names it), ``path`` (its copy), ``top`` (the
    directory to remove), ``files`` and ``size`` (regular files copied, bytes), ``seconds``."""

    tree: Path
    path: Path
    top: Path
    files: int
    size: int
    seconds: float

    def spec(self, spec: ProcessSpec) -> ProcessSpec:
        """``spec`` run from the copy: its cwd, argv and environment values naming the tree name the copy."""
        olds = sorted({str(self.tree), str(self.tree.resolve())}, key=len, reverse=True)

        def fix(value: str) -> str:
            for old in olds:
                value = repath(value, old, str(self.path))
            return value

        return replace(
            spec,
            cwd=fix(str(spec.cwd)),
            argv=[fix(str(a)) for a in spec.argv],
            env={k: fix(v) for k, v in spec.env.items()},
        )


def repath(value: str, old: str, new: str) -> str:
    """``value`` with each occurrence of the path ``old`` that is a whole path (followed by its end,
    ``/``, ``:``, a quote, ...; never by more of a name: ``/a/b`` is not in ``/a/b2``) replaced by ``new``."""
    return re.sub(re.escape(old) + r"(?![\w.-])", lambda _: new, value)


def human(size: int) -> str:
    """``size`` bytes in kB / MB / GB (powers of 1000)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def make(tree: Path | str, root: Path | str | None, dest: Path) -> TreeCopy:
    """Copy ``tree`` into ``dest`` (which must not exist) keeping its place below ``root`` (an
    ancestor of ``tree``, or None: the tree alone) as the module doc says. Raises ``OSError`` or
    ``shutil.Error``; the caller removes ``dest`` then (:func:`remove`)."""
    started = time.monotonic()
    real = Path(tree).resolve()
    base = Path(root).resolve() if root is not None else None
    parts = real.relative_to(base).parts if base is not None and base in real.parents else ()
    dest.mkdir(parents=True)
    here, there = base if base is not None else real, dest  # parts is empty without a base
    for i, part in enumerate(parts):  # the directories above the tree: links to every other entry
        with os.scandir(here) as entries:
            for entry in entries:
                if entry.name != part:
                    os.symlink(entry.path, there / entry.name)
        here, there = here / part, there / part
        if i < len(parts) - 1:
            there.mkdir()
    counted = [0, 0]

    def copy(src: str, dst: str) -> str:
        out = shutil.copy2(src, dst, follow_symlinks=False)
        counted[0] += 1
        counted[1] += os.lstat(dst).st_size
        return out

    copied = there if parts else dest / real.name
    shutil.copytree(real, copied, symlinks=True, copy_function=copy)
    return TreeCopy(Path(tree), copied, dest, counted[0], counted[1], time.monotonic() - started)


def remove(top: Path) -> None:
    """Remove a copy (or the directory holding copies), also where the tree had read-only
    directories. Never follows a link: the links to the package are removed, not what they name."""
    if not os.path.lexists(top):
        return
    for dirpath, dirs, _files in os.walk(top):  # os.walk lists links to directories but does not enter them
        for d in dirs:
            p = os.path.join(dirpath, d)
            if not os.path.islink(p):
                try:
                    os.chmod(p, os.lstat(p).st_mode | stat.S_IRWXU)
                except OSError:
                    pass
    shutil.rmtree(top, ignore_errors=True)


def failure(name: str, tree: Path | str, dest: Path, level: str, err: BaseException) -> StartError:
    """The error of a copy that failed (``GR-START-TREE-COPY``), naming the server, the tree, where it went and why."""
    why: BaseException | str = err
    if isinstance(err, shutil.Error) and err.args and isinstance(err.args[0], list) and err.args[0]:
        _src, _dst, reason = err.args[0][0]  # the reason names the file
        why = f"{reason}" + (f" (and {len(err.args[0]) - 1} more)" if len(err.args[0]) > 1 else "")
    return StartError(
        f"server {name!r}: its tree {tree} could not be copied to {dest}: {why}",
        code="GR-START-TREE-COPY",
        cause=str(err),
        hint=f"isolation {level} has no bubblewrap, so each server runs from a private copy of its "
        "tree (what it writes there stays out of the package); free space where the run's work "
        "directory is (GYM_RUNTIME_HOME or --work-dir) or remove what cannot be copied (a socket, "
        "a pipe) from the tree; where bubblewrap runs (isolation full) the tree is used in place, "
        "read-only",
    )


def summary(level: str, copies: list[tuple[str, TreeCopy]]) -> list[str]:
    """The progress lines for the copies made before the first start: one line for all, and a
    warning for each tree over :data:`LARGE_BYTES`."""
    if not copies:
        return []
    files = sum(c.files for _, c in copies)
    size = sum(c.size for _, c in copies)
    secs = sum(c.seconds for _, c in copies)
    names = ", ".join(n for n, _ in copies)
    lines = [
        f"isolation {level}, no bubblewrap: each server runs from a private copy of its tree, so what it "
        f"writes there stays out of the package ({len(copies)} tree(s): {names}; {files} files, {human(size)}, "
        f"copied in {secs:.2f}s; a fresh copy at each start of a server, removed at stop)"
    ]
    for name, c in copies:
        if c.size > LARGE_BYTES:
            lines.append(
                f"WARNING: server {name}'s tree is {human(c.size)} ({c.files} files): copying it took "
                f"{c.seconds:.1f}s and is done again at each of its starts; keep large data out of server "
                "trees, or run where bubblewrap works (isolation full), where the tree is used in place"
            )
    return lines
