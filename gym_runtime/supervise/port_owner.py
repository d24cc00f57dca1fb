"""Who listens on a server's port? Readiness counts only the server's own answer.

A server is ready once ``GET /`` on its port answers (docs/architecture.md §7.1). All servers of an
environment share one network (the sandbox's namespace, or the host's at isolation ``none``), so a
hostile server could bind another server's port before that one starts and answer in its place
(port squatting): it would then receive that server's rollouts. Before a server counts as ready,
:func:`squatter` therefore finds the listening socket on its port (``/proc/<pid>/net/tcp{,6}``
of a process in that network, proc(5)) and the process holding it (``/proc/<pid>/fd``): it must be
the server or one of its descendants.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import psutil

LISTEN = "0A"


def listening_inodes(netns_pid: int, port: int) -> set[int]:
    """Inodes of the TCP sockets listening on ``port`` in the network namespace of ``netns_pid``
    (empty when the tables cannot be read)."""
    out: set[int] = set()
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{netns_pid}/net/{table}") as f:
                next(f, None)
                for line in f:
                    parts = line.split()
                    if len(parts) > 9 and parts[3] == LISTEN and int(parts[1].rsplit(":", 1)[1], 16) == port:
                        out.add(int(parts[9]))
        except (OSError, ValueError):
            continue
    return out


def socket_inodes(pid: int) -> set[int]:
    """Inodes of the sockets process ``pid`` holds open (empty when not readable)."""
    out: set[int] = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                out.add(int(target[8:-1]))
    except OSError:
        pass
    return out


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants."""
    try:
        root = psutil.Process(pid)
        return [pid, *(p.pid for p in root.children(recursive=True))]
    except psutil.Error:
        return []


def holder(inodes: set[int], candidates: Iterable[int]) -> int | None:
    """The first of ``candidates`` holding one of ``inodes``."""
    for pid in candidates:
        if socket_inodes(pid) & inodes:
            return pid
    return None


def squatter(name: str, pid: int, port: int, others: Mapping[str, Any]) -> str | None:
    """None when the listener on ``port`` belongs to server ``name`` (process ``pid`` and its
    descendants), or cannot be found; else who holds it: ``"server 'x' (pid N)"`` for another
    member of ``others`` (name -> process handle with ``.pid``), else ``"process N (command)"``."""
    inodes = listening_inodes(pid, port)
    if not inodes or holder(inodes, tree(pid)) is not None:
        return None
    for other, proc in others.items():
        if other == name or proc is None:
            continue
        found = holder(inodes, tree(proc.pid))
        if found is not None:
            return f"server {other!r} (pid {found})"
    found = holder(inodes, psutil.pids())
    if found is None:
        return None
    try:
        command = " ".join(psutil.Process(found).cmdline())[:200]
    except psutil.Error:
        command = "?"
    return f"process {found} ({command})"
