"""A port taken between choice and bind (case C04: automatic ports are "retried on a bind race").

At isolation ``none`` servers bind host ports the daemon chose a moment earlier, so another
process can take one in between; the server then exits during start-up. When that exit happens
and the member's *automatic* port is now held by someone else, the member gets a fresh port, every
server's ``NEMO_GYM_CONFIG_DICT`` is refreshed (each server reads every address once, at start) and
the servers already running are restarted with it. None of this counts as a crash. At full and
partial isolation ports are chosen in the sandbox's own network namespace, where nothing else binds.
"""

from __future__ import annotations

from typing import Any

from gym_runtime.errors import StartError
from gym_runtime.supervise.member import STARTING, STOPPING, Event, Member
from gym_runtime.supervise.ports import check_free

MAX_REBINDS = 3  # per member: a port lost again and again is reported as the crash it causes


def lost_port(m: Member) -> str | None:
    """Why ``m``'s automatic port is unusable now (the C04 message naming the owner), or None."""
    level = getattr(getattr(m.launcher, "level", None), "value", None)
    if not m.auto_port or m.rebinds >= MAX_REBINDS or level != "none" or m.port is None:
        return None
    try:
        check_free(m.host, m.port, m.name)
    except StartError as e:
        return e.message
    return None


def handle_bind_race(sup: Any, m: Member) -> bool:
    """On ``m``'s exit during start-up (supervisor loop): True when it was a bind race, handled by
    asking ``sup.rebind(name)`` for a new port and restarting the servers; False otherwise."""
    if sup.rebind is None or m.status != STARTING:
        return False
    why = lost_port(m)
    if why is None:
        return False
    old = m.port
    sup.rebind(m.name)
    m.rebinds += 1
    sup._progress(
        f"{why}, taken between choice and bind: {m.name} moves from port {old} to {m.port}; "
        "servers restart with the new addresses"
    )
    m.log.note(f"port {old} was taken before this server bound it; new port {m.port}")
    for other in sup.members.values():
        if other is not m and other.kind == "server" and other.proc is not None and other.proc.poll() is None:
            respawn(sup, other)
    sup.post(Event("spawn", m.name))
    return True


def respawn(sup: Any, m: Member) -> None:
    """A requested restart (not a crash) of running ``m``: its status is ``stopping`` at once and
    its process is stopped in the background; the supervisor spawns the refreshed spec when it
    handles that exit (:func:`respawn_after_exit`), so the exit is never taken for a crash."""
    m.status, m.respawn = STOPPING, True
    sup._spawn_task(m.proc.stop(0.5))


def respawn_after_exit(sup: Any, m: Member) -> bool:
    """On ``m``'s exit (supervisor loop): True when it was stopped by :func:`respawn`, and is
    spawned again now (unless the environment is stopping)."""
    if not m.respawn:
        return False
    m.respawn = False
    if not sup._stop_started:
        m.status = STARTING
        sup.post(Event("spawn", m.name))
    return True
