"""The verdict on a replica's end from Ray's own records (gym_runtime/placement/death.py), on Ray's
real objects: its ``ActorDeathCause`` protobuf as the GCS actor table holds it, and its exceptions
built as Ray builds them. The messages are those Ray 2.60 gave on a loopback cluster (its memory
monitor's kill and a SIGKILLed worker; tests/placement/test_worker_death.py makes both for real)."""

from __future__ import annotations

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
