"""Rows over agent replicas: the concurrency bound, which replica served a row, and the per-replica counts.

Rows reach an agent at its one stable address (docs/scale-out.md, "Stable addresses"). For an
agent with several replicas that address is the router (:mod:`gym_runtime.placement.router`),
which spreads requests over the replicas (fewest in flight first, Gym's session cookie sticky)
and names the replica that answered in the response header :data:`REPLICA_HEADER`. The router
sets that header itself and drops any copy a replica sent, so only the router's value is seen;
for an agent with one replica (or placement ``local``) the header is not read at all: the row was
served by that replica. A value that is not one of the agent's replicas is ignored (``None``).

The bound on rollouts in flight (``--max-concurrent-rollouts``) defaults to
:data:`ROLLOUTS_PER_AGENT_REPLICA` times the number of agent replicas of the environment
(docs/rollouts.md, "Rollouts at scale").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gym_runtime.placement.router import REPLICA_HEADER

__all__ = ["REPLICA_HEADER", "ROLLOUTS_PER_AGENT_REPLICA", "default_max_rollouts", "served_by", "replica_counts"]
ROLLOUTS_PER_AGENT_REPLICA = 32


def default_max_rollouts(agent_replicas: Mapping[str, Mapping[str, Any]]) -> int:
    """:data:`ROLLOUTS_PER_AGENT_REPLICA` x the agent replicas (``{agent: {replica: node}}``), at least that figure."""
    return ROLLOUTS_PER_AGENT_REPLICA * max(1, sum(len(r) for r in agent_replicas.values()))


def served_by(agent: str, header: str | None, agent_replicas: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The replica (member name, e.g. ``acme_agent.1``) that served a row of ``agent``: its only
    replica, or for several the router's :data:`REPLICA_HEADER` value ``header`` when it names
    one of them; else None (e.g. an answer that did not come through the router)."""
    members = agent_replicas.get(agent) or {agent: None}
    if len(members) == 1:
        return next(iter(members))
    return header if header in members else None


def replica_counts(
    served: Iterable[tuple[str | None, str | None, bool]],
    agent_replicas: Mapping[str, Mapping[str, str | None]],
    wall_s: float,
) -> list[dict[str, Any]]:
    """Per-replica counts of a batch: ``served`` holds ``(agent, replica, failed)`` per rollout
    (agent None: the row named no running agent; replica None: unknown). Returns one entry per
    replica of every agent that got rollouts, in name order, ``{"agent", "replica", "node",
    "rollouts", "failed", "rollouts_per_s"}`` (``node``: ``address (id)`` on Ray, ``local`` on
    this host), plus ``replica: null`` for rollouts no replica is known for (failed before an
    agent answered)."""
    counts: dict[tuple[str, str | None], list[int]] = {}
    for agent, replica, failed in served:
        if agent is None or agent not in agent_replicas:
            continue
        for member in agent_replicas.get(agent) or {}:
            counts.setdefault((agent, member), [0, 0])
        c = counts.setdefault((agent, replica), [0, 0])
        c[0] += 1
        c[1] += failed
    out = []
    for (agent, replica), (n, n_failed) in sorted(counts.items(), key=lambda kv: (kv[0][0], kv[0][1] or "~")):
        node = (agent_replicas.get(agent) or {}).get(replica) if replica is not None else None
        out.append(
            {
                "agent": agent,
                "replica": replica,
                "node": node,
                "rollouts": n,
                "failed": n_failed,
                "rollouts_per_s": round(n / wall_s, 3) if wall_s > 0 else None,
            }
        )
    return out
