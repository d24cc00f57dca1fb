"""``dry-run --watch``: keep the environment up after the reward table and run the rows again after each edit.

The stages are the dry-run's own (:mod:`gym_runtime.rollouts.dryrun`: :func:`prepare`, the
:class:`gym_runtime.Runtime` start, :func:`run_rows`); this module only loops over them
(docs/rollouts.md, "Watching"):

1. check the package, config and rows; start the environment (``keep_going``: a server that fails
   for good leaves the others up); run the rows; show the table;
2. wait for an edit (:class:`gym_runtime.rollouts.edits.Edits`, inotify, debounced) and sort it
   (:func:`gym_runtime.rollouts.edits.classify`);
3. a config edit merges the config again and names the instances whose blocks changed
   (:func:`gym_runtime.supervise.reload.remerge`); a config or dataset edit checks the rows again
   (:func:`prepare`); a requirements edit is said and not applied (its venv is not rebuilt while
   watching); an error in any of these is shown as its block and the environment keeps running
   as it was;
4. restart the instances an edit touched (:func:`gym_runtime.supervise.reload.restart`); one that
   cannot start (a syntax error) has shown its error block: the rows wait for the next edit;
5. run the rows again and show the table with each row's change against the previous table
   (:mod:`gym_runtime.rollouts.compare`); back to 2.

It runs until cancelled (Ctrl-C, SIGTERM); the environment is then stopped as after a dry-run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from gym_runtime.errors import GymRuntimeError, UsageError
from gym_runtime.rollouts.compare import row_changes
from gym_runtime.rollouts.dryrun import (DryRunRequest, DryRunResult, Prepared, make_runtime, offers_tools, prepare,
                                         run_rows)
from gym_runtime.rollouts.edits import Edit, Edits, classify
from gym_runtime.rollouts.stats import RolloutResult
from gym_runtime.supervise import reload
from gym_runtime.supervise.member import FAILED
from gym_runtime.supervise.options import SuperviseOptions

# show(result, changes): print one table; changes is None for the first, else row index -> change text
Show = Callable[[DryRunResult, "dict[int, str] | None"], None]


def _prepared(req: DryRunRequest) -> Prepared:
    notes: list[str] = []
    name, rows, facts = prepare(req, notes)
    return Prepared(name, rows, facts, notes)


def watch_request(req: DryRunRequest) -> DryRunRequest:
    """``req`` as the watch runs it: supervised with ``keep_going``. Raises :class:`UsageError`
    (``GR-USAGE-CONFLICT``) for ``placement="ray"``: replicas on Ray nodes are not restarted in place."""
    if req.runtime_kwargs.get("placement", "local") != "local":
        raise UsageError("--watch runs the environment on this host only: it cannot be combined with --placement ray",
                         code="GR-USAGE-CONFLICT", hint="drop --placement ray (or --watch)")
    kwargs = dict(req.runtime_kwargs)
    kwargs["options"] = replace(kwargs.get("options") or SuperviseOptions(), keep_going=True)
    return replace(req, runtime_kwargs=kwargs)


async def watch_dry_run(req: DryRunRequest, say: Callable[[str], None], show: Show,
                        on_start: Callable[[int], None] | None = None,
                        on_result: Callable[[RolloutResult], None] | None = None) -> None:
    """Run the dry-run, then again after every edit, until cancelled (module doc). ``say`` gets
    progress lines and error blocks; ``show`` each result. Raises what the first
    :func:`prepare` and the start raise (nothing has started then, or it is stopped again)."""
    req = watch_request(req)
    prep = _prepared(req)
    for note in prep.notes:
        say(f"note: {note}")
    rt = make_runtime(req, say, offers_tools(prep.rows))
    try:
        ready = await rt.start()
        package, dataset = Path(req.package).resolve(), Path(req.dataset).resolve()
        async with Edits(package, dataset) as edits:  # before the first table: an edit made while it runs is seen
            last = await run_rows(rt, req, prep, ready, on_start, on_result)
            show(last, None)
            say(f"watching {package} and {dataset} for edits (Ctrl-C stops)")
            while True:
                paths = await edits.next()
                t0 = time.perf_counter()
                dirs = {n: Path(i.server_dir.path).resolve() for n, i in rt.env.merged.instances.items()}
                edit = classify(paths, package, dataset, dirs)
                prep, run = await _apply(rt, req, edit, prep, say)
                if not run:
                    continue
                result = await run_rows(rt, req, prep, ready, on_start, on_result)
                show(result, row_changes(result.rows, result.stats, last.rows, last.stats))
                say(f"edit to new table: {time.perf_counter() - t0:.2f}s")
                last = result
    finally:
        await rt.stop()


async def _apply(rt: Any, req: DryRunRequest, edit: Edit, prep: Prepared, say: Callable[[str], None]
                 ) -> tuple[Prepared, bool]:
    """Bring the running environment and the rows (``prep``) in line with ``edit``; returns the rows
    from now on and whether to run them (not when there is nothing to do, or after an error whose
    block was said)."""
    for path in sorted(edit.requirements):
        say(f"{path} changed: its venv is not rebuilt while watching; the server keeps its current venv "
            "(stop with Ctrl-C and start again to rebuild it)")
    if not edit.acts:
        return prep, False
    restart = set(edit.servers)
    try:
        if edit.config:
            changed = await reload.remerge(rt.env)
            say("config merged again: " + (f"restarting {', '.join(changed)}" if changed
                                           else "no server instance's block changed"))
            restart |= set(changed)
        if edit.config or edit.rows:
            prep = _prepared(req)
            for note in prep.notes:
                say(f"note: {note}")
            say(f"dataset: {len(prep.rows)} row(s) to run")
    except GymRuntimeError as e:
        say(e.render() + "\n(the environment keeps running as it was; the next good edit applies)")
        return prep, False
    sup = rt.env.supervisor
    restart |= {n for n, m in sup.members.items() if m.kind == "server" and m.status == FAILED}  # another try
    if restart:
        names = [n for n in rt.env.merged.instances if n in restart]
        say(f"restarting {', '.join(names)}")
        failed = await reload.restart(sup, names)
        broken = [n for n, error in failed.items() if error]
        if broken:
            say(f"not running the rows: {', '.join(broken)} did not start (its error is above); "
                "watching for the next edit")
            return prep, False
    return prep, True
