"""Send each dataset row k times to its agent's ``/run`` and time every rollout (dry-run, DESIGN.md §9).

The HTTP call and its per-row error shapes are :func:`gym_runtime.rollouts.dispatch.run_row`'s;
this module adds the k samples, a bound on rollouts in flight, a per-rollout wall time, the
reward taken from the agent's answer, and a callback per finished rollout (the progress bar and
the ``--out`` writer use it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping

import httpx

from gym_runtime.rollouts.dispatch import run_row
from gym_runtime.rollouts.rows import DatasetRow
from gym_runtime.rollouts.stats import RolloutResult, coerce_reward

NO_REWARD = "GR-ROLLOUT-NO-REWARD"


def to_result(row: DatasetRow, sample: int, answer: dict, latency_s: float) -> RolloutResult:
    """A :class:`RolloutResult` from an agent answer (or a dispatch row error)."""
    error = answer.get("error") if isinstance(answer.get("error"), dict) and "code" in answer["error"] else None
    reward = None if error else coerce_reward(answer.get("reward"))
    if error is None and reward is None:
        error = {"code": NO_REWARD, "message": f"agent {row.agent!r} answered without a numeric reward "
                 f"(reward={answer.get('reward')!r})"}
    return RolloutResult(row.index, sample, row.line, row.agent, reward, round(latency_s, 4),
                         {"code": str(error["code"]), "message": str(error.get("message", ""))} if error else None)


async def sample_rows(rows: list[DatasetRow], agents: Mapping[str, str], samples: int, concurrency: int,
                      on_result: Callable[[RolloutResult], None] | None = None,
                      timeout_s: float | None = None) -> list[RolloutResult]:
    """Run every row ``samples`` times, at most ``concurrency`` rollouts at once.

    ``agents`` maps agent instance names to base URLs. Rollouts are started sample-major (every
    row's sample 0 first) so all rows progress together. Returns results sorted by (row, sample);
    a failed rollout is a result with ``error`` set, never an exception. ``timeout_s`` bounds one
    rollout (``None``: no bound).
    """
    sem = asyncio.Semaphore(max(1, concurrency))
    limits = httpx.Limits(max_connections=max(concurrency, 10), max_keepalive_connections=max(concurrency, 10))

    async with httpx.AsyncClient(trust_env=False, timeout=None, limits=limits) as client:
        async def one(row: DatasetRow, sample: int) -> RolloutResult:
            async with sem:
                start = time.perf_counter()
                answer = await run_row(client, agents, row.data, timeout_s=timeout_s)
                result = to_result(row, sample, answer, time.perf_counter() - start)
            if on_result is not None:
                on_result(result)
            return result

        jobs = [one(row, k) for k in range(samples) for row in rows]
        results = await asyncio.gather(*jobs)
    return sorted(results, key=lambda r: (r.row, r.sample))
