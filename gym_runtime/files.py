"""Small file primitives the runtime's records and locks share.

* :func:`write_json`: a JSON file replaced atomically (a temp file beside it, then ``rename(2)``),
  so a reader sees the old record or the new one, never half of one.
* :func:`try_lock`: a non-blocking exclusive ``flock(2)`` on a lock file, held as long as the
  returned descriptor stays open.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any


def write_json(path: Path, data: Any, **dumps: Any) -> None:
    """Replace ``path`` with ``data`` as JSON (``dumps`` go to :func:`json.dumps`). Raises OSError."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, **dumps))
    os.replace(tmp, path)


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
