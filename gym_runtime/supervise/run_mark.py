"""A per-run mark in every server's environment, so helpers that left the server's process group
are found and stopped (docs/architecture.md §7, "No orphans"; case C59).

A server may start a helper in a session of its own (``setsid``, ``start_new_session=True``: an
executor daemon, a background kernel). ``killpg`` of the server's group misses it, and once its
parent is gone it is a child of PID 1 that no process tree leads to. At isolation ``full`` and
``partial`` the server's pid namespace takes it down; at ``none`` nothing does. Environment
variables are inherited through ``fork``/``exec`` and ``setsid``, so every server gets
:data:`VAR` = this run's mark (``DAEMONPID-STARTTIME-RANDOM``), and the daemon:

* at a stop, after the servers' groups: SIGKILLs every process whose environment holds the mark
  (:func:`kill_marked`), and says so, naming each;
* when it is SIGKILLed: the watchdog (:mod:`gym_runtime.supervise.watchdog`) does the same after
  killing the groups;
* at the next start of a daemon of the same state root (``$GYM_RUNTIME_HOME``): SIGKILLs every
  process whose mark names a daemon of that root that is gone (:func:`kill_stale`; the pid and its
  start time decide, so a daemon running beside it keeps its own, and a daemon of another root,
  such as another installation's or a test's, judges none of them: it could not tell a dead run
  of that root from one whose watchdog is still at work). The root is the mark's last part
  (:func:`owner_of`).

Processes are read with psutil (``Process.environ()``, ``/proc/PID/environ``); what cannot be read
(another user's process) is left alone. A helper that clears its environment loses the mark: the
docs say so.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import signal
import socket
from pathlib import Path

import psutil

VAR = "GYM_RUNTIME_RUN_MARK"


def owner_of(home: Path | str) -> str:
    """The owner part of marks of daemons whose state root is ``home`` on this host: 16 hex digits
    of a hash of the host name and the root's resolved path."""
    return hashlib.sha256(f"{socket.gethostname()}\0{Path(home).resolve()}".encode()).hexdigest()[:16]


def new_mark(owner: str) -> str:
    """This daemon's mark: ``PID-STARTTIME-RANDOM-OWNER`` (start time in hundredths of a second
    since the epoch, as psutil gives ``create_time()``; ``owner``: :func:`owner_of` its state root)."""
    return f"{os.getpid()}-{_started(psutil.Process())}-{secrets.token_hex(6)}-{owner}"


def _started(p: psutil.Process) -> int:
    return int(p.create_time() * 100)


def _marks() -> list[tuple[psutil.Process, str]]:
    out, me = [], os.getpid()
    for p in psutil.process_iter():
        if p.pid == me:
            continue
        try:
            mark = p.environ().get(VAR)
        except (psutil.Error, OSError):
            continue
        if mark:
            out.append((p, mark))
    return out


def _describe(p: psutil.Process) -> str:
    try:
        cmd = " ".join(p.cmdline())[:80] or p.name()
    except psutil.Error:
        cmd = "?"
    return f"pid {p.pid} ({cmd})"


def _kill(procs: list[psutil.Process]) -> list[str]:
    said = []
    for p in procs:
        shown = _describe(p)
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.Error:
            continue
        said.append(shown)
    psutil.wait_procs(procs, timeout=2)
    return said


def kill_marked(mark: str) -> list[str]:
    """SIGKILL every process holding ``mark``; the ones killed, described (``pid N (cmdline)``)."""
    return _kill([p for p, m in _marks() if m == mark])


def _pid_namespace(pid: int | str) -> str | None:
    """The pid namespace of process ``pid`` (``/proc/PID/ns/pid``'s link), None where it cannot be read."""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def kill_stale(owner: str) -> list[str]:
    """SIGKILL every process whose mark names a daemon of the state root ``owner`` (:func:`owner_of`)
    that is no longer running (a SIGKILLed run's leftovers); the ones killed, described. Only
    processes of this daemon's own pid namespace are judged: a mark's pid means nothing in another one (a daemon in a container, seen from the host,
    names a pid of the container's namespace), and servers in a pid namespace of their own (the
    sandbox's, at ``full`` and ``partial``) end with it."""
    stale, ours = [], _pid_namespace("self")
    for p, mark in _marks():
        if ours is None or _pid_namespace(p.pid) != ours:
            continue
        parts = mark.split("-")
        if len(parts) != 4 or parts[3] != owner or not (parts[0].isdigit() and parts[1].isdigit()):
            continue
        pid, started = parts[0], parts[1]
        try:
            alive = _started(psutil.Process(int(pid))) == int(started)
        except psutil.Error:
            alive = False
        if not alive:
            stale.append(p)
    return _kill(stale)
