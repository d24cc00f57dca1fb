"""The Ray actor class of a server replica: :class:`~gym_runtime.placement.replica.ServerReplica`
with the concurrency groups its heartbeat needs (:data:`~gym_runtime.placement.liveness.ACTOR_GROUPS`),
made in one place for the replicas placed (``remote.py``) and the warm spares (``spares.py``)."""

from __future__ import annotations

from typing import Any

from gym_runtime.placement.liveness import ACTOR_GROUPS
from gym_runtime.placement.replica import ServerReplica


def actor_class() -> Any:
    """:class:`ServerReplica` as a Ray actor class (``ray.remote``) with :data:`ACTOR_GROUPS`; create
    with ``.options(...).remote(job)`` or, for a spare, ``.remote(None, prepare)``."""
    import ray

    return ray.remote(concurrency_groups=ACTOR_GROUPS)(ServerReplica)  # type: ignore[call-overload]  # Ray's typed overloads of remote() leave out concurrency_groups, which it accepts (and refuses in .options())
