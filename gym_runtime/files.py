"""Small file primitives the runtime's records and locks share.

* :func:`write_json`, :func:`write_bytes`: a file replaced atomically (a temp file beside it, then
  ``rename(2)``), so a reader sees the old content or the new one, never half of it.
* :func:`try_lock`: a non-blocking exclusive ``flock(2)`` on a lock file, held as long as the
  returned descriptor stays open.
* :func:`read_regular`: a bounded read of a file that someone else may have made a link or a FIFO.
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
import threading
from pathlib import Path
from typing import Any


def write_json(path: Path, data: Any, **dumps: Any) -> None:
    """Replace ``path`` with ``data`` as JSON (``dumps`` go to :func:`json.dumps`). Raises OSError."""
    write_bytes(path, json.dumps(data, **dumps).encode())


def write_bytes(path: Path, data: bytes | None = None, link: Path | None = None) -> None:
    """Replace ``path`` with ``data``, or with a hard link to ``link`` (a copy of it where linking
    fails, e.g. across filesystems), atomically: a temp file beside it (named per process and
    thread), then ``rename(2)``; the temp file never outlives a failure. Raises OSError."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        if link is not None:
            try:
                os.link(link, tmp)
            except OSError:
                data = link.read_bytes()
        if data is not None:
            tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def try_lock(path: Path, mode: int = 0o644) -> int | None:
    """An fd holding the exclusive lock of ``path`` (created with ``mode``), or None when another
    process holds it. Closing the fd releases the lock."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, mode)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def read_regular(path: Path, limit: int) -> bytes:
    """At most ``limit`` bytes of ``path``, read only when it is a regular file: it is opened without
    following a link (``O_NOFOLLOW``) or waiting for a FIFO's writer (``O_NONBLOCK``) and checked on
    the open descriptor, so a path a package or a sandboxed process made can neither redirect the
    read nor hang it. Raises OSError (``ELOOP`` for a link), or ValueError when it is no regular file."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        return f.read(limit)
