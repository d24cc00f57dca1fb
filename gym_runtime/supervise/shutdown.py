"""Stopping supervised members: TERM each process group, wait the grace, KILL, reap.

The supervisor's shutdown (:meth:`gym_runtime.supervise.supervisor.Supervisor._shutdown`) stops
its members in two groups with :func:`stop_group` (servers first, then what they use); contract in
docs/architecture.md §7 (case C05: nothing is left running, a member that ignores SIGTERM is killed
and said so).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable

from gym_runtime.supervise.member import FAILED, STOPPED, STOPPING, Member


async def stop_member(m: Member, grace: float, progress: Callable[[str], None]) -> bool:
    """Stop one member (``grace`` seconds between SIGTERM and SIGKILL, 0 for a ``kill_on_stop``
    member); its status ends ``stopped`` (``failed`` when it had failed). Returns True when its
    process could not be reaped (``stuck``: the daemon then exits 3)."""
    proc = m.proc
    if proc is None:
        m.status = STOPPED
        return False
    failed, gone = m.status == FAILED, proc.poll() is not None  # gone: e.g. killed as wedged, not yet restarted
    m.status = STOPPING
    t = time.monotonic()
    info = await proc.stop(0.0 if m.kill_on_stop else grace)  # kill_on_stop: nothing to drain (member.py)
    stuck = info.reason == "stuck"
    if info.reason == "killed" and not m.kill_on_stop and not gone:
        m.escalated = True
        m.log.note(f"did not exit within {grace:g}s of SIGTERM: killed (SIGKILL to its process group)")
        progress(f"{m.name}: ignored SIGTERM for {grace:g}s, killed; stopped in {time.monotonic() - t:.2f}s")
    elif stuck:
        m.log.note(f"stop: {info.detail}")
        progress(f"{m.name}: {info.detail}")
    m.status = FAILED if failed else STOPPED
    return stuck


async def stop_group(group: Iterable[Member], grace: float, progress: Callable[[str], None]) -> tuple[float, bool]:
    """Stop every member of ``group`` at once; ``(seconds taken, any stuck)``."""
    t = time.monotonic()
    done = await asyncio.gather(*(stop_member(m, grace, progress) for m in group), return_exceptions=True)
    return time.monotonic() - t, any(d is True for d in done)
