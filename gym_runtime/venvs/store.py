"""The venv root: content-addressed venvs, completion markers, locks, temporary build dirs.

Layout under ``RuntimeSettings.venv_dir``::

    <digest24>/                      a ready venv (renamed into place only after its marker exists)
    <digest24>/.gym-runtime-ready    JSON marker, written last: {"digest", "servers", "python", ...}
    .tmp/<digest24>.<pid>.<n>/        a build in progress (never looks ready; removed on failure,
                                      and once its lock is free by the next build of any venv)
    .locks/<digest24>.lock           per-venv file lock: two daemons can share a venv root
    .cache/sha256.json               file hash cache (digest.py)

A venv is ready only when its marker parses and holds the plan digest (case C01). The uv cache
gets a shared ``flock`` while builds run and an exclusive one for maintenance (case C18).
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from gym_runtime.settings import user_home
from gym_runtime.venvs.uvrun import Cancelled

MARKER = ".gym-runtime-ready"
_COUNTER = itertools.count()


def read_marker(venv: Path) -> dict[str, Any] | None:
    """The marker of ``venv`` as a dict, or ``None`` when absent or unreadable."""
    try:
        data = json.loads((venv / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_ready(venv: Path, digest: str) -> bool:
    """True when ``venv`` has a marker holding ``digest`` and an interpreter link."""
    m = read_marker(venv)
    return bool(m and m.get("digest") == digest and (venv / "bin" / "python").exists())


def write_marker(venv: Path, data: dict[str, Any]) -> None:
    """Write the marker atomically (temp file + rename); call it after everything else succeeded."""
    tmp = venv / f"{MARKER}.tmp"
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    os.replace(tmp, venv / MARKER)


def tmp_dir(root: Path, digest: str) -> Path:
    """A fresh temporary build directory for ``digest``."""
    d = root / ".tmp" / f"{digest[:24]}.{os.getpid()}.{next(_COUNTER)}"
    d.parent.mkdir(parents=True, exist_ok=True)
    return d


def remove_stale(root: Path, digest: str, keep: Path | None = None) -> list[Path]:
    """Delete leftover temp builds of ``digest`` (call while holding its lock); return them."""
    gone = []
    base = root / ".tmp"
    if base.is_dir():
        for d in base.glob(f"{digest[:24]}.*"):
            if d != keep:
                shutil.rmtree(d, ignore_errors=True)
                gone.append(d)
    return gone


def remove_abandoned(root: Path) -> list[Path]:
    """Delete temp builds whose builder died (a SIGKILLed daemon cannot clean up); return them.

    A builder holds its venv's lock for as long as its temp dir exists, so a temp dir whose lock
    is free now belongs to nobody. The lock (not a pid) decides, so daemons in other pid
    namespaces sharing this venv root are never mistaken for dead."""
    base = root / ".tmp"
    gone: list[Path] = []
    if not base.is_dir():
        return gone
    for d in sorted(base.iterdir()):
        lock = FileLock(str(root / ".locks" / f"{d.name.split('.')[0]}.lock"))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            continue  # being built right now
        try:
            if d.exists():
                shutil.rmtree(d, ignore_errors=True)
                gone.append(d)
        finally:
            lock.release()
    return gone


def install(tmp: Path, final: Path) -> None:
    """Move a finished build into place. A leftover at ``final`` without a valid marker is removed."""
    if final.exists():
        shutil.rmtree(final)
    os.rename(tmp, final)


@contextlib.contextmanager
def venv_lock(root: Path, digest: str, cancel: threading.Event | None = None, on_wait: Any = None) -> Iterator[None]:
    """Hold the per-venv file lock; poll so a cancel is noticed while another builder holds it.

    ``on_wait()`` is called once if the lock is busy. Raises :class:`Cancelled` on cancel.
    """
    path = root / ".locks" / f"{digest[:24]}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path))
    told = False
    while True:
        try:
            lock.acquire(timeout=0.2)
            break
        except Timeout:
            if cancel is not None and cancel.is_set():
                raise Cancelled() from None
            if not told and on_wait is not None:
                on_wait()
                told = True
    try:
        yield
    finally:
        lock.release()


def cache_lock_path(cache_dir: Path | None) -> Path:
    """Where the uv-cache lock lives (inside the cache dir, or uv's default cache dir)."""
    if cache_dir is None:
        base = os.environ.get("XDG_CACHE_HOME") or str(user_home(os.environ, "uv's cache (~/.cache/uv)") / ".cache")
        cache_dir = Path(base) / "uv"
    return cache_dir / ".gym-runtime-maintenance.lock"


@contextlib.contextmanager
def cache_lock(cache_dir: Path | None, exclusive: bool = False, timeout_s: float | None = None) -> Iterator[bool]:
    """A shared (builds) or exclusive (maintenance) ``flock`` on the uv cache (case C18).

    Yields True when the lock was taken; with ``timeout_s`` it yields False instead of waiting longer.
    """
    path = cache_lock_path(cache_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    got = False
    try:
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                got = True
                break
            except BlockingIOError:
                if deadline is not None and time.monotonic() >= deadline:
                    break
                time.sleep(0.05)
        yield got
    finally:
        if got:
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
