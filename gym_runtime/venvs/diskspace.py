"""A venv build that ran out of disk space: one error naming the disk, what was free and what was needed.

uv reports a full disk as ``No space left on device (os error 28)`` after the path it was writing;
our own writes (inputs, marker, logs) raise ``OSError(ENOSPC)``. Either way the build's temporary
directory is removed first (nothing half-built, docs/architecture.md §5), then :func:`no_space_error`
says which disk filled (the venv root, the uv cache or the log directory), how much it holds free
now, and, when uv named the cached distribution it was copying, that distribution's unpacked size
(what installing it needs at least).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path

from gym_runtime.errors import BuildError

NO_SPACE_RE = re.compile(r"No space left on device|os error 28|ENOSPC", re.I)
_FROM_CACHE = re.compile(r"copy file from (\S+?/archive-v\d+/[^/\s]+)/")
_PATH = re.compile(r"(/[^\s`'\"]+)")


def is_no_space(text: str) -> bool:
    """True when uv's output (or an exception text) says the disk is full."""
    return bool(NO_SPACE_RE.search(text))


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MB"


def _tree_size(path: Path) -> int:
    total = 0
    for base, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(base, f)).st_size
            except OSError:
                pass
    return total


def full_path(text: str, candidates: list[Path]) -> Path:
    """The directory whose disk filled: the written path uv named (its last path before the
    error that lies under one of ``candidates``), else the first candidate."""
    head = NO_SPACE_RE.split(text, 1)[0]
    for raw in reversed(_PATH.findall(head)):
        p = Path(raw)
        for c in candidates:
            if p == c or c in p.parents:
                return c
    return candidates[0]


def no_space_error(
    servers: list[str], stage: str, file: str, text: str, roots: dict[str, Path | None], log: Path | None = None
) -> BuildError:
    """``GR-BUILD-NO-SPACE`` for a build of ``servers`` that filled a disk during ``stage``.
    ``roots`` maps what each directory is (``venv root``, ``uv cache``, ``logs``) to its path (None: not set);
    ``text`` is uv's error block or the exception's text."""
    names = {p: what for what, p in roots.items() if p is not None}
    where = full_path(text, list(names))
    usage = shutil.disk_usage(_existing(where))
    m = _FROM_CACHE.search(text)
    needed = ""
    if m and Path(m.group(1)).is_dir():
        size = _tree_size(Path(m.group(1)))
        dist = re.search(r"Failed to install: (\S+)", text)
        needed = (
            f"; installing {dist.group(1) if dist else 'the distribution it was copying'} alone needs "
            f"{_mb(size)} (its unpacked size in the uv cache)"
        )
    what = names.get(where, "directory")
    message = (
        f"venv build failed for {', '.join(servers)} at {stage} ({file}): the disk holding the {what} "
        f"{where} is full: {_mb(usage.free)} free of {_mb(usage.total)} now that the unfinished venv "
        f"was removed{needed}"
    )
    env = {"venv root": "GYM_RUNTIME_VENV_DIR", "uv cache": "GYM_RUNTIME_UV_CACHE_DIR", "logs": "GYM_RUNTIME_HOME"}.get(
        what, "GYM_RUNTIME_VENV_DIR"
    )
    return BuildError(
        message,
        code="GR-BUILD-NO-SPACE",
        cause=text.strip()[-2000:] or None,
        log=log,
        hint=f"free space on that disk (old venvs under the venv root can be removed), or point "
        f"{env} at a larger disk, then build again; nothing of this build was kept",
        extra={
            "server": servers[0],
            "servers": servers,
            "stage": stage,
            "file": file,
            "path": str(where),
            "free_bytes": usage.free,
        },
    )


def is_enospc(exc: BaseException) -> bool:
    """True for an ``OSError`` meaning the disk (or its quota) is full."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
