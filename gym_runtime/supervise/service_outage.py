"""A sandbox service's outage is not the server's failure (docs/runtime.md, "Lifecycle").

Under a sandbox service (the ``opensandbox`` backend) a server whose sandbox must be made again
(it exited, was found wedged, or its sandbox died) cannot be started while the service does not
answer. The backend then ends the start with reason :data:`~gym_runtime.supervise.member.SERVICE_LOST`
and a detail naming the service and since when it is away (case C73). The supervisor
(:func:`on_service_lost`) neither counts that toward ``max_restarts`` nor takes it for a start-up
exit that repeats itself: it starts the server again every ``backoff_max_s``, so its next create
waits for the service, until the backend's own deadline (``GYM_RUNTIME_OPENSANDBOX_OUTAGE_S``) ends
it with :data:`~gym_runtime.supervise.member.SERVICE_GONE`: the server fails at once with
``GR-OSB-UNREACHABLE`` naming the service (:func:`on_service_gone`), never a hint to fix the server. While it waits, ``/health`` answers 503
``degraded`` with ``sandbox_service`` saying why (:func:`waiting`), and ``/server_instances``
shows the server ``restarting`` with that ``error``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from gym_runtime.supervise.member import FAILED, READY, RESTARTING, Event, Member


def on_service_lost(sup: Any, m: Member, what: str, detail: str) -> None:
    """Start ``m`` again after ``backoff_max_s`` without counting it (module doc); ``what``: how
    it ended, ``detail``: the backend's words about the service."""
    first = m.service_wait is None
    m.service_wait = detail
    m.startup_exit = None  # the service's absence, not the server: never "the same start-up exit twice"
    m.status, m.error = RESTARTING, f"waiting for the sandbox service: {detail}"
    delay = sup.options.backoff_max_s
    m.log.note(f"{what}: {detail}; starting it again in {delay:g}s")
    if first:  # once per outage on stderr; every try is in the server's log
        sup._progress(
            f"{m.name}: {what}: {detail}; started again every {delay:g}s until the service answers "
            f"(not counted toward the {sup.options.max_restarts} restarts)"
        )
    asyncio.get_running_loop().call_later(delay, sup.post, Event("spawn", m.name))


def waiting(members: dict[str, Member]) -> dict[str, str]:
    """Server name -> why it waits for the sandbox service, for each server not ready again."""
    return {n: m.service_wait for n, m in members.items() if m.service_wait and m.status != READY}


def on_service_gone(sup: Any, m: Member, detail: str) -> None:
    """Fail ``m`` (and so the run, unless ``keep_going``): the sandbox service stayed away past the
    backend's deadline (``detail`` names it, since when, and the setting)."""
    m.status = FAILED
    sup._fail(
        m.name,
        f"{m.kind} {m.name!r} could not be given a new sandbox: {detail}",
        code="GR-OSB-UNREACHABLE",
        hint="the server is not at fault: bring the sandbox service back (or raise the deadline the "
        "message names for longer outages), " + sup.options.after_fix,
    )
