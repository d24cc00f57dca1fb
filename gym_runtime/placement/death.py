"""Why a replica's actor ended, from Ray's own records: its node lost, its worker killed for memory,
or its worker process dead on a node that lives (docs/scale-out.md "Crash, out of memory or node loss").

The driver sees all three the same way: a call on the actor fails with Ray's actor error
(``ActorDiedError``, ``ActorUnavailableError``), ``OutOfMemoryError`` (the call that was running
when Ray's memory monitor killed the worker) or the heartbeat's :class:`NodeLost`. Ray tells them
apart in the GCS:

* the actor table's ``death_cause`` (``ActorTableData.death_cause``, an ``ActorDeathCause``):
  ``oom_context`` when Ray's memory monitor killed the worker (its message names the node's memory
  and Ray's threshold); ``actor_died_error_context`` with reason ``WORKER_DIED`` when the worker
  process died on a node whose raylet saw it go (a SIGKILL, a segfault, the kernel's OOM killer:
  Ray's exit detail says which it can tell), ``NODE_DIED`` when the node was declared dead;
* the node table (``ray.nodes()``) says whether the node is alive.

Ray cannot tell the kernel's OOM killer from any other SIGKILL (its exit detail names it as one
possible cause, "verifiable by checking for OOM in dmesg"), so for a worker that died on a live
node the node is asked, by a task pinned to it (:func:`kernel_oom_on`), whether its kernel log has
the OOM killer's record of that pid (:func:`kernel_oom_record`, ``/dev/kmsg``); if so the death is
``oom`` too, naming the cgroup's memory limit the kernel logged. A node whose kernel log cannot be
read leaves it ``worker-died``.

A raylet killed outright, or a machine gone, reports nothing: the actor stays ``ALIVE`` in the
actor table until the GCS declares the node dead (10 to 20 s on loopback), so an actor the table
does not record as dead of its worker is taken for its node's loss (the driver's heartbeat has
already declared it, docs/scale-out.md "Node loss").

The actor table is read with ``ray._private.state.actors`` (the GCS accessor behind
``ray.util.state.get_actor``, which needs the dashboard, absent from a training job's cluster).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from typing import Any

from gym_runtime.supervise.member import NODE_LOST, OOM, WORKER_DIED


@dataclass(frozen=True)
class Death:
    """``reason``: :data:`NODE_LOST`, :data:`OOM` or :data:`WORKER_DIED` (the exit reason of the
    replica); ``detail``: one line for ``last_exit`` and the daemon's line; ``pid``: the dead
    worker's pid on its node (:data:`WORKER_DIED` only)."""

    reason: str
    detail: str
    pid: int | None = None


def _bytes(n: int | None) -> str:
    if not n or n <= 1:  # 1 byte: the relays' marker (gym_runtime/config/placement.py ANY_NODE_MEMORY)
        return "none declared"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:g}{unit}"
    return f"{n}B"


def oom_summary(message: str) -> str:
    """What Ray's memory monitor says of its kill (its ``OutOfMemoryError`` or ``oom_context``
    message): the node's memory against its limit and the threshold it passed, in one line."""
    used = re.search(r"was ([\d.]+\s*[KMGT]?B) used / ([\d.]+\s*[KMGT]?B) limit", message)
    reason = re.search(r"OOM kill reason: ([^\n]+)", message)
    parts = []
    if used:
        parts.append(f"the node's memory was {used.group(1)} used of {used.group(2)}")
    if reason:
        parts.append(reason.group(1).strip())
    if parts:
        return "; ".join(parts)
    return message.splitlines()[0][:300] if message else "no detail from Ray"


def _worker_detail(message: str) -> str:
    found = re.search(r"Worker exit type: (\S+) Worker exit detail: ([^.]+\.)", message)
    return f"Ray: exit type {found.group(1)}, {found.group(2)}" if found else message.splitlines()[-1][:300]


def classify(
    error: BaseException,
    cause: Any,
    node_alive: bool | None,
    node: str | None,
    memory: int | None,
) -> Death:
    """The :class:`Death` of a replica from what Ray says: ``error`` (the exception a call on its
    actor raised), ``cause`` (its actor table entry's ``death_cause``, an ``ActorDeathCause``, or
    None when the actor is not recorded dead), ``node_alive`` (the node table's verdict, None when
    unknown), ``node`` (``address (id)``, for the detail) and ``memory`` (its ``placement.memory``
    in bytes, None when not declared). Pure: :func:`death_of` asks Ray."""
    import ray.exceptions as rx

    where = f"on node {node}" if node else "on its node"
    mem = f"its placement.memory: {_bytes(memory)}"
    oom_message = None
    if isinstance(error, rx.OutOfMemoryError):
        oom_message = str(error)
    elif cause is not None and cause.HasField("oom_context"):
        oom_message = cause.oom_context.error_message
    if oom_message is not None:
        return Death(OOM, f"its worker was killed by Ray's memory monitor {where}: {oom_summary(oom_message)}; {mem}")
    if node_alive is False or cause is None or not cause.HasField("actor_died_error_context"):
        return Death(NODE_LOST, f"node {node} was lost: {type(error).__name__}")
    died = cause.actor_died_error_context
    if died.reason != died.WORKER_DIED:  # NODE_DIED, RAY_KILL...: not its worker's own end
        return Death(NODE_LOST, f"node {node} was lost: {type(error).__name__}")
    return Death(
        WORKER_DIED,
        f"its worker process (pid {died.pid}) died {where}, which is alive ({_worker_detail(died.error_message)}); {mem}",
        died.pid or None,
    )


