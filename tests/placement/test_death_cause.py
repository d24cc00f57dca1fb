"""The verdict on a replica's end from Ray's own records (gym_runtime/placement/death.py), on Ray's
real objects: its ``ActorDeathCause`` protobuf as the GCS actor table holds it, and its exceptions
built as Ray builds them. The messages are those Ray 2.60 gave on a loopback cluster (its memory
monitor's kill and a SIGKILLed worker; tests/placement/test_worker_death.py makes both for real)."""

from __future__ import annotations

import os

import pytest
import ray.exceptions as rx
from ray.core.generated import common_pb2 as pb

from gym_runtime.placement.death import classify
from gym_runtime.supervise.member import NODE_LOST, OOM, WORKER_DIED

NODE = "127.0.0.1 (fa22a334)"
OOM_MESSAGE = (
    "1 worker(s) were killed due to the node running low on memory. Memory on the node (IP: 127.0.0.1, "
    "ID: fa22a334417d) was 3.54GB used / 23.54GB limit (0.150217)\nOOM kill reason: Memory usage "
    "3728809984B exceeded threshold of 3715600640B (14.7% of 25276194816B limit)\nObject store memory usage: []"
)
WORKER_MESSAGE = (
    "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit "
    "detail: Worker unexpectedly exits with a connection error code 2. End of file. Some common causes "
    "include: (1) the process was killed by the OOM killer due to high memory usage"
)


def died(reason: int, message: str = WORKER_MESSAGE) -> pb.ActorDeathCause:
    return pb.ActorDeathCause(
        actor_died_error_context=pb.ActorDiedErrorContext(
            error_message=message, pid=27980, reason=reason, class_name="ServerReplica", actor_id=b"\1" * 16
        )
    )


def test_rays_out_of_memory_error_is_oom_naming_the_nodes_memory_and_the_replicas_reservation() -> None:
    d = classify(rx.OutOfMemoryError(OOM_MESSAGE), None, True, NODE, 2 << 30)
    assert d.reason == OOM
    assert d.detail == (
        f"its worker was killed by Ray's memory monitor on node {NODE}: the node's memory was 3.54GB used "
        "of 23.54GB; Memory usage 3728809984B exceeded threshold of 3715600640B (14.7% of 25276194816B "
        "limit); its placement.memory: 2GiB"
    )


def test_an_oom_context_in_the_actor_table_is_oom_whatever_the_call_raised() -> None:
    cause = pb.ActorDeathCause(oom_context=pb.OomContext(error_message=OOM_MESSAGE))
    for error in (rx.ActorDiedError(), rx.ActorUnavailableError("gone", None)):
        d = classify(error, cause, True, NODE, None)
        assert d.reason == OOM and "placement.memory: none declared" in d.detail


def test_a_worker_dead_on_a_live_node_is_its_crash() -> None:
    cause = died(pb.ActorDiedErrorContext.WORKER_DIED)
    error = rx.ActorDiedError(cause.actor_died_error_context)
    d = classify(error, cause, True, NODE, 1)  # 1 byte: the relays' marker, no reservation of their own
    assert d.reason == WORKER_DIED
    assert d.detail == (
        f"its worker process (pid 27980) died on node {NODE}, which is alive (Ray: exit type SYSTEM_ERROR, "
        "Worker unexpectedly exits with a connection error code 2.); its placement.memory: none declared"
    )


def test_a_dead_node_or_no_death_recorded_is_the_nodes_loss() -> None:
    worker = died(pb.ActorDiedErrorContext.WORKER_DIED)
    assert classify(rx.ActorDiedError(), worker, False, NODE, None).reason == NODE_LOST  # node table: dead
    assert classify(rx.ActorDiedError(), None, True, NODE, None).reason == NODE_LOST  # still ALIVE in the table
    node_died = died(pb.ActorDiedErrorContext.NODE_DIED, "The actor died because its node has died.")
    d = classify(rx.ActorDiedError(), node_died, None, NODE, None)
    assert d == type(d)(NODE_LOST, f"node {NODE} was lost: ActorDiedError")


def test_the_kernels_oom_killer_is_found_in_the_kernel_log_with_the_cgroups_limit() -> None:
    """A real kill by the kernel's OOM killer: a process over its cgroup's memory limit (the
    sandbox's own cgroup slot, sandbox/limits.py), then its record read from ``/dev/kmsg`` as the
    task on the worker's node reads it."""
    import subprocess
    import sys

    from gym_runtime.placement.death import by_kernel, kernel_oom_record
    from sandbox.limits import CgroupSlot, ResourceLimits, cgroup_mode, join_cgroups

    if cgroup_mode() == "none" or not os.access("/dev/kmsg", os.R_OK):
        pytest.skip("needs a writable memory cgroup and a readable /dev/kmsg")
    slot = CgroupSlot("oomtest", ResourceLimits(memory_mb=64))
    try:
        hog = subprocess.Popen(
            [sys.executable, "-c", "x = bytearray(b'1') * (512 << 20)"],
            preexec_fn=lambda: join_cgroups(slot.procs_files),
        )
        assert hog.wait(60) == -9 and slot.oom_killed()
        record = kernel_oom_record(hog.pid)
    finally:
        slot.remove()
    assert record is not None, "no OOM record of the hog in /dev/kmsg"
    assert record.startswith("its cgroup's memory limit 64MiB (usage ") and f"Killed process {hog.pid} (" in record
    assert kernel_oom_record(os.getpid()) is None  # no record for a process the kernel did not kill
    worker = classify(rx.ActorDiedError(), died(pb.ActorDiedErrorContext.WORKER_DIED), True, NODE, None)
    d = by_kernel(worker, record, NODE, 2 << 30)
    assert d.reason == OOM and d.detail.startswith(
        f"its worker process (pid 27980) was killed by the kernel's OOM killer on node {NODE}: its cgroup's "
        "memory limit 64MiB"
    )
    assert d.detail.endswith("its placement.memory: 2GiB")
    assert by_kernel(worker, None, NODE, None) == worker  # no record: still the worker's death
