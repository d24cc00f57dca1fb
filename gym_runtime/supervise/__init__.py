"""Supervision of server processes: start in the sandbox, ports, readiness, logs, restarts, shutdown.

One event loop owns every state change (:class:`Supervisor`, STYLE.md / honcho). The names below
are imported on first use, so light modules of this package (``daemon_record``, ``options``) load
without the supervisor's dependencies (a CLI command that only reads a record starts fast).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_NAMES = {
    "LogSink": "logs",
    "Member": "member",
    "SuperviseOptions": "options",
    "Event": "supervisor",
    "Supervisor": "supervisor",
}

__all__ = ["Event", "LogSink", "Member", "SuperviseOptions", "Supervisor"]


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        return getattr(import_module(f"gym_runtime.supervise.{_NAMES[name]}"), name)
    raise AttributeError(f"module 'gym_runtime.supervise' has no attribute {name!r}")
