"""Send each dataset row k times to its server's ``/run`` and time every rollout (dry-run, docs/architecture.md §9).

Each row goes where its dataset check routed it (``DatasetRow.route``: its agent, or the
environment server fronting it; a materialized task's sample ``k`` is rollout ``k`` of task
``row.index`` unless the row is stamped).

The HTTP call and its per-row error shapes are :func:`gym_runtime.rollouts.dispatch.run_row`'s; this
module adds the k samples, the replica that served each rollout, a bound on rollouts in flight, a
per-rollout wall time, the verdict on the agent's answer
(:func:`gym_runtime.rollouts.verdict.judge`: reward, counters, context-overflow stop, declared
range), and a callback per finished rollout (the progress bar and the ``--out`` writer use it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping

import httpx

from gym_runtime.rollouts.dispatch import run_row
from gym_runtime.rollouts.rows import DatasetRow
from gym_runtime.rollouts.stats import RolloutResult
from gym_runtime.rollouts.verdict import AgentFacts, judge


def to_result(
    row: DatasetRow,
    sample: int,
    answer: dict,
    latency_s: float,
    facts: AgentFacts | None = None,
    replica: str | None = None,
) -> RolloutResult:
    """A :class:`RolloutResult` from an agent answer (or a dispatch row error) and the replica that served it."""
    v = judge(answer, row.agent, facts)
    via = row.route.environment_server if row.route is not None else None
    return RolloutResult(
        row.index,
        sample,
        row.line,
        row.agent,
        v.reward,
        round(latency_s, 4),
        v.error,
        v.unknown_tool_calls,
        v.invalid_tool_arguments,
        v.context_overflow,
        v.out_of_range,
        replica,
        v.mask_sample,
        v.failure_kind,
        v.failure_reason,
        via,
        v.count("unparsed_tool_calls"),
        bool(v.count("max_steps_stops")),
        bool(v.count("idle_turn_stops")),
        v.count("aborted_calls"),
        v.count("repaired_text"),
    )


async def sample_rows(
    rows: list[DatasetRow],
    agents: Mapping[str, str],
    samples: int,
    concurrency: int,
    on_result: Callable[[RolloutResult], None] | None = None,
    timeout_s: float | None = None,
    facts: Mapping[str, AgentFacts] | None = None,
    replicas: Mapping[str, Mapping[str, str | None]] | None = None,
) -> list[RolloutResult]:
    """Run every row ``samples`` times, at most ``concurrency`` rollouts at once.

    ``agents`` maps agent instance names to base URLs. Rollouts are started sample-major (every
    row's sample 0 first) so all rows progress together. Returns results sorted by (row, sample);
    a failed rollout is a result with ``error`` set, never an exception. ``timeout_s`` bounds one
    rollout (``None``: no bound). ``facts`` (agent -> :class:`AgentFacts`) names resources servers
    in bad-reward errors and gives the declared reward ranges; ``replicas`` (agent -> {replica:
    node}) which replicas may serve each agent's rows (each result names the one that did).
    """
    sem = asyncio.Semaphore(max(1, concurrency))
    limits = httpx.Limits(max_connections=max(concurrency, 10), max_keepalive_connections=max(concurrency, 10))

    async with httpx.AsyncClient(trust_env=False, timeout=None, limits=limits) as client:

        async def one(row: DatasetRow, sample: int) -> RolloutResult:
            async with sem:
                start = time.perf_counter()
                reply = await run_row(
                    client,
                    agents,
                    row.data,
                    timeout_s=timeout_s,
                    facts=facts,
                    replicas=replicas,
                    route=row.route,
                    index=row.index,
                    sample=sample,
                )
                result = to_result(
                    row, sample, reply.answer, time.perf_counter() - start, (facts or {}).get(row.agent), reply.replica
                )
            if on_result is not None:
                on_result(result)
            return result

        jobs = [one(row, k) for k in range(samples) for row in rows]
        results = await asyncio.gather(*jobs)
    return sorted(results, key=lambda r: (r.row, r.sample))
