"""``dry-run --watch``: keep the environment up after the reward table and run the rows again after each edit.

The stages are the dry-run's own (:mod:`gym_runtime.dryrun.run`: :func:`prepare`, the
:class:`gym_runtime.Runtime` start, :func:`run_rows`); this module only loops over them
(docs/rollouts.md, "Watching edits"):

1. check the package, config and rows; start the environment (``keep_going``: a server that fails
   for good leaves the others up); run the rows; show the table;
2. wait for an edit (:class:`gym_runtime.dryrun.edits.Edits`, inotify, debounced until the tree
   is quiet) and sort it (:func:`gym_runtime.dryrun.edits.classify`), or for a venv rebuild to end
   (step 3);
3. an edit of a server directory's install file (``requirements.txt``, ``pyproject.toml``,
   ``overrides.txt``) starts a rebuild of that directory's venv in the background
   (:class:`gym_runtime.dryrun.rebuild.Rebuilds`): the servers keep serving on their current
   venv and the watch goes on (back to 2). Once the venv is built, the instances whose
   implementation lives there are moved onto it (:func:`gym_runtime.supervise.venv_swap.reseat`)
   and restarted (step 5); a build that failed is said as its error block and they keep their venv;
4. a config edit merges the config again and names the instances whose blocks changed
   (:func:`gym_runtime.runtime.reload.remerge`); a config or dataset edit checks the rows again
   (:func:`prepare`); an error in any of these is shown as its block and the environment keeps
   running as it was;
5. restart the instances an edit touched (:func:`gym_runtime.runtime.reload.restart`); one that
   cannot start (a syntax error) has shown its error block: the rows wait for the next edit; an
   edit after which a server uses Ray the running environment did not give it is refused first
   (:func:`gym_runtime.ray.watch.check_edited`), its block shown, the servers left as
   they were;
6. run the rows again and show the table with each row's change against the previous table
   (:mod:`gym_runtime.rollouts.compare`); back to 2. With the built-in stub model as policy, its
   per-prompt counts are reset first, so a row the edit did not touch keeps its figures.

What steps 4 and 5 (and the restart of step 3) say, the runtime's progress lines and error blocks
included, is held until they end (:class:`_Held`; the lines naming what restarts are said at
once): when files that act (step 2) changed again meanwhile (:meth:`Edits.since_last`), the servers
ran a tree that was still being written and a failure there belongs to no version of it, so what
they said is dropped for one line, no rows run, and the next edit (those files) is applied to the
quiet tree.

It runs until cancelled (Ctrl-C, SIGTERM); rebuilds still running are cancelled (nothing of them
is kept) and the environment is then stopped as after a dry-run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

from gym_runtime.dryrun.edits import Edit, Edits, classify
from gym_runtime.dryrun.rebuild import Rebuilds, Rebuilt
from gym_runtime.dryrun.run import (
    DryRunRequest,
    DryRunResult,
    Prepared,
    make_runtime,
    offers_tools,
    prepare,
    run_rows,
)
from gym_runtime.errors import GymRuntimeError, UsageError
from gym_runtime.ray import watch as watch_ray
from gym_runtime.rollouts.compare import gone_rows, row_changes
from gym_runtime.rollouts.stats import RolloutResult
from gym_runtime.runtime import reload
from gym_runtime.supervise import venv_swap
from gym_runtime.supervise.member import FAILED
from gym_runtime.supervise.options import SuperviseOptions

# show(result, changes, gone): print one table; changes is None for the first, else row index -> change
# text; gone: the previous run's rows the new one no longer has
Show = Callable[[DryRunResult, "dict[int, str] | None", int], None]


def _prepared(req: DryRunRequest) -> Prepared:
    notes: list[str] = []
    name, rows, facts = prepare(req, notes)
    return Prepared(name, rows, facts, notes)


def watch_request(req: DryRunRequest) -> DryRunRequest:
    """``req`` as the watch runs it: supervised with ``keep_going``. Raises :class:`UsageError`
    (``GR-USAGE-CONFLICT``) for ``placement="ray"``: replicas on Ray nodes are not restarted in place."""
    if req.runtime_kwargs.get("placement", "local") != "local":
        raise UsageError(
            "--watch runs the environment on this host only: it cannot be combined with --placement ray",
            code="GR-USAGE-CONFLICT",
            hint="drop --placement ray (or --watch)",
        )
    kwargs = dict(req.runtime_kwargs)
    kwargs["options"] = replace(
        kwargs.get("options") or SuperviseOptions(), keep_going=True, after_fix="then save: the watch starts it again"
    )
    return replace(req, runtime_kwargs=kwargs)


async def watch_dry_run(
    req: DryRunRequest,
    say: Callable[[str], None],
    show: Show,
    on_start: Callable[[int], None] | None = None,
    on_result: Callable[[RolloutResult], None] | None = None,
) -> NoReturn:
    """Run the dry-run, then again after every edit, until cancelled (module doc). ``say`` gets
    progress lines and error blocks; ``show`` each result. Raises what the first
    :func:`prepare` and the start raise (nothing has started then, or it is stopped again)."""
    req = watch_request(req)
    prep = _prepared(req)
    for note in prep.notes:
        say(f"note: {note}")
    out = _Held(say)
    rt = make_runtime(req, out, offers_tools(prep.rows))
    try:
        ready = await rt.start()
        package, dataset = Path(req.package).resolve(), Path(req.dataset).resolve()
        edits = Edits(package, dataset, _server_dirs(rt).values())
        async with edits:  # before the first table: an edit made while it runs is seen
            last = await run_rows(rt, req, prep, ready, on_start, on_result)
            show(last, None, 0)
            built_in = (
                f", {len(edits.trees)} built-in server tree(s) under {os.path.commonpath(edits.trees)}"
                if edits.trees
                else ""
            )
            for note in edits.notes:
                say(note)
            say(f"watching {package}{built_in} and {dataset} for edits (Ctrl-C stops)")
            rebuilds = Rebuilds(rt.env)
            events = _Events(edits, rebuilds)
            try:
                while True:
                    got = await events.next()
                    if isinstance(got, Rebuilt):
                        t0 = got.edited_at
                        with out.held():
                            run = await _swap(rt, got, out)
                    else:
                        t0 = time.perf_counter()
                        dirs = _server_dirs(rt)
                        release = rt.env.merged.release
                        edit = classify(got, package, dataset, dirs, release.server_types if release else ())
                        _start_rebuilds(rebuilds, edit, dirs, t0, say)
                        with out.held():
                            prep, run = await _apply(rt, req, edit, prep, out)
                    late = _acting(rt, edits.since_last(), package, dataset)
                    if late and (out.lines or run):
                        out.drop(
                            f"{late} file(s) changed again while this edit was applied: what its start "
                            "said is dropped and no rows run; the edit is applied again once the tree is quiet"
                        )
                        continue
                    out.flush()
                    if not run:
                        continue
                    await _fresh_samples(rt.env)
                    result = await run_rows(rt, req, prep, ready, on_start, on_result)
                    show(
                        result,
                        row_changes(result.rows, result.stats, last.rows, last.stats),
                        gone_rows(result.rows, last.rows),
                    )
                    say(f"edit to new table: {time.perf_counter() - t0:.2f}s")
                    last = result
            finally:
                await events.close()
                await rebuilds.close()
    finally:
        await rt.stop()


class _Held:
    """``say`` that holds its lines inside :meth:`held` until :meth:`flush` says them or
    :meth:`drop` replaces them by one line (module doc); outside, lines are said at once."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.lines: list[str] = []
        self._holding = False

    def __call__(self, msg: str) -> None:
        if self._holding:
            self.lines.append(msg)
        else:
            self.say(msg)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Hold the lines said inside; an error raised inside says them first (nothing is lost)."""
        self._holding = True
        try:
            yield
        except BaseException:
            self.flush()
            raise
        finally:
            self._holding = False

    def flush(self) -> None:
        lines, self.lines = self.lines, []
        for line in lines:
            self.say(line)

    def drop(self, instead: str) -> None:
        self.lines = []
        self.say(instead)

    def now(self, msg: str) -> None:
        """Say ``msg`` at once, held lines or not."""
        self.say(msg)


def _acting(rt: Any, paths: set[Path], package: Path, dataset: Path) -> int:
    """How many of ``paths`` make an edit that acts (:attr:`Edit.acts`: rows, config, a server)."""
    if not paths:
        return 0
    dirs = _server_dirs(rt)
    release = rt.env.merged.release
    types = release.server_types if release else ()
    return sum(classify([p], package, dataset, dirs, types).acts for p in paths)


async def _fresh_samples(env: Any) -> None:
    """With the built-in stub model as policy, have it count every prompt as unseen
    (``POST /stub/reset``, :mod:`gym_runtime.stub_model.app`), so each run samples as the first
    did and a row's change is the edit's own. A stub that does not answer costs only that."""
    if not env.stub_url:
        return
    import httpx

    key = env.merged.data.get("policy_api_key")
    headers = {"authorization": f"Bearer {key}"} if isinstance(key, str) and key else {}
    async with httpx.AsyncClient(trust_env=False, timeout=5.0) as client:
        with contextlib.suppress(httpx.HTTPError):
            await client.post(env.stub_url.rstrip("/").removesuffix("/v1") + "/stub/reset", headers=headers)


def _server_dirs(rt: Any) -> dict[str, Path]:
    """Server instance -> its implementation directory (in the package, or a built-in one)."""
    return {n: Path(i.server_dir.path).resolve() for n, i in rt.env.merged.instances.items()}


class _Events:
    """The watch's next event: a group of changed paths (:meth:`Edits.next`) or a finished rebuild
    (:meth:`Rebuilds.next`), whichever comes first. The other wait is kept for the next call, never
    cancelled: a cancelled :meth:`Edits.next` could drop a group it had already taken."""

    def __init__(self, edits: Edits, rebuilds: Rebuilds) -> None:
        self.edits, self.rebuilds = edits, rebuilds
        self._edit: asyncio.Future | None = None
        self._rebuilt: asyncio.Future | None = None

    async def next(self) -> set[Path] | Rebuilt:
        """A set of paths or a :class:`Rebuilt` (a finished rebuild first when both are there)."""
        self._edit = self._edit or asyncio.ensure_future(self.edits.next())
        self._rebuilt = self._rebuilt or asyncio.ensure_future(self.rebuilds.next())
        await asyncio.wait({self._edit, self._rebuilt}, return_when=asyncio.FIRST_COMPLETED)
        if self._rebuilt.done():
            done, self._rebuilt = self._rebuilt, None
        else:
            done, self._edit = self._edit, None
        return done.result()

    async def close(self) -> None:
        waits = [f for f in (self._edit, self._rebuilt) if f is not None]
        for f in waits:
            f.cancel()
        await asyncio.gather(*waits, return_exceptions=True)


def _start_rebuilds(
    rebuilds: Rebuilds, edit: Edit, dirs: dict[str, Path], edited_at: float, say: Callable[[str], None]
) -> None:
    """Start a venv rebuild for each server directory whose install files ``edit`` changed."""
    for server_dir, (names, files) in edit.rebuilds(dirs).items():
        label = ", ".join(names)
        again = rebuilds.start(server_dir, names, files, edited_at)
        why = f"{', '.join(files)} changed" + ("; the rebuild under way is cancelled" if again else "")
        say(f"rebuilding venv for {label} ({why}); {label} {_keep(names)} serving on {_their(names)} current venv")


def _keep(names: list[str]) -> str:
    return "keeps" if len(names) == 1 else "keep"


def _their(names: list[str]) -> str:
    return "its" if len(names) == 1 else "their"


async def _swap(rt: Any, done: Rebuilt, say: _Held) -> bool:
    """Move the instances of a finished rebuild onto their new venv and restart them (with any
    server that had failed: another try); returns whether to run the rows. A failed rebuild is said
    as its error block (an exception that is no :class:`GymRuntimeError` is raised) and changes nothing."""
    label = ", ".join(done.names)
    if done.error is not None:
        if not isinstance(done.error, GymRuntimeError):
            raise done.error
        say(
            done.error.render() + f"\n({label} {_keep(done.names)} serving on {_their(done.names)} current venv; "
            "the next good edit of its install files applies)"
        )
        return False
    if not done.venvs:
        say(
            f"venv for {label}: {', '.join(done.files)} asks for the venv {label} already "
            f"{'runs' if len(done.names) == 1 else 'run'} on; nothing to restart"
        )
        return False
    sup = rt.env.supervisor
    failed = {n for n, m in sup.members.items() if m.kind == "server" and m.status == FAILED}
    names = [n for n in rt.env.merged.instances if n in done.venvs or n in failed]
    how = (
        "rebuilt"
        if any(not v.reused for v in done.venvs.values())
        else "found ready (built before from the same inputs)"
    )
    say.now(f"venv for {label} {how} in {done.seconds:.1f} s; restarting {', '.join(names)}")
    await venv_swap.reseat(rt.env, done.venvs)
    ok = await _restart(sup, names, say)  # right after the reseat (venv_swap.reseat)
    venv_swap.learn(rt.env)
    return ok


async def _restart(sup: Any, names: list[str], say: Callable[[str], None]) -> bool:
    """Restart ``names`` (:func:`reload.restart`); False, with a line saying so, when one did not start."""
    failed = await reload.restart(sup, names)
    broken = [n for n, error in failed.items() if error]
    if broken:
        say(f"not running the rows: {', '.join(broken)} did not start (its error is above); watching for the next edit")
        return False
    return True


async def _apply(rt: Any, req: DryRunRequest, edit: Edit, prep: Prepared, say: _Held) -> tuple[Prepared, bool]:
    """Bring the running environment and the rows (``prep``) in line with ``edit``; returns the rows
    from now on and whether to run them (not when there is nothing to do, or after an error whose
    block was said). An edit refused (its Ray, its config) changes nothing; rows that cannot be read
    do not keep a config merged with them from restarting the servers it changed."""
    if not edit.acts:
        return prep, False
    sup = rt.env.supervisor
    failed = {n for n, m in sup.members.items() if m.kind == "server" and m.status == FAILED}  # another try
    restart = set(edit.servers) | failed
    try:
        # first: a refused edit changes nothing (a config edit cannot change which servers use Ray)
        watch_ray.check_edited(rt.env, [n for n in rt.env.merged.instances if n in restart])
        if edit.config:
            changed = await reload.remerge(rt.env)
            say.now(
                "config merged again: "
                + (f"restarting {', '.join(changed)}" if changed else "no server instance's block changed")
            )
            restart |= set(changed)
    except GymRuntimeError as e:
        say(e.render() + "\n(the environment keeps running as it was; the next good edit applies)")
        return prep, False
    rows = True
    if edit.config or edit.rows:
        try:
            prep = _prepared(req)
            for note in prep.notes:
                say(f"note: {note}")
            say(f"dataset: {len(prep.rows)} row(s) to run")
        except GymRuntimeError as e:  # the config, merged above, still applies: its servers restart
            say(e.render() + "\n(no row runs until the next good edit of the rows or the config)")
            rows = False
    names = [n for n in rt.env.merged.instances if n in restart]
    if names:
        say.now(f"restarting {', '.join(names)}")
        if not await _restart(sup, names, say):
            return prep, False
    return prep, rows
