"""Group statistics of a dry-run: per-row reward spread and a run summary (DESIGN.md §9).

GRPO normalises each reward by its group (the k samples of one prompt): a group whose rewards
are all equal has zero advantage everywhere and teaches nothing. So each row reports mean,
standard deviation (population, as GRPO's per-group normalisation uses), min, max and failures,
and a row with at least two rewards that are all equal is flagged "no GRPO signal". With fewer
than two rewards the signal is unknown (``signal`` is ``None``).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

NO_SIGNAL = "no GRPO signal"
_EQUAL_TOL = 1e-9


@dataclass(frozen=True)
class RolloutResult:
    """One rollout: row ``row`` (0-based index), sample ``sample`` (0-based), the dataset ``line``,
    the agent instance, the ``reward`` (``None`` when it failed), ``latency_s`` (wall seconds of
    the ``/run`` call) and ``error`` (``{"code", "message"}`` or ``None``)."""

    row: int
    sample: int
    line: int
    agent: str
    reward: float | None
    latency_s: float
    error: dict[str, str] | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.reward is not None

    def to_dict(self) -> dict[str, Any]:
        """One line of ``--out`` (JSONL)."""
        return asdict(self)


@dataclass(frozen=True)
class RowStats:
    """Statistics of one row's k samples; ``signal`` is True (rewards differ), False (all equal,
    flagged :data:`NO_SIGNAL`) or None (fewer than two rewards)."""

    row: int
    line: int
    agent: str
    samples: int
    rewards: list[float] = field(hash=False)
    failures: int
    mean: float | None
    std: float | None
    min: float | None
    max: float | None
    signal: bool | None

    @property
    def flag(self) -> str | None:
        return NO_SIGNAL if self.signal is False else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "flag": self.flag}


@dataclass(frozen=True)
class Summary:
    """The run: counts, ``signal_share`` (rows with signal / rows whose signal is known),
    ``rollouts_per_s`` (finished rollouts per wall second), failures by error code."""

    rows: int
    rollouts: int
    succeeded: int
    failures: int
    signal_rows: int
    no_signal_rows: int
    unknown_signal_rows: int
    signal_share: float | None
    reward_mean: float | None
    wall_s: float
    rollouts_per_s: float | None
    failures_by_code: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _all_equal(values: list[float]) -> bool:
    return max(values) - min(values) <= _EQUAL_TOL


def row_stats(results: Iterable[RolloutResult]) -> list[RowStats]:
    """Group ``results`` by row (sorted by row index) and compute each row's statistics."""
    groups: dict[int, list[RolloutResult]] = {}
    for r in results:
        groups.setdefault(r.row, []).append(r)
    out = []
    for row in sorted(groups):
        items = sorted(groups[row], key=lambda r: r.sample)
        rewards = [float(r.reward) for r in items if r.ok]  # type: ignore[arg-type]
        have = bool(rewards)
        out.append(RowStats(
            row=row, line=items[0].line, agent=items[0].agent, samples=len(items), rewards=rewards,
            failures=sum(not r.ok for r in items),
            mean=statistics.fmean(rewards) if have else None,
            std=statistics.pstdev(rewards) if have else None,
            min=min(rewards) if have else None, max=max(rewards) if have else None,
            signal=(not _all_equal(rewards)) if len(rewards) >= 2 else None,
        ))
    return out


def summarize(stats: list[RowStats], results: Iterable[RolloutResult], wall_s: float) -> Summary:
    """The run summary from the per-row statistics, the raw results and the wall time (s)."""
    results = list(results)
    codes = Counter((r.error or {}).get("code", "GR-ROLLOUT-NO-REWARD") for r in results if not r.ok)
    rewards = [float(r.reward) for r in results if r.ok]  # type: ignore[arg-type]
    signal = sum(s.signal is True for s in stats)
    no_signal = sum(s.signal is False for s in stats)
    known = signal + no_signal
    return Summary(
        rows=len(stats), rollouts=len(results), succeeded=len(rewards), failures=len(results) - len(rewards),
        signal_rows=signal, no_signal_rows=no_signal, unknown_signal_rows=len(stats) - known,
        signal_share=signal / known if known else None,
        reward_mean=statistics.fmean(rewards) if rewards else None,
        wall_s=round(wall_s, 3),
        rollouts_per_s=round(len(results) / wall_s, 3) if wall_s > 0 and results else None,
        failures_by_code=dict(sorted(codes.items())),
    )


def coerce_reward(value: Any) -> float | None:
    """A finite float reward from an agent answer's ``reward`` field, else ``None``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    f = float(value)
    return f if math.isfinite(f) else None
