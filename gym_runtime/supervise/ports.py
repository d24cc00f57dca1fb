"""Host ports: explicit-port preflight with the owning process, socket binding.

Case C04: a taken explicit port is reported within a second as ``<name>: host:port is already in
use`` with the owner's pid and command line (psutil), never as a crash after a health-check timeout;
automatically chosen ports avoid every port already assigned in the run (head server included).
"""

from __future__ import annotations

import errno
import socket

import psutil

from gym_runtime.errors import StartError


def port_owner(port: int) -> str | None:
    """``pid N (cmdline)`` of the process listening on ``port``, or None when it cannot be told."""
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return None
    for c in conns:
        if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid:
            try:
                cmd = " ".join(psutil.Process(c.pid).cmdline())[:200]
            except psutil.Error:
                cmd = "?"
            return f"pid {c.pid} ({cmd})"
    return None


def bind_listener(host: str, port: int, what: str) -> socket.socket:
    """A listening TCP socket at host:port (port 0 = any free one), kept open so nothing can take it.

    Raises :class:`StartError` ``GR-START-PORT-IN-USE`` naming ``what`` and the owner when taken.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((host, port))
    except OSError as e:
        s.close()
        if e.errno == errno.EADDRINUSE:
            raise port_in_use(what, host, port) from None
        raise StartError(
            f"{what}: cannot bind {host}:{port}: {e.strerror}",
            code="GR-START-PORT",
            hint="use a loopback address this host has, or another port",
        ) from None
    s.listen(512)
    s.setblocking(False)
    return s


def port_in_use(what: str, host: str, port: int) -> StartError:
    """The C04 error: ``<what>: host:port is already in use (pid N (cmd))`` with a hint."""
    owner = port_owner(port)
    return StartError(
        f"{what}: {host}:{port} is already in use" + (f" by {owner}" if owner else ""),
        code="GR-START-PORT-IN-USE",
        hint="stop that process (often a server left from an earlier run), or change the port "
        "in the config / remove `port` to have one assigned",
    )


def check_free(host: str, port: int, what: str) -> None:
    """Preflight: raise :class:`StartError` when host:port cannot be bound right now."""
    bind_listener(host, port, what).close()
