"""Calls to a replica's actor bounded in time, and what a lost node looks like from the driver.

A replica's node can vanish while the driver waits on its actor: Ray then fails the call with its
actor error, or (a machine that stops answering) the reply never comes. :func:`while_alive` runs a
call beside a heartbeat (``ping`` every :data:`HEARTBEAT_S`, :data:`HEARTBEAT_TIMEOUT_S` each,
:data:`HEARTBEAT_MISSES` in a row missed, then the worker's machine asked: lost within 7 s, with no
cluster setting of ours) and raises :class:`NodeLost` when the heartbeat ends (docs/scale-out.md
"Node loss").

Missed pings alone are no verdict: on a machine whose cores other work takes, a ping's reply can
take longer than :data:`HEARTBEAT_TIMEOUT_S` (with the load average at 15-30 on two cores a replica
starting was once declared lost so, with its node, which was then left out of every placement and
the replicas moved after a real loss found no room). So after the misses the driver opens a TCP
connection to the actor's worker process (its address in Ray's actor table): the kernel of its
machine completes it however busy the process is, so only a machine that does not answer, or a
worker that is gone, is a lost node (:func:`worker_answers`).

The ping runs in a concurrency group of its own (:data:`ACTOR_GROUPS`, Ray's ``concurrency_groups``:
an event loop on its own thread in the actor), so a step that holds the actor's main event loop (a
server's spawn must run there, and takes seconds on a busy node) is never taken for a lost node.
Every replica actor is created with :data:`ACTOR_GROUPS`.
"""

from __future__ import annotations

import asyncio
import re
import socket
from typing import Any

from gym_runtime.errors import StartError

# a ping every 0.5 s, each given 1.5 s, then the machine asked (the GCS and the connection within
# 3 s): a machine that stops answering is declared lost within 7 s
HEARTBEAT_S, HEARTBEAT_TIMEOUT_S, HEARTBEAT_MISSES = 0.5, 1.5, 2
LIVENESS = "liveness"
ACTOR_GROUPS = {LIVENESS: 1}  # a replica actor's concurrency groups: the heartbeat's own (module doc)


class NodeLost(Exception):
    """The replica's actor (and so its node, or its worker process) is gone."""


def _drop(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: a late failure of an abandoned call is not an error


async def ray_call(ref: Any, timeout_s: float | None = None) -> Any:
    """The value of a Ray ``ObjectRef`` within ``timeout_s`` (None: no limit), else
    :class:`asyncio.TimeoutError`. The wait is never cancelled *into* Ray's future: a reply from
    a node that is gone may never come, and awaiting the cancellation of such a wait can hang;
    an abandoned call is dropped instead (its late result or error is discarded)."""
    task = asyncio.ensure_future(ref)
    task.add_done_callback(_drop)  # an error is retrieved even when this wait is cancelled as the call ends
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
    finally:
        if not task.done():
            task.cancel()
    if not done:
        raise TimeoutError
    return task.result()


async def heartbeat(actor: Any) -> None:
    """Ping ``actor`` every :data:`HEARTBEAT_S`; raises :class:`NodeLost` after
    :data:`HEARTBEAT_MISSES` pings in a row got no answer within :data:`HEARTBEAT_TIMEOUT_S` and
    the actor's worker does not answer at its address either (:func:`worker_answers`; module doc),
    or Ray's own error when it knows the actor is gone."""
    misses = 0
    while True:
        await asyncio.sleep(HEARTBEAT_S)
        try:
            await ray_call(actor.ping.options(concurrency_group=LIVENESS).remote(), HEARTBEAT_TIMEOUT_S)
            misses = 0
        except TimeoutError:
            misses += 1
        if misses >= HEARTBEAT_MISSES:
            try:  # the GCS's own answer is bounded too
                answers = await asyncio.wait_for(asyncio.to_thread(worker_answers, actor), 2 * HEARTBEAT_TIMEOUT_S)
            except TimeoutError:
                answers = False
            if not answers:
                raise NodeLost(
                    f"{HEARTBEAT_MISSES} heartbeats of {HEARTBEAT_TIMEOUT_S:g}s missed, and its worker's "
                    "machine did not answer"
                )
            misses = 0  # a busy machine, not a lost one


def worker_answers(actor: Any) -> bool:
    """Whether the machine of ``actor``'s worker process completes a TCP connection to the worker's
    port (its address in Ray's actor table, read with ``ray._private.state.actors`` as
    :mod:`gym_runtime.placement.death` does) within :data:`HEARTBEAT_TIMEOUT_S`. False when the
    actor is recorded dead, the connection is refused or not answered, or the table cannot be read.
    Blocking: call it in a thread."""
    from ray._private import state

    try:
        info = state.actors(actor._actor_id.hex())
        address = (info["Address"]["IPAddress"], int(info["Address"]["Port"]))
        if info["State"] == "DEAD" or not address[1]:
            return False
        with socket.create_connection(address, timeout=HEARTBEAT_TIMEOUT_S):
            return True
    except Exception:  # noqa: BLE001 - no answer, a refusal, an unreadable table: no sign of life
        return False


async def while_alive(actor: Any, work: Any) -> Any:
    """The result of the awaitable ``work`` (a call on ``actor``), or :class:`NodeLost` (or
    Ray's actor error) as soon as the actor stops answering heartbeats."""
    job, beat = asyncio.ensure_future(work), asyncio.ensure_future(heartbeat(actor))
    try:
        await asyncio.wait({job, beat}, return_when=asyncio.FIRST_COMPLETED)
        if job.done():
            return job.result()
        beat.result()
        raise NodeLost("heartbeat ended")
    finally:
        for t in (job, beat):
            t.cancel()
        await asyncio.gather(job, beat, return_exceptions=True)


def lost_errors() -> tuple[type[BaseException], ...]:
    """The exceptions that mean "the actor (its node or its worker process) is gone": Ray's actor
    errors, its ``OutOfMemoryError`` (the call running when its memory monitor killed the worker)
    and :class:`NodeLost`; :func:`gym_runtime.placement.death.death_of` tells which end it was."""
    import ray.exceptions as rx

    return (rx.RayActorError, rx.ActorUnavailableError, rx.OutOfMemoryError, NodeLost)


def dead_node(error: BaseException) -> str | None:
    """The id of the node Ray names in an actor error as having died (its message: ``... because
    its node has died. Node Id: <hex>``), or None (another cause, or no node named)."""
    found = re.search(r"node has died\. Node Id: ([0-9a-f]{16,})", str(error))
    return found.group(1) if found else None


def node_error(name: str, node: str | None, err: dict[str, Any]) -> StartError:
    """A node's error (``GymRuntimeError.to_dict()``) as a :class:`StartError` naming the server
    and the node; its code stays (e.g. ``GR-BUILD-PYTHON``), violations go into the cause."""
    lines = [v["message"] for v in err.get("violations", [])] + ([err["cause"]] if err.get("cause") else [])
    cause = "\n".join(lines)
    return StartError(
        f"server {name!r} on node {node}: {err['message']}",
        code=err["code"],
        cause=cause or None,
        hint=err.get("hint"),
        log=err.get("log"),
    )
