"""What ``up --host-mode nmp`` was asked for, and the head server's listener in its port range.

Defaults (docs/runtime.md, "Host mode"): the head server's port is the first free one of the
global config's ``port_range_low``-``port_range_high`` (5000-5999) unless ``--head-port-range`` or
``--head-port`` says otherwise; ``/rollouts/run`` writes a space every 15 s while a batch runs
(``--heartbeat-interval``; NMP's proxy cuts a response with no first byte in 180 s) and stops a
batch at :data:`ROLLOUT_DEADLINE_S` (``--rollout-deadline``, or the request's ``deadline_s``).
"""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass

from gym_runtime.errors import StartError
from gym_runtime.host import ROLLOUT_DEADLINE_S
from gym_runtime.host.global_config import HostJob
from gym_runtime.supervise.ports import bind_listener

__all__ = ["ROLLOUT_DEADLINE_S", "HostMode", "bind_in_range"]


@dataclass(frozen=True)
class HostMode:
    """``kind`` (``nmp``), the :class:`HostJob` of its global config and the head server's port
    range (inclusive; ``--head-port-range``, else the config's)."""

    kind: str
    job: HostJob
    port_range: tuple[int, int]


def bind_in_range(host: str, low: int, high: int) -> socket.socket:
    """A listening socket on the first port of ``low``-``high`` (inclusive) that ``host`` can bind;
    raises :class:`StartError` ``GR-HOST-NO-PORT`` when every port of the range is taken."""
    for port in range(low, high + 1):
        probe = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                raise StartError(
                    f"head server: cannot bind {host}:{port}: {e.strerror}",
                    code="GR-START-PORT",
                    hint="use an address this host has (--head-host)",
                ) from None
            continue
        finally:
            probe.close()
        try:  # the port was free a moment ago: take it (a race lost to another process moves on)
            return bind_listener(host, port, "head server")
        except StartError as e:
            if e.code != "GR-START-PORT-IN-USE":
                raise
    raise StartError(
        f"head server: no free port on {host} in {low}-{high}: every one is in use",
        code="GR-HOST-NO-PORT",
        hint="widen port_range_low/port_range_high in the global config or "
        "--head-port-range, or stop what holds those ports",
    )
