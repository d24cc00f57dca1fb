"""Is a ready server still answering? The liveness probe after ready (docs/runtime.md, "Supervision").

A server whose event loop is blocked (a CPU-bound ``/verify``, a ``time.sleep`` in a handler, a
deadlock) keeps its process and its port: it never exits, so watching exits never sees it, and
every rollout that reaches it waits until its caller's deadline (case C46). So once a server is
ready, :func:`watch` sends it ``GET <probe path>`` every ``liveness_interval_s`` with a deadline
of ``liveness_timeout_s`` (:class:`~gym_runtime.supervise.options.SuperviseOptions`); after
``liveness_misses`` misses in a row it posts a ``wedged`` event. The supervisor then
(:func:`on_wedged`) names the server (status ``wedged``, its ``error`` and ``wedged`` fields say
what was missed; ``/health`` answers 503 ``degraded`` naming it until it is ready again), says so
on the daemon's stderr and in the server's log, and kills it: its exit restarts it like any exit
nobody asked for (backoff, ``max_restarts``). The connections the wedged server held are closed
by its death, so the rollouts waiting on it fail at once with an error naming it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from gym_runtime.supervise import readiness
from gym_runtime.supervise.member import READY, Event, Member

WEDGED = "wedged"


def watched(m: Member) -> bool:
    """Whether the liveness probe watches ``m``: a server probed over HTTP."""
    return m.kind == "server" and m.probe_path is not None and m.probe_path.startswith("/")


async def watch(sup: Any, m: Member, proc: Any) -> None:
    """Probe ``m`` while ``proc`` is its ready process; post ``wedged`` after too many misses."""
    opts = sup.options
    misses, reason = 0, None
    while True:
        await asyncio.sleep(opts.liveness_interval_s)
        if m.proc is not proc or m.status != READY or proc.poll() is not None or m.url is None or not m.probe_path:
            return
        reason = await readiness.probe(sup._client, m.url + m.probe_path, opts.liveness_timeout_s)
        if m.proc is not proc or m.status != READY:
            return
        misses = misses + 1 if reason is not None else 0
        if misses >= opts.liveness_misses:
            sup.post(
                Event(
                    "wedged",
                    m.name,
                    proc,
                    data=f"did not answer GET {m.probe_path} {misses} times in a row "
                    f"(last: {reason}; one probe every {opts.liveness_interval_s:g}s)",
                )
            )
            return


def on_wedged(sup: Any, m: Member, proc: Any, what: str) -> None:
    """Name ``m`` wedged (``what``: the misses) and kill ``proc``; its exit restarts it."""
    if proc is not m.proc or m.status != READY or sup._stop_started:
        return
    m.status, m.wedged = WEDGED, f"{what}, at {time.strftime('%H:%M:%S')}"
    m.error = f"wedged: {what}"
    m.log.note(f"wedged: {what}; its port is open but it does not answer: killing it to restart it")
    sup._progress(f"{m.name}: wedged: {what}; its port is open but it does not answer: killing it to restart it")
    proc.mark("killed", f"wedged: {what}")
    sup._spawn_task(proc.stop(1.0))