def death_of(actor_id: str | None, node_id: str | None, error: BaseException, node: str | None, memory: Any) -> Death:
    """:func:`classify` with Ray's records of the actor ``actor_id`` (hex) and the node ``node_id``
    (hex) read from the GCS (blocking: call it in a thread). Any failure to read them leaves the
    verdict to the error alone (a node's loss unless Ray reported the memory monitor's kill)."""
    import ray

    cause, alive = None, None
    try:
        if actor_id is not None:
            from ray._private import state

            info = state.actors(actor_id)
            if info and info.get("State") == "DEAD":
                cause = info.get("DeathCause")
        if node_id is not None:
            alive = next((bool(n["Alive"]) for n in ray.nodes() if n["NodeID"] == node_id), False)
    except Exception:  # noqa: BLE001 - the GCS may be unreachable: the error alone decides
        cause, alive = None, None
    return classify(error, cause, alive, node, memory if isinstance(memory, int) else None)


KMSG_RECENT_S = 300.0  # a record older than this is not the kill just seen (pids are reused)


def kernel_oom_record(pid: int, kmsg: str = "/dev/kmsg") -> str | None:
    """The kernel OOM killer's record of killing ``pid`` in the last :data:`KMSG_RECENT_S`, read on
    this node's kernel log (``/dev/kmsg``: one record per read, ``prio,seq,usec,flags;text``, usec
    since boot), as one line: the memory limit the kernel logged before it (``memory: usage NkB,
    limit NkB`` of a cgroup) and its ``Killed process`` line. None when there is none, or the log
    cannot be read (permissions, no such device)."""
    try:
        fd = os.open(kmsg, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    records: list[tuple[float, str]] = []
    errors = 0
    try:
        while errors < 100:
            try:
                raw = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError:  # EPIPE: a record overwritten while read; the next read goes on
                errors += 1
                continue
            if not raw:
                break
            head, _, text = raw.decode(errors="replace").partition(";")
            fields = head.split(",")
            usec = float(fields[2]) if len(fields) > 2 and fields[2].isdigit() else 0.0
            records.append((usec / 1e6, text.split("\n", 1)[0]))
    finally:
        os.close(fd)
    since = time.clock_gettime(time.CLOCK_MONOTONIC) - KMSG_RECENT_S
    killed = re.compile(rf"Killed process {pid} \(")
    for i in range(len(records) - 1, -1, -1):
        at, text = records[i]
        if at < since:
            return None
        if killed.search(text):
            limit = next(
                (
                    m
                    for _, t in reversed(records[max(0, i - 60) : i])
                    if (m := re.search(r"memory: usage (\d+)kB, limit (\d+)kB", t))
                ),
                None,
            )
            where = (
                f"its cgroup's memory limit {_bytes(int(limit.group(2)) * 1024)} "
                f"(usage {_bytes(int(limit.group(1)) * 1024)})"
                if limit
                else "the host's memory"
            )
            return f"{where}: {text.strip()[:300]}"
    return None


def kernel_oom_on(node_id: str, pid: int, timeout_s: float) -> str | None:
    """:func:`kernel_oom_record` of ``pid`` run on the node ``node_id`` (a Ray task pinned to it,
    no CPU asked); None when it does not answer within ``timeout_s`` or fails (blocking: call it in
    a thread)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    task = ray.remote(kernel_oom_record).options(
        num_cpus=0, max_retries=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)
    )
    ref = task.remote(pid)
    try:
        return ray.get(ref, timeout=timeout_s)
    except Exception:  # noqa: BLE001 - no answer from the node: the worker's death stays what Ray said
        ray.cancel(ref, force=True)
        return None


def by_kernel(death: Death, record: str | None, node: str | None, memory: int | None) -> Death:
    """``death`` (a :data:`WORKER_DIED`) as :data:`OOM` when the node's kernel log had the OOM
    killer's ``record`` of its worker (:func:`kernel_oom_record`); else unchanged."""
    if death.reason != WORKER_DIED or record is None:
        return death
    pid = death.pid
    where = f"on node {node}" if node else "on its node"
    return Death(
        OOM,
        f"its worker process (pid {pid}) was killed by the kernel's OOM killer {where}: {record}; "
        f"its placement.memory: {_bytes(memory)}",
    )
