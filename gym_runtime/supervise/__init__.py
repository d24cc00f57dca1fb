"""Supervision of server processes: start in the sandbox, ports, readiness, logs, restarts, shutdown.

One event loop owns every state change (:class:`Supervisor`, STYLE.md / honcho).
"""

from gym_runtime.supervise.logs import LogSink
from gym_runtime.supervise.member import Member
from gym_runtime.supervise.options import SuperviseOptions
from gym_runtime.supervise.supervisor import Event, Supervisor

__all__ = ["Event", "LogSink", "Member", "SuperviseOptions", "Supervisor"]
