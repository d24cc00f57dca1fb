"""Group statistics of a dry-run: per-row reward spread and a run summary (docs/architecture.md §9).

GRPO normalises each reward by its group (the k samples of one prompt): a group whose rewards
are all equal has zero advantage everywhere and teaches nothing. So each row reports mean,
standard deviation (population, as GRPO's per-group normalisation uses), min, max and failures,
and a row with at least two rewards that are all equal is flagged "no GRPO signal". With fewer
than two rewards the signal is unknown (``signal`` is ``None``). A sample its environment masked
(``mask_sample``: the reward is no valid measurement) succeeded but is left out of the spread; a
row whose every sample was masked is flagged ``all masked`` (its environment failed), never "no
GRPO signal" (case C39). Beside them, each rollout's episode counters: tool calls left as text
(``unparsed_tool_calls``), the cap that ended it (``max_steps``, ``max_idle_turns``) and the model
calls its endpoint aborted, and the code points of its model output that were no text, replaced
by U+FFFD (``repaired_text``; docs/rollouts.md, "The dry-run report").
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from gym_runtime.rollouts.verdict import BAD_REWARD

NO_SIGNAL = "no GRPO signal"
ALL_MASKED = "all masked"
_EQUAL_TOL = 1e-9


@dataclass(frozen=True)
class RolloutResult:
    """One rollout: row ``row`` (0-based index), sample ``sample`` (0-based), the dataset ``line``,
    the agent instance, the ``reward`` (``None`` when it failed), ``latency_s`` (wall seconds of
    the ``/run`` call), ``error`` (``{"code", "message"}`` or ``None``), the agent's
    ``unknown_tool_calls`` / ``invalid_tool_arguments`` (None when it does not count them), whether
    the episode was stopped by a ``context_overflow``, whether the reward is ``out_of_range``
    of the resources server's declared ``reward_range`` (:mod:`gym_runtime.rollouts.verdict`),
    the agent ``replica`` that served it (:mod:`gym_runtime.rollouts.spread`; None: unknown), what
    the answer said of its own validity (``mask_sample``, ``failure_kind``, ``failure_reason``) and
    the ``environment_server`` it went through (None: straight to the agent), the tool calls left as
    text in its final answer (``unparsed_tool_calls``, None: not counted), whether ``max_steps``
    (``step_capped``) or ``max_idle_turns`` (``idle_capped``) ended its episode, and the model calls
    its endpoint aborted and the model server asked again (``aborted_calls``, None: not counted), and
    the code points of its model output that were no text, replaced by U+FFFD (``repaired_text``,
    None: not counted)."""

    row: int
    sample: int
    line: int
    agent: str
    reward: float | None
    latency_s: float
    error: dict[str, str] | None = None
    unknown_tool_calls: int | None = None
    invalid_tool_arguments: int | None = None
    context_overflow: bool = False
    out_of_range: bool = False
    replica: str | None = None
    mask_sample: bool = False
    failure_kind: str | None = None
    failure_reason: str | None = None
    environment_server: str | None = None
    unparsed_tool_calls: int | None = None
    step_capped: bool = False
    idle_capped: bool = False
    aborted_calls: int | None = None
    repaired_text: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.reward is not None

    @property
    def measured(self) -> bool:
        """A reward that counts in the row's spread: the rollout succeeded and is not masked."""
        return self.ok and not self.mask_sample

    def to_dict(self) -> dict[str, Any]:
        """One line of ``--out`` (JSONL)."""
        return asdict(self)


@dataclass(frozen=True)
class RowStats:
    """Statistics of one row's k samples; ``signal`` is True (rewards differ), False (all equal,
    flagged :data:`NO_SIGNAL`) or None (fewer than two rewards). Per row also: ``unknown_tool_calls``
    and ``invalid_tool_arguments`` summed over the samples (None when the agent reports neither),
    ``context_overflows`` (samples stopped because the prompt no longer fit), ``bad_rewards``
    (samples whose reward was unusable, counted in ``failures`` too), ``out_of_range`` and ``masked``
    (samples whose answer set ``mask_sample``: succeeded, but their rewards are not in ``rewards``);
    ``unparsed_tool_calls`` (None when not counted), ``step_capped`` / ``idle_capped`` (rollouts each
    cap ended), ``aborted`` (model calls aborted by the endpoint) and ``repaired_text`` (code points of
    model output that were no text, replaced by U+FFFD)."""

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
    unknown_tool_calls: int | None = None
    invalid_tool_arguments: int | None = None
    context_overflows: int = 0
    bad_rewards: int = 0
    out_of_range: int = 0
    masked: int = 0
    unparsed_tool_calls: int | None = None
    step_capped: int = 0
    idle_capped: int = 0
    aborted: int = 0
    repaired_text: int = 0

    @property
    def all_masked(self) -> bool:
        """Every sample succeeded but was masked: the environment failed, not the policy (case C39)."""
        return self.masked > 0 and self.masked == self.samples - self.failures and not self.rewards

    @property
    def flag(self) -> str | None:
        if self.all_masked:
            return ALL_MASKED
        return NO_SIGNAL if self.signal is False else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "flag": self.flag}


