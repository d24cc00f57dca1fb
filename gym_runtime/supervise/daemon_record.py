"""Which daemon runs on this host: ``daemon.json`` records, held by a lock for the daemon's life.

A *slot* is a directory holding ``daemon.json`` (the record: pid, status, work dir, the
``head_server`` URL as soon as it serves (during start-up), and once ready the ready line:
``servers``...) and ``daemon.lock``, on which the daemon holds an
exclusive ``flock`` until it exits (the kernel drops it even on SIGKILL). A record whose lock
nobody holds is stale and is replaced. ``$GYM_RUNTIME_HOME`` is the slot ``status`` and ``logs``
read; a daemon started with ``--work-dir DIR`` also owns the slot ``DIR`` and takes the home slot
only when it is free, so several daemons can share one home (and its venvs) with their own work
dirs. When a daemon stops it removes its records and writes ``$GYM_RUNTIME_HOME/last_run.json``
(pid, work dir, logs dir, stop time) so ``logs`` can point at what the last run left.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gym_runtime.errors import StartError
from gym_runtime.files import try_lock, write_json

RECORD, LOCK, LAST_RUN = "daemon.json", "daemon.lock", "last_run.json"


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None when missing or unreadable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _lock(slot: Path) -> int | None:
    """An fd holding the exclusive lock of ``slot``, or None when another process holds it."""
    slot.mkdir(parents=True, exist_ok=True)
    return try_lock(slot / LOCK)


def running(slot: Path) -> dict[str, Any] | None:
    """The record of the daemon alive in ``slot`` (its lock is held), else None (no record, or stale)."""
    record = read_json(slot / RECORD)
    if record is None or not (slot / LOCK).exists():
        return None
    fd = os.open(slot / LOCK, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return record
    finally:
        os.close(fd)  # also drops a shared lock we got: nobody holds the slot
    return None


class DaemonRecord:
    """This daemon's slots. ``claim()`` before anything starts (raises :class:`StartError`
    ``GR-DAEMON-RUNNING`` when the slot it needs is held by a live daemon), ``head(url)`` once the
    head server serves, ``ready(info)`` once the ready line is printed, ``release()`` when stopped
    (idempotent)."""

    def __init__(self, home: Path, work_dir: Path, explicit_work_dir: bool, say: Callable[[str], None]) -> None:
        self.home, self.work_dir, self.say = Path(home), Path(work_dir), say
        self.slots = list(dict.fromkeys(([self.work_dir] if explicit_work_dir else []) + [self.home]))
        self.required = self.slots[0]
        self._fds: dict[Path, int] = {}
        self._base: dict[str, Any] = {}

    def claim(self) -> None:
        for slot in self.slots:
            try:
                fd = _lock(slot)
            except OSError as e:
                raise StartError(
                    f"cannot record the daemon in {slot}: {e.strerror or e}",
                    code="GR-DAEMON-RECORD",
                    hint="make it writable, or choose another GYM_RUNTIME_HOME / --work-dir",
                ) from None
            if fd is None:
                other = running(slot) or {}
                if slot == self.required:
                    raise self._conflict(slot, other)
                self.say(
                    f"another daemon (pid {other.get('pid', '?')}) is recorded in {slot / RECORD}: pass "
                    "--head URL (from this daemon's ready line) to `gym-runtime status` / `logs`"
                )
                continue
            stale = read_json(slot / RECORD)
            if stale is not None and stale.get("pid") != os.getpid():
                self.say(
                    f"replacing the stale record of daemon pid {stale.get('pid', '?')} (not running) in {slot / RECORD}"
                )
            self._fds[slot] = fd
        self._base = {
            "pid": os.getpid(),
            "work_dir": str(self.work_dir),
            "logs_dir": str(self.work_dir / "logs"),
            "started_at": time.time(),
        }
        self.write_json({"status": "starting"})

    def head(self, url: str) -> None:
        """The head server serves (right after the config is read): ``status`` / ``logs`` can ask it
        about the start-up from now on."""
        self.write_json({"status": "starting", "head_server": url})

    def ready(self, info: dict[str, Any]) -> None:
        self.write_json({**info, "status": "ready"})

    def release(self) -> None:
        if not self._fds:
            return
        write_json(self.home / LAST_RUN, {**self._base, "stopped_at": time.time()})
        for slot, fd in self._fds.items():
            with contextlib.suppress(OSError):
                (slot / RECORD).unlink()
            os.close(fd)
        self._fds.clear()

    def write_json(self, extra: dict[str, Any]) -> None:
        for slot in self._fds:
            write_json(slot / RECORD, {**self._base, **extra})

    def _conflict(self, slot: Path, other: dict[str, Any]) -> StartError:
        head = other.get("head_server") or "(head server not up yet: still starting)"
        where = "GYM_RUNTIME_HOME" if slot == self.home else "--work-dir"
        return StartError(
            f"another gym-runtime daemon is running with this {where} ({slot}): pid "
            f"{other.get('pid', '?')}, head server {head}",
            code="GR-DAEMON-RUNNING",
            hint=f"stop it first (kill -TERM {other.get('pid', 'PID')}), or give this one its own "
            "state: GYM_RUNTIME_HOME=DIR or --work-dir DIR (then pass --head URL to "
            "`gym-runtime status` / `logs`)",
        )
