"""Each row's change against the previous run of the same rows (``dry-run --watch``, docs/rollouts.md).

A row of the new run is matched to the row of the previous run with the same content (the row
object as read, so an edit of the dataset that moves or rewrites rows never compares two different
prompts); its change is a short text for the table's ``change`` column:

* ``mean +0.50 std -0.10`` (differences of the mean and the standard deviation of its rewards,
  two decimals, each left out when it did not move), then ``signal gained`` / ``signal lost``
  when the row's GRPO signal (rewards that differ) appeared or went;
* ``same`` when none of these moved; ``new`` for a row the previous run did not have.

:func:`change_summary` counts the rows whose signal was gained and lost, for the line under the
table, and :func:`gone_rows` the rows of the previous run the new one no longer has.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from gym_runtime.rollouts.rows import DatasetRow
from gym_runtime.rollouts.stats import RowStats

NEW, SAME, GAINED, LOST = "new", "same", "signal gained", "signal lost"


def _key(row: DatasetRow) -> str:
    return json.dumps(row.data, sort_keys=True, default=str)


def _delta(name: str, now: float | None, before: float | None) -> str | None:
    if now is None or before is None:
        return None if now is None and before is None else f"{name} {'-' if now is None else f'{now:.2f}'}"
    d = now - before
    return None if abs(d) < 0.005 else f"{name} {d:+.2f}"


def row_change(now: RowStats, before: RowStats | None) -> str:
    """The change text of one row (module doc); ``before`` None: the row is new."""
    if before is None:
        return NEW
    parts = [p for p in (_delta("mean", now.mean, before.mean), _delta("std", now.std, before.std)) if p]
    if now.signal is True and before.signal is not True:
        parts.append(GAINED)
    elif before.signal is True and now.signal is not True:
        parts.append(LOST)
    return " ".join(parts) or SAME


def row_changes(
    rows: Sequence[DatasetRow],
    stats: Sequence[RowStats],
    prev_rows: Sequence[DatasetRow],
    prev_stats: Sequence[RowStats],
) -> dict[int, str]:
    """Row index (of ``rows``) -> its change text against the previous run (``prev_rows`` with
    ``prev_stats``); ``stats`` and ``prev_stats`` are per row, matched by ``RowStats.row``."""
    before: dict[str, RowStats] = {}
    by_row = {s.row: s for s in prev_stats}
    for r in prev_rows:
        if r.index in by_row:
            before.setdefault(_key(r), by_row[r.index])
    now = {s.row: s for s in stats}
    return {r.index: row_change(now[r.index], before.get(_key(r))) for r in rows if r.index in now}


def gone_rows(rows: Sequence[DatasetRow], prev_rows: Sequence[DatasetRow]) -> int:
    """How many rows of the previous run (``prev_rows``) have no row of the same content in ``rows``
    (a row removed or rewritten by a dataset edit; each copy counted)."""
    now = {_key(r) for r in rows}
    return sum(_key(r) not in now for r in prev_rows)


def change_summary(changes: dict[int, str]) -> dict[str, Any]:
    """``{"changed", "signal_gained", "signal_lost", "new"}``: rows counted from ``changes``."""
    values = list(changes.values())
    return {
        "changed": sum(v not in (SAME, NEW) for v in values),
        "signal_gained": sum(GAINED in v for v in values),
        "signal_lost": sum(LOST in v for v in values),
        "new": values.count(NEW),
    }
