"""How a dry-run is shown: the rich reward table, its summary, and the same as one JSON object.

Table columns (one row per dataset row): row, line, agent, k, mean, std, min, max, fail(ures),
signal ("yes"; "no GRPO signal" when the k rewards are all equal; "unknown" with fewer than two
rewards). It fits 80 columns for agent names up to ~20 characters. The summary gives the share of
signal-bearing rows, rollouts per second and failures by error code (DESIGN.md §9, issue 7).
"""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from gym_runtime.rollouts.stats import NO_SIGNAL, RowStats, Summary


def _num(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def build_table(stats: list[RowStats], title: str | None = None) -> Table:
    """The per-row reward table (a :class:`rich.table.Table`)."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  collapse_padding=True)
    for name, justify in (("row", "right"), ("line", "right"), ("agent", "left"), ("k", "right"),
                          ("mean", "right"), ("std", "right"), ("min", "right"), ("max", "right"),
                          ("fail", "right"), ("signal", "left")):
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for s in stats:
        if s.signal is True:
            signal = "[green]yes[/green]"
        elif s.signal is False:
            signal = f"[yellow]{NO_SIGNAL}[/yellow]"
        else:
            signal = "[dim]unknown[/dim]"
        fails = f"[red]{s.failures}[/red]" if s.failures else "0"
        table.add_row(str(s.row), str(s.line), s.agent, str(s.samples), _num(s.mean), _num(s.std), _num(s.min),
                      _num(s.max), fails, signal)
    return table


def summary_lines(summary: Summary) -> list[str]:
    """Human summary lines (rich markup) printed under the table."""
    share = "-" if summary.signal_share is None else f"{summary.signal_share:.0%}"
    lines = [
        f"rows: {summary.rows}  rollouts: {summary.rollouts}  succeeded: {summary.succeeded}  "
        f"failed: {summary.failures}",
        f"rows with GRPO signal: {summary.signal_rows}/{summary.signal_rows + summary.no_signal_rows} ({share})"
        + (f"  unknown: {summary.unknown_signal_rows}" if summary.unknown_signal_rows else ""),
        f"mean reward: {_num(summary.reward_mean, 3)}  wall: {summary.wall_s:.2f} s  "
        f"rollouts/s: {_num(summary.rollouts_per_s, 2)}",
    ]
    if summary.failures_by_code:
        lines.append("[red]failures by code:[/red] " + ", ".join(f"{c}: {n}"
                                                                 for c, n in summary.failures_by_code.items()))
    if summary.no_signal_rows:
        lines.append(f"[yellow]{summary.no_signal_rows} row(s) give GRPO no signal: all their rewards are equal; "
                     "make those prompts harder/easier or drop them[/yellow]")
    return lines


def print_report(console: Console, stats: list[RowStats], summary: Summary, title: str | None = None) -> None:
    """Print the table and the summary to ``console``."""
    console.print(build_table(stats, title))
    for line in summary_lines(summary):
        console.print(line, highlight=False)


def report_dict(stats: list[RowStats], summary: Summary, **extra: Any) -> dict[str, Any]:
    """The ``--json`` object: ``{**extra, "rows": [...], "summary": {...}}``."""
    return {**extra, "rows": [s.to_dict() for s in stats], "summary": summary.to_dict()}
