"""How a dry-run is shown: the rich reward table, its summary, and the same as one JSON object.

Table columns (one row per dataset row): row, line, agent, k, mean, std, min, max, fail(ures),
unk (unknown tool calls the agent refused; "-" when the agent does not count them), ctx (rollouts
stopped because the prompt no longer fit the context), bad (unusable rewards: NaN, null, a string,
missing; also counted in fail), msk (samples the environment masked, ``mask_sample``: left out of
the spread), abt (model calls the endpoint aborted, asked again), utc (tool calls left as text in
a final answer: unparsed), cap (episodes ended by ``max_steps`` or ``max_idle_turns``), signal
("yes"; "no GRPO signal" when the k rewards are all equal;
"all masked" when the environment masked every sample, ``mask_sample``;
"unknown" with fewer than two rewards; "N out of range" when rewards fall outside the resources
server's ``reward_range``). The legend printed under the table says the same. The summary gives
the share of signal-bearing rows, rollouts per
second, failures by error code, the totals of those counts and the rollouts their environment
masked (``mask_sample``, left out of the spread; docs/rollouts.md) and the code points of model
output that were no text, replaced by U+FFFD (``repaired_text``). Under it, the
replica table: one line per agent replica (replica, agent, node, rollouts, failed, rollouts/s;
:func:`gym_runtime.rollouts.spread.replica_counts`).
"""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gym_runtime.rollouts.stats import ALL_MASKED, NO_SIGNAL, RowStats, Summary