@dataclass(frozen=True)
class Summary:
    """The run: counts, ``signal_share`` (rows with signal / rows whose signal is known),
    ``rollouts_per_s`` (finished rollouts per wall second), failures by error code, the masked
    rollouts (``masked``), rows whose every sample was masked (``masked_rows``) and the masked
    rollouts by ``failure_kind`` (``masked_by_kind``; ``unknown`` when none was given), and the totals
    of the episode counters."""

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
    unknown_tool_calls: int = 0
    invalid_tool_arguments: int = 0
    context_overflows: int = 0
    bad_rewards: int = 0
    out_of_range: int = 0
    masked: int = 0
    masked_rows: int = 0
    masked_by_kind: dict[str, int] = field(default_factory=dict)
    unparsed_tool_calls: int = 0
    step_capped: int = 0
    idle_capped: int = 0
    aborted: int = 0
    repaired_text: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _total(values: Iterable[int | None]) -> int | None:
    """Sum of the reported counts; None when none was reported."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


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
        rewards = [float(r.reward) for r in items if r.measured]  # type: ignore[arg-type]  # a measured result has a reward
        have = bool(rewards)
        out.append(
            RowStats(
                row=row,
                line=items[0].line,
                agent=items[0].agent,
                samples=len(items),
                rewards=rewards,
                failures=sum(not r.ok for r in items),
                mean=statistics.fmean(rewards) if have else None,
                std=statistics.pstdev(rewards) if have else None,
                min=min(rewards) if have else None,
                max=max(rewards) if have else None,
                signal=(not _all_equal(rewards)) if len(rewards) >= 2 else None,
                unknown_tool_calls=_total(r.unknown_tool_calls for r in items),
                invalid_tool_arguments=_total(r.invalid_tool_arguments for r in items),
                context_overflows=sum(r.context_overflow for r in items),
                bad_rewards=sum((r.error or {}).get("code") == BAD_REWARD for r in items),
                out_of_range=sum(r.out_of_range for r in items),
                masked=sum(r.ok and r.mask_sample for r in items),
                unparsed_tool_calls=_total(r.unparsed_tool_calls for r in items),
                step_capped=sum(r.step_capped for r in items),
                idle_capped=sum(r.idle_capped for r in items),
                aborted=sum(r.aborted_calls or 0 for r in items),
                repaired_text=sum(r.repaired_text or 0 for r in items),
            )
        )
    return out


def summarize(stats: list[RowStats], results: Iterable[RolloutResult], wall_s: float) -> Summary:
    """The run summary from the per-row statistics, the raw results and the wall time (s)."""
    results = list(results)
    codes = Counter((r.error or {}).get("code", BAD_REWARD) for r in results if not r.ok)
    rewards = [float(r.reward) for r in results if r.measured]  # type: ignore[arg-type]  # a measured result has a reward
    succeeded = sum(r.ok for r in results)
    signal = sum(s.signal is True for s in stats)
    no_signal = sum(s.signal is False for s in stats)
    known = signal + no_signal
    return Summary(
        rows=len(stats),
        rollouts=len(results),
        succeeded=succeeded,
        failures=len(results) - succeeded,
        signal_rows=signal,
        no_signal_rows=no_signal,
        unknown_signal_rows=len(stats) - known,
        signal_share=signal / known if known else None,
        reward_mean=statistics.fmean(rewards) if rewards else None,
        wall_s=round(wall_s, 3),
        rollouts_per_s=round(len(results) / wall_s, 3) if wall_s > 0 and results else None,
        failures_by_code=dict(sorted(codes.items())),
        unknown_tool_calls=sum(s.unknown_tool_calls or 0 for s in stats),
        invalid_tool_arguments=sum(s.invalid_tool_arguments or 0 for s in stats),
        context_overflows=sum(s.context_overflows for s in stats),
        bad_rewards=sum(s.bad_rewards for s in stats),
        out_of_range=sum(s.out_of_range for s in stats),
        masked=sum(s.masked for s in stats),
        masked_rows=sum(s.all_masked for s in stats),
        masked_by_kind=dict(
            sorted(Counter(r.failure_kind or "unknown" for r in results if r.ok and r.mask_sample).items())
        ),
        unparsed_tool_calls=sum(s.unparsed_tool_calls or 0 for s in stats),
        step_capped=sum(s.step_capped for s in stats),
        idle_capped=sum(s.idle_capped for s in stats),
        aborted=sum(s.aborted for s in stats),
        repaired_text=sum(s.repaired_text for s in stats),
    )
