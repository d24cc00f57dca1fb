"""Each row's change against the previous run (dry-run --watch's ``change`` column)."""

from __future__ import annotations

from gym_runtime.rollouts.compare import change_summary, gone_rows, row_changes
from gym_runtime.rollouts.rows import DatasetRow
from gym_runtime.rollouts.stats import RolloutResult, row_stats


def _row(i: int, text: str) -> DatasetRow:
    return DatasetRow(i, i + 1, "agent", {"responses_create_params": {"input": text}})


def _stats(rewards: dict[int, list[float]]):
    return row_stats(
        [RolloutResult(r, k, r + 1, "agent", v, 0.1) for r, vs in rewards.items() for k, v in enumerate(vs)]
    )


def test_mean_spread_and_signal_changes_are_named_per_row() -> None:
    rows = [_row(0, "a"), _row(1, "b"), _row(2, "c")]
    before = _stats({0: [1.0, 1.0], 1: [0.0, 1.0], 2: [0.5, 0.5]})
    now = _stats({0: [0.0, 1.0], 1: [0.0, 0.0], 2: [0.5, 0.5]})
    changes = row_changes(rows, now, rows, before)
    assert changes == {0: "mean -0.50 std +0.50 signal gained", 1: "mean -0.50 std -0.50 signal lost", 2: "same"}
    assert change_summary(changes) == {"changed": 2, "signal_gained": 1, "signal_lost": 1, "new": 0}


def test_rows_are_matched_by_content_not_position() -> None:
    """A dataset edit that inserts a row compares each prompt with itself, and names the new one."""
    before_rows = [_row(0, "a"), _row(1, "b")]
    now_rows = [_row(0, "new prompt"), _row(1, "a"), _row(2, "b")]
    changes = row_changes(
        now_rows,
        _stats({0: [1.0, 1.0], 1: [1.0, 1.0], 2: [0.0, 0.0]}),
        before_rows,
        _stats({0: [1.0, 1.0], 1: [0.0, 0.0]}),
    )
    assert changes == {0: "new", 1: "same", 2: "same"}
    assert gone_rows(now_rows, before_rows) == 0
    assert gone_rows(before_rows[1:], now_rows) == 2  # "new prompt" and "a" are no longer there