def _num(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


LEGEND = (
    "k: samples; fail: rollouts that failed; unk: calls to tools the row does not offer (refused); "
    "ctx: context-overflow stops; bad: unusable rewards; msk: samples the environment masked "
    "(mask_sample: not in mean, std, signal); abt: model calls the endpoint aborted (asked again); "
    "utc: tool calls left as text in a final answer (unparsed); cap: episodes ended by max_steps or "
    "max_idle_turns (docs/rollouts.md)"
)
COLUMNS = (
    "row",
    "line",
    "agent",
    "k",
    "mean",
    "std",
    "min",
    "max",
    "fail",
    "unk",
    "ctx",
    "bad",
    "msk",
    "abt",
    "utc",
    "cap",
    "signal",
)
UNPARSED = (
    "the policy emitted tool calls that the endpoint's parser did not parse; check --tool-call-parser "
    "(vLLM's, for this model)"
)


def build_table(stats: list[RowStats], title: str | None = None, changes: dict[int, str] | None = None) -> Table:
    """The per-row reward table (a :class:`rich.table.Table`); with ``changes`` (row index -> the
    text of :func:`gym_runtime.rollouts.compare.row_change`) a last column, ``change``, against
    the previous run (``dry-run --watch``)."""
    table = Table(
        title=escape(title) if title else None,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        padding=(0, 0),
    )
    for name in COLUMNS + (("change",) if changes is not None else ()):
        table.add_column(
            name,
            justify="left" if name in ("agent", "signal", "change") else "right",
            no_wrap=name not in ("signal", "change"),
            min_width=len(name),
            ratio=1 if name in ("signal", "change") else None,
        )
    for s in stats:
        if s.all_masked:
            signal = f"[red]{ALL_MASKED}[/red]"
        elif s.signal is True:
            signal = "[green]yes[/green]"
        elif s.signal is False:
            signal = f"[yellow]{NO_SIGNAL}[/yellow]"
        else:
            signal = "[dim]unknown[/dim]"
        if s.out_of_range:
            signal += f" [red]{s.out_of_range} out of range[/red]"
        cells = [
            str(s.row),
            str(s.line),
            escape(s.agent),
            str(s.samples),
            _num(s.mean),
            _num(s.std),
            _num(s.min),
            _num(s.max),
            _count(s.failures, "red"),
            _count(s.unknown_tool_calls, "red"),
            _count(s.context_overflows, "yellow"),
            _count(s.bad_rewards, "red"),
            _count(s.masked, "yellow"),
            _count(s.aborted, "yellow"),
            _count(s.unparsed_tool_calls, "red"),
            _count(s.step_capped + s.idle_capped, "yellow"),
            signal,
        ]
        if changes is not None:
            cells.append(changes.get(s.row, "-"))
        table.add_row(*cells)
    return table


def _count(n: int | None, colour: str) -> str:
    if n is None:
        return "-"
    return f"[{colour}]{n}[/{colour}]" if n else "0"


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
        lines.append(
            "[red]failures by code:[/red] "
            + escape(", ".join(f"{c}: {n}" for c, n in summary.failures_by_code.items()))
        )
    if summary.unknown_tool_calls or summary.invalid_tool_arguments:
        lines.append(
            f"[red]tool calls refused:[/red] {summary.unknown_tool_calls} to tools the row did not offer "
            f"(unk), {summary.invalid_tool_arguments} with arguments that are not a JSON object; the "
            "model got an error as the tool output"
        )
    if summary.context_overflows:
        lines.append(
            f"[yellow]{summary.context_overflows} rollout(s) stopped because the prompt no longer fit "
            "the model's context (ctx); they are scored, not failed[/yellow]"
        )
    if summary.bad_rewards:
        lines.append(
            f"[red]{summary.bad_rewards} reward(s) unusable (bad: NaN, null, a string or missing); "
            "see the error of each rollout in --out[/red]"
        )
    if summary.out_of_range:
        lines.append(f"[red]{summary.out_of_range} reward(s) outside the resources server's reward_range[/red]")
    if summary.masked:
        kinds = escape(", ".join(f"{k}: {n}" for k, n in summary.masked_by_kind.items()))  # environment-sent
        lines.append(
            f"[yellow]{summary.masked} rollout(s) masked by their environment (mask_sample: the reward is "
            f"no valid measurement; {kinds}); left out of the reward spread, see failure_reason in "
            "--out[/yellow]"
        )
    if summary.masked_rows:
        lines.append(
            f"[red]{summary.masked_rows} row(s) had every sample masked: the environment failed on them "
            "(a judge or sandbox down), so they measure nothing[/red]"
        )
    if summary.aborted:
        lines.append(
            f"[yellow]{summary.aborted} model call(s) cut off by the endpoint (finish_reason abort or "
            "unknown) were asked again (abt); a rollout still cut off at the model server's retry deadline "
            "failed (GR-ROLLOUT-POLICY-UNAVAILABLE), never scored[/yellow]"
        )
    if summary.unparsed_tool_calls:
        lines.append(
            f"[red]warning: {UNPARSED} ({summary.unparsed_tool_calls} tool call(s) left as text in a "
            "final answer, utc; those answers were scored as they are)[/red]"
        )
    if summary.repaired_text:
        lines.append(
            f"[yellow]{summary.repaired_text} code point(s) of model output were no text (lone surrogates, "
            "NUL, control characters) and were replaced by U+FFFD before anything encoded them "
            "(repaired_text of each rollout in --out); those rollouts were scored[/yellow]"
        )
    if summary.step_capped or summary.idle_capped:
        lines.append(
            f"[yellow]episodes ended by a cap (cap): {summary.step_capped} at max_steps, "
            f"{summary.idle_capped} after max_idle_turns turns with neither a message nor a tool call; "
            "they were scored without a final answer[/yellow]"
        )
    if summary.no_signal_rows:
        lines.append(
            f"[yellow]{summary.no_signal_rows} row(s) give GRPO no signal: all their rewards are equal; "
            "make those prompts harder/easier or drop them[/yellow]"
        )
    return lines


def replica_table(replicas: list[dict[str, Any]], bound: int | None) -> Table:
    """The per-replica table (a :class:`rich.table.Table`): who served how many rollouts, where."""
    table = Table(
        title=f"agent replicas (at most {bound} rollouts in flight)" if bound else "agent replicas",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        padding=(0, 1),
    )
    for name in ("replica", "agent", "node", "rollouts", "failed", "rollouts/s"):
        table.add_column(name, justify="left" if name in ("replica", "agent", "node") else "right", no_wrap=True)
    for r in replicas:
        table.add_row(
            escape(r["replica"]) if r["replica"] else "[dim](none: no answer)[/dim]",
            escape(r["agent"]),
            escape(r["node"] or "-"),
            str(r["rollouts"]),
            _count(r["failed"], "red"),
            _num(r["rollouts_per_s"]),
        )
    return table


def spread_shown(replicas: list[dict[str, Any]]) -> bool:
    """Whether the per-replica table says more than the row table: an agent with more than one
    replica, a replica on another node than this host, or rollouts no replica is known for."""
    agents = [r["agent"] for r in replicas]
    return (
        len(set(agents)) < len(agents)
        or any(r["node"] != "local" for r in replicas)
        or any(r["replica"] is None for r in replicas)
    )


def print_report(
    console: Console,
    stats: list[RowStats],
    summary: Summary,
    title: str | None = None,
    replicas: list[dict[str, Any]] | None = None,
    bound: int | None = None,
    changes: dict[int, str] | None = None,
) -> None:
    """Print the table (with the ``change`` column when ``changes`` is given, :func:`build_table`),
    the summary and, when :func:`spread_shown`, the per-replica table to ``console`` (``--json``
    always carries the per-replica counts). Where ``console`` is no terminal (a file, a pipe, a
    log), lines end without the spaces rich pads them with up to the table's width."""
    if console.is_terminal:
        _print_report(console, stats, summary, title, replicas, bound, changes)
        return
    with console.capture() as captured:
        _print_report(console, stats, summary, title, replicas, bound, changes)
    text = captured.get().removesuffix("\n")  # split on "\n" alone: splitlines() also splits on \x1c-\x1e
    console.out("\n".join(line.rstrip(" ") for line in text.split("\n")), highlight=False)


def _print_report(
    console: Console,
    stats: list[RowStats],
    summary: Summary,
    title: str | None,
    replicas: list[dict[str, Any]] | None,
    bound: int | None,
    changes: dict[int, str] | None,
) -> None:
    console.print(build_table(stats, title, changes))
    console.print(f"[dim]{LEGEND}[/dim]", highlight=False)
    for line in summary_lines(summary):
        console.print(line, highlight=False)
    if replicas and spread_shown(replicas):
        console.print(replica_table(replicas, bound))


def report_dict(stats: list[RowStats], summary: Summary, **extra: Any) -> dict[str, Any]:
    """The ``--json`` object: ``{**extra, "rows": [...], "summary": {...}}``."""
    return {**extra, "rows": [s.to_dict() for s in stats], "summary": summary.to_dict()}
