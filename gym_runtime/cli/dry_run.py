"""``gym-runtime dry-run PKG --dataset ROWS.jsonl``: rollouts against a stub or real model, reward spread per row.

Every row is checked before anything starts (docs/architecture.md §9). The environment is brought up with
:class:`gym_runtime.Runtime` (the built-in stub model unless ``--policy-base-url`` is given), each
row is sent ``--samples`` times to its agent's ``/run``, every result goes to ``--out``, and the
environment is shut down. With ``--placement ray --ray-address ADDR`` the servers run as replicas
on the nodes of that Ray cluster (docs/scale-out.md) and are ended there at the end; rows spread
over an agent's replicas, at most ``--max-concurrent-rollouts`` in flight (``--concurrency`` is its
deprecated alias), and the report counts the rollouts of each replica. stdout: the reward table
and the replica table (or one JSON object with ``--json``); stderr:
start-up progress and a progress bar. Exit 0 when every rollout ran, 3 when any failed (or a row had
every sample masked by its resources server), 1 for a bad
package / config / row (nothing started), 2 for bad flags. With ``--watch`` the environment stays
up after the table and the rows run again after each edit (:mod:`gym_runtime.dryrun.watch`),
each table with a ``change`` column, until Ctrl-C or SIGTERM (exit 130, everything stopped).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gym_runtime.cli.common import (
    add_liveness_args,
    add_package_args,
    add_policy_args,
    liveness_from_args,
    policy_from_args,
    stdout_for_the_command,
)
from gym_runtime.errors import EXIT_OK, EXIT_RUNTIME, RolloutError, UsageError
from gym_runtime.rollouts import ROLLOUT_TIMEOUT_S
from gym_runtime.supervise.options import SuperviseOptions

if TYPE_CHECKING:  # rich and the rollout machinery load only when a dry run runs
    from rich.console import Console

    from gym_runtime.dryrun.run import DryRunRequest, DryRunResult


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dry-run", help="run dataset rows k times against the environment and report reward spread")
    add_package_args(p)
    p.add_argument(
        "--dataset",
        type=Path,
        metavar="ROWS.jsonl",
        help="dataset rows, one JSON object per line "
        "(default: PKG.jsonl next to the package directory, the layout of examples/)",
    )
    p.add_argument("--samples", "-k", type=int, default=4, metavar="K", help="rollouts per row (default 4)")
    p.add_argument("--limit", type=int, metavar="N", help="only the first N rows (all rows are still checked)")
    p.add_argument(
        "--max-concurrent-rollouts", type=int, metavar="N", help="rollouts in flight (default: 32 per agent replica)"
    )
    p.add_argument("--concurrency", type=int, metavar="C", help="deprecated alias of --max-concurrent-rollouts")
    p.add_argument(
        "--rollout-timeout",
        type=float,
        default=ROLLOUT_TIMEOUT_S,
        metavar="S",
        help="seconds per rollout; a rollout past it fails with GR-ROLLOUT-DEADLINE (default %(default)g; 0: no limit)",
    )
    p.add_argument(
        "--out",
        type=Path,
        metavar="results.jsonl",
        help="write every rollout (row, sample, reward, latency, error) as JSONL",
    )
    p.add_argument("--json", action="store_true", help="print the report as one JSON object on stdout")
    p.add_argument(
        "--watch",
        action="store_true",
        help="after the table keep the environment up; on each edit "
        "of a server's tree, a config or the dataset restart what it touched (a server's requirements: "
        "rebuild its venv in the background first), run the rows again and print the table with each "
        "row's change (docs/rollouts.md); Ctrl-C stops",
    )
    add_policy_args(p)
    g = p.add_argument_group("environment")
    g.add_argument("--stub-seed", type=int, default=0, metavar="N", help="seed of the built-in stub model (default 0)")
    g.add_argument("--python", help="interpreter for server venvs (version or path)")
    g.add_argument("--isolation", choices=["full", "partial", "none"], help="force a lower isolation level")
    g.add_argument(
        "--work-dir", type=Path, metavar="DIR", help="run directory for logs (default $GYM_RUNTIME_HOME/runs/<time>)"
    )
    g.add_argument(
        "--placement",
        choices=["local", "ray"],
        default="local",
        help="where servers run: this host (default), or nodes of the --ray-address cluster "
        "(docs/scale-out.md); the environment is brought down on every node at the end",
    )
    g.add_argument("--ray-address", metavar="ADDR", help="Ray cluster: host:port (GCS), 'auto' or 'local'")
    g.add_argument(
        "--sandbox-backend",
        choices=["local", "opensandbox"],
        default=None,
        help="where servers are sandboxed: local (namespaces on this host, the default) or opensandbox "
        "(the operator's OpenSandbox server, OPENSANDBOX_*); default GYM_RUNTIME_SANDBOX_BACKEND or local",
    )
    d = SuperviseOptions()
    g = p.add_argument_group("supervision (as for up)")
    g.add_argument(
        "--ready-timeout",
        type=float,
        default=d.server_ready_timeout_s,
        metavar="S",
        help="per-server seconds until GET / answers (default %(default)s)",
    )
    g.add_argument(
        "--startup-timeout",
        type=float,
        default=d.startup_timeout_s,
        metavar="S",
        help="whole start-up, seconds (default %(default)s)",
    )
    add_liveness_args(g)
    p.set_defaults(func=run)


def default_dataset(package: str) -> Path:
    """``<package dir>.jsonl`` beside the package; :class:`UsageError` when there is none."""
    candidate = Path(package).resolve().with_name(Path(package).resolve().name + ".jsonl")
    if not candidate.is_file():
        raise UsageError(
            f"--dataset is required: no {candidate.name} next to the package",
            hint="pass --dataset ROWS.jsonl (dataset rows never live inside a package)",
        )
    return candidate


def request_from_args(args: argparse.Namespace) -> DryRunRequest:
    from gym_runtime.dryrun.run import DryRunRequest

    if args.dataset is None:
        args.dataset = default_dataset(args.package)
    runtime = {
        k: v
        for k, v in (
            ("python", args.python),
            ("isolation", args.isolation),
            ("work_dir", args.work_dir),
            ("placement", args.placement),
            ("ray_address", args.ray_address),
            ("sandbox_backend", args.sandbox_backend),
        )
        if v is not None
    }
    runtime["options"] = SuperviseOptions(
        server_ready_timeout_s=args.ready_timeout,
        startup_timeout_s=args.startup_timeout,
        probe_policy=args.probe_policy,
        **liveness_from_args(args),
    )
    return DryRunRequest(
        args.package,
        args.dataset,
        list(args.overrides),
        policy_from_args(args),
        args.samples,
        args.limit,
        max_concurrent_rollouts(args),
        args.rollout_timeout or None,
        args.out,
        args.stub_seed,
        runtime,
    )


def max_concurrent_rollouts(args: argparse.Namespace) -> int | None:
    """``--max-concurrent-rollouts``, or the deprecated ``--concurrency`` (with a note on stderr);
    :class:`UsageError` ``GR-USAGE-CONFLICT`` when both are given with different values."""
    new, old = args.max_concurrent_rollouts, args.concurrency
    if old is None:
        return new
    if new is not None and new != old:
        raise UsageError(
            f"--concurrency {old} and --max-concurrent-rollouts {new} conflict: the first is the "
            "deprecated name of the second",
            code="GR-USAGE-CONFLICT",
            hint="keep --max-concurrent-rollouts only",
        )
    print("note: --concurrency is deprecated; use --max-concurrent-rollouts (same meaning)", file=sys.stderr)
    return old


def progress_line(console: Any) -> Callable[[str], None]:
    """``say(msg)`` for ``console`` (a :class:`rich.console.Console`): the time, dimmed, then ``msg``
    as written; dropped once the console cannot be written (its terminal went away: SIGHUP's case). ``msg`` is never read as rich markup: it carries servers' log lines (an error
    block's cause), where ``[gym-runtime ...]`` notes, ``[INFO]`` or a stray ``[/x]`` are text."""
    from rich.markup import escape

    def say(msg: str) -> None:
        try:
            console.print(
                f"[dim][{time.strftime('%H:%M:%S')}][/dim] {escape(msg)}", markup=True, highlight=False, soft_wrap=True
            )
        except (OSError, ValueError):  # the terminal went away (EIO) or stderr was closed: a stop must still run
            pass

    return say


def run(args: argparse.Namespace) -> int:
    import asyncio

    import uvloop  # the daemon's loop, as for `up` (docs/performance-history.md, "Sandbox data path")
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from gym_runtime.dryrun.run import run_dry_run
    from gym_runtime.inherited import normalise

    notes = normalise()  # what the launcher left behind, made into what the daemon relies on
    req = request_from_args(args)
    err = Console(stderr=True)
    progress = Progress(
        TextColumn("rollouts"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    )
    task = progress.add_task("rollouts", total=None)

    say = progress_line(err)
    for note in notes:
        say(f"inherited: {note}")

    def on_start(total: int) -> None:
        say(f"environment ready; running {total} rollout(s)")
        progress.reset(task, total=total)
        progress.start()

    if args.watch and args.json:
        raise UsageError(
            "--watch prints a table per run; it cannot be combined with --json",
            code="GR-USAGE-CONFLICT",
            hint="drop --json (each run's rollouts can still be written with --out)",
        )
    try:
        with stdout_for_the_command() as out:  # stdout carries the report only
            advance = lambda r: progress.advance(task)  # noqa: E731 - one line, used twice below
            work: Coroutine[Any, Any, DryRunResult]  # a watch never returns: it ends by cancellation
            if args.watch:  # runs until Ctrl-C or SIGTERM (exit 130)
                from gym_runtime.dryrun.watch import watch_dry_run

                work = watch_dry_run(req, say, _shower(args, out, progress), on_start, advance)
            else:
                work = run_dry_run(req, say, on_start, advance)
            result = uvloop.run(_stoppable(work))
    except asyncio.CancelledError:  # SIGTERM or SIGINT (main() turns this into exit 130)
        raise KeyboardInterrupt("stopped by a signal") from None
    finally:
        with contextlib.suppress(OSError, ValueError):  # its last redraw, on a terminal that may be gone
            progress.stop()
    return report(result, args, err)


async def _stoppable(work: Coroutine[Any, Any, Any]) -> Any:
    """Run ``work`` so that SIGTERM, SIGINT and SIGHUP (unless it came in ignored:
    :func:`~gym_runtime.inherited.stop_signals`) cancel it: the environment is brought down by the
    cancellation, then ``CancelledError`` reaches the caller (exit 130). SIGINT is handled here too,
    as ``up`` does, not left to Python's default: a process started in the background of a
    non-interactive shell (``cmd &``) starts with SIGINT ignored, and a ``kill -INT`` then did
    nothing. (Raising from a plain signal handler instead could strike inside the event loop and hang it.)"""
    import asyncio

    from gym_runtime.inherited import stop_signals

    loop, me = asyncio.get_running_loop(), asyncio.current_task()
    assert me is not None
    stop_on = stop_signals()
    for sig in stop_on:
        loop.add_signal_handler(sig, me.cancel)
    try:
        return await work
    finally:
        for sig in stop_on:
            loop.remove_signal_handler(sig)


def _title(result: DryRunResult, args: argparse.Namespace, startup: bool = True) -> str:
    """The table's title; ``startup``: with the environment's start-up time (the first table only:
    a watch's later tables follow an edit, timed on their own line)."""
    return f"dry-run: {result.package} · {len(result.rows)} row(s) × {args.samples} sample(s)" + (
        f" · startup {result.ready.get('startup_s')} s" if startup else ""
    )


def _shower(args: argparse.Namespace, out: Any, progress: Any):
    """``--watch``'s ``show(result, changes, gone)``: each run's table on ``out`` (the real stdout),
    titled with the run's number; from the second on with the ``change`` column and a line counting
    the rows changed, whose signal was gained or lost, new, and gone (removed from the dataset)."""
    from rich.console import Console

    from gym_runtime.rollouts.compare import change_summary
    from gym_runtime.rollouts.report import print_report

    runs = [0]

    def show(result: DryRunResult, changes: dict[int, str] | None, gone: int) -> None:
        progress.stop()
        runs[0] += 1
        console = Console(file=out, width=None if out.isatty() else 160)
        print_report(
            console,
            result.stats,
            result.summary,
            f"{_title(result, args, runs[0] == 1)} · run {runs[0]}",
            result.replicas,
            result.max_concurrent_rollouts,
            changes,
        )
        if changes is not None:
            c = change_summary(changes)
            console.print(
                f"against run {runs[0] - 1}: {c['changed']} row(s) changed, signal gained in "
                f"{c['signal_gained']}, lost in {c['signal_lost']}, {c['new']} new, {gone} gone",
                highlight=False,
            )
        out.flush()

    return show


def report(result: DryRunResult, args: argparse.Namespace, err: Console) -> int:
    """Print the table (or JSON) and turn failed rollouts into exit 3."""
    from rich.console import Console

    from gym_runtime.rollouts.report import print_report, report_dict

    extra = {
        "package": result.package,
        "dataset": str(args.dataset),
        "samples": args.samples,
        "startup_s": result.ready.get("startup_s"),
        "isolation": result.ready.get("isolation"),
        "placement": result.ready.get("placement"),
        "policy_model": result.ready.get("policy_model"),
        "max_concurrent_rollouts": result.max_concurrent_rollouts,
        "replicas": result.replicas,
    }
    if args.out:
        extra["out"] = str(args.out)
    if result.notes:
        extra["notes"] = result.notes
    if args.json:
        print(json.dumps(report_dict(result.stats, result.summary, **extra), indent=2))
    else:
        title = _title(result, args)
        # off a terminal (a log, a pipe) rich would wrap the table at 80 columns: give it room instead
        print_report(
            Console(width=None if sys.stdout.isatty() else 160),
            result.stats,
            result.summary,
            title,
            result.replicas,
            result.max_concurrent_rollouts,
        )
    if result.ok:
        return EXIT_OK
    codes = ", ".join(f"{c}: {n}" for c, n in result.summary.failures_by_code.items())
    what = (
        f"{result.summary.failures} of {result.summary.rollouts} rollouts failed ({codes})"
        if result.summary.failures
        else f"{result.summary.masked_rows} row(s) had every sample masked by the "
        f"environment ({', '.join(f'{k}: {n}' for k, n in result.summary.masked_by_kind.items())})"
    )
    e = RolloutError(
        what,
        hint=(
            "see the error of each rollout in --out"
            if result.summary.failures
            else "see the failure_reason of each masked rollout in --out"
        )
        + f", and the server logs under {result.ready.get('logs_dir')}",
    )
    err.print(e.render(), markup=False, highlight=False)
    return EXIT_RUNTIME
