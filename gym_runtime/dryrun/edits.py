"""What an edit touched, for ``dry-run --watch``: file events from inotify, grouped and sorted (docs/rollouts.md).

:class:`Edits` watches the package directory (recursively), the server directories outside it
that the environment runs (the runtime's built-in servers, ``servers/``: an edit there restarts its
instances as one in the package does) and the dataset file (its directory, not recursively, so an
editor that replaces the file by a rename is still seen) with
``watchfiles`` (inotify underneath; polling every :data:`~gym_runtime.dryrun.watch_limits.POLL_S`
seconds, with a warning in :attr:`Edits.notes`, where this user's inotify instances or watches are
used up: :mod:`gym_runtime.dryrun.watch_limits`). A save is several events (an editor writes a
temporary file, renames it, touches the directory): ``watchfiles`` yields a group once no event
came for :data:`QUIET_MS` milliseconds (at most :data:`MAX_GROUP_MS` after the first).

:meth:`Edits.next` then waits until the tree is quiet: a ``git checkout``, a rebase or a formatter
writes many files over seconds, and a tree taken part-way through is no version of it. The edit
ends once no group came for :data:`SETTLE_MS`, a window that grows to twice the longest gap seen
between its groups (at most :data:`SETTLE_MAX_MS`; a group that came while the watch applied the
previous edit, within that long of its last group, carries that gap over), while a git repository holding a watched tree has
its ``index.lock`` (a git command writing the tree; one older than :data:`LOCK_STALE_S` was left
by a git that died and is not waited for), and at most :data:`SETTLE_LIMIT_S` after its first
group. :meth:`Edits.since_last` gives what changed after the last edit was taken, so the watch can
tell that the tree changed again while it restarted a server. A file name that is not UTF-8, which ``watchfiles`` refuses to decode, is
carried as the name ``os.fsdecode`` gives (``surrogateescape``), and the watch goes on. Any other
failure of a watcher (a directory that cannot be watched, at the start or later) is
:class:`~gym_runtime.errors.StartError` ``GR-START-WATCH-FILES`` naming the directories and the
system's words.

Editor droppings (``.swp``, ``~``, ``.#``),
``__pycache__`` and ``.pyc`` files are left out by ``watchfiles``' default filter (:class:`_Droppings`), and a file
made and removed within one group (an editor's or ``sed -i``'s temporary file) is no edit.

:func:`classify` sorts the changed paths of one group into an :class:`Edit`:

* the dataset file -> ``rows`` (re-read);
* the manifest, a YAML file under a ``configs/`` directory, or a ``.py`` or install file under a
  server folder of the package (``{server_type}/{implementation}/``) that no running server is
  from (an ``app.py`` added next to the configs of a built-in implementation) -> ``config``
  (merged again: an instance whose implementation moves is named by ``GR-CONFIG-WATCH-RESTART``);
* an install file (``requirements.txt``, ``pyproject.toml``, ``overrides.txt``) at the top of a
  server directory -> ``requirements`` (that directory's venv is rebuilt in the background,
  :mod:`gym_runtime.dryrun.rebuild`);
* any other file under a server directory (the package's or a built-in one) -> ``servers``: the
  server instances whose implementation lives there (restarted);
* anything else -> ``ignored``.
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gym_runtime.errors import StartError

QUIET_MS = 100  # a group ends after this long without an event
MAX_GROUP_MS = 1600  # ... or this long after its first event
SETTLE_MS = 300  # an edit ends once no file changed for this long ...
SETTLE_MAX_MS = 3000  # ... or for twice the longest gap between its groups, at most this long
SETTLE_LIMIT_S = 30.0  # a tree still changing this long after an edit began is taken as it is
LOCK_STALE_S = 30.0  # a git index.lock older than this was left by a git that died
MANIFEST = "nemo-environment.yaml"
INSTALL_FILES = ("requirements.txt", "pyproject.toml", "overrides.txt")  # what a server's venv is built from


@dataclass
class Edit:
    """One group of changes, sorted (module doc); paths are absolute."""

    rows: bool = False
    config: bool = False
    servers: set[str] = field(default_factory=set)
    requirements: set[Path] = field(default_factory=set)
    ignored: set[Path] = field(default_factory=set)

    @property
    def acts(self) -> bool:
        """Whether the edit asks for anything now: rows, config or a server restart (a venv
        rebuild, ``requirements``, acts once it has ended)."""
        return self.rows or self.config or bool(self.servers)

    def rebuilds(self, server_dirs: Mapping[str, Path]) -> dict[Path, tuple[list[str], list[str]]]:
        """Server directory -> (its instances in ``server_dirs`` order, the names of its install
        files this edit changed), for each directory whose venv the edit asks to rebuild."""
        out: dict[Path, tuple[list[str], list[str]]] = {}
        for p in sorted(self.requirements):
            names = [n for n, d in server_dirs.items() if d == p.parent]
            if names:
                out.setdefault(p.parent, (names, []))[1].append(p.name)
        return out


def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def classify(
    paths: Iterable[Path],
    package: Path,
    dataset: Path,
    server_dirs: Mapping[str, Path],
    server_types: Iterable[str] = (),
) -> Edit:
    """Sort ``paths`` (module doc). ``server_dirs``: server instance -> its implementation
    directory; ``package`` and ``dataset`` resolved; ``server_types``: the release's server type
    folders (``resources_servers``, ...)."""
    edit = Edit()
    types = set(server_types)
    for p in paths:
        p = p.resolve()
        owners = {n for n, d in server_dirs.items() if _under(p, d)}
        inside = p.relative_to(package).parts if _under(p, package) else ()
        if p == dataset:
            edit.rows = True
        elif p == package / MANIFEST or (p.suffix in (".yaml", ".yml") and "configs" in inside):
            edit.config = True
        elif not owners and len(inside) > 2 and inside[0] in types and (p.suffix == ".py" or p.name in INSTALL_FILES):
            edit.config = True  # code in a server folder no running server is from (an app.py added over a built-in)
        elif owners and p.name in INSTALL_FILES and any(p.parent == server_dirs[n] for n in owners):
            edit.requirements.add(p)
        elif owners:
            edit.servers |= owners
        else:
            edit.ignored.add(p)
    return edit


class _Droppings:
    """``watchfiles``' default filter (its ``DefaultFilter`` lists: ``__pycache__``, ``.git``, ...
    directories; ``.pyc``, ``.swp``, ``~``, ``.#`` files) applied to each path below the watched
    root it is under: the default looks at every part of the absolute path, so a runtime installed
    in a ``.venv`` would have had its built-in server trees filtered out whole."""

    def __init__(self, roots: Iterable[Path]) -> None:
        from watchfiles import DefaultFilter

        self.roots = sorted((Path(r) for r in roots), key=lambda r: len(r.parts), reverse=True)
        self.dirs = set(DefaultFilter.ignore_dirs)
        self.names = [re.compile(p) for p in DefaultFilter.ignore_entity_patterns]

    def __call__(self, _change: Any, path: str) -> bool:
        p = Path(path)
        root = next((r for r in self.roots if _under(p, r)), p.parent)
        return not (
            any(part in self.dirs for part in p.relative_to(root).parts) or any(r.search(p.name) for r in self.names)
        )


def _lasting(changes: Iterable[tuple[Any, str]]) -> set[Path]:
    """The paths of one group of ``(Change, path)`` events, less those made and removed within it
    that are gone (an editor's or ``sed -i``'s temporary file, renamed over the file it saves)."""
    from watchfiles import Change

    seen: dict[Path, set[Any]] = {}
    for change, p in changes:
        seen.setdefault(Path(p), set()).add(change)
    return {p for p, kinds in seen.items() if not ({Change.added, Change.deleted} <= kinds and not os.path.lexists(p))}


def _git_dirs(roots: Iterable[Path]) -> list[Path]:
    """The git directories of the repositories holding ``roots`` (a ``.git`` directory, or the one a
    ``.git`` file of a worktree or submodule names with ``gitdir:``)."""
    out: set[Path] = set()
    for root in roots:
        for d in (root, *root.parents):
            dot = d / ".git"
            if dot.is_dir():
                out.add(dot)
            elif dot.is_file():
                text = dot.read_text(errors="replace").strip()
                if text.startswith("gitdir:"):
                    out.add((d / text.removeprefix("gitdir:").strip()).resolve())
            else:
                continue
            break
    return sorted(out)


def _rust_debug_bytes(text: str) -> bytes:
    """The bytes of a path as Rust's ``Debug`` writes it (``\\xE9`` for a byte that is not UTF-8,
    ``\\u{..}``, ``\\n``, ``\\"``...)."""
    out, i = bytearray(), 0
    while i < len(text):
        c = text[i]
        if c != "\\" or i + 1 == len(text):
            out += c.encode("utf-8", "surrogateescape")
            i += 1
        elif text[i + 1] == "x":
            out.append(int(text[i + 2 : i + 4], 16))
            i += 4
        elif text[i + 1] == "u":
            end = text.index("}", i)
            out += chr(int(text[i + 3 : end], 16)).encode()
            i = end + 1
        else:
            out += {"n": b"\n", "t": b"\t", "r": b"\r", "0": b"\0"}.get(text[i + 1], text[i + 1].encode())
            i += 2
    return bytes(out)


def _alone(exc: BaseException) -> BaseException:
    """``exc`` out of the exception groups that hold it alone (``watchfiles`` raises a watcher's
    error from an anyio task group)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _undecodable(exc: BaseException) -> Path | None:
    """The path of ``watchfiles``' "Unable to decode path" error (a file name that is not UTF-8), as
    ``os.fsdecode`` gives it (``surrogateescape``); ``None`` for any other error."""
    exc = _alone(exc)
    found = re.fullmatch(r'Unable to decode path "(.*)" to string', str(exc), re.S)
    if not isinstance(exc, RuntimeError) or not found:
        return None
    try:
        return Path(os.fsdecode(_rust_debug_bytes(found.group(1))))
    except (ValueError, IndexError):
        return None


class Edits:
    """Changed paths under ``package``, under each of ``trees`` (server directories outside it) and
    the ``dataset`` file, one edit (module doc: debounced groups, then a quiet tree) at a time.

    Use as an async context manager (entered, the watches are set: an edit made after that is
    never missed; :attr:`notes` holds the warning of a watch that polls); :meth:`next` -> the set of
    changed paths; :meth:`since_last` what changed after it. Leaving it stops the watchers at once
    (their threads see the stop event within :data:`QUIET_MS`)."""

    def __init__(self, package: Path, dataset: Path, trees: Iterable[Path] = ()) -> None:
        self.package, self.dataset = package, dataset
        self.trees = sorted({t for t in trees if not _under(t, package)})
        self.notes: list[str] = []
        self._since: set[Path] = set()  # what came after the last edit was taken (since_last)
        self._stop = threading.Event()  # watchfiles' thread reads it (is_set)
        self._q: asyncio.Queue[tuple[float, set[Path]]] = asyncio.Queue()  # (loop time it came, paths)
        self._getter: asyncio.Future | None = None
        self._tasks: list[asyncio.Task] = []
        self._specs: list[tuple[tuple[Path, ...], dict[str, Any]]] = []  # each watcher's paths, options
        self._last = float("-inf")  # when the last group of the previous edit came
        self._git: list[Path] = []

    async def _pump(self, *paths: Path, recursive: bool = True, only: Path | None = None, poll: bool = False) -> None:
        from watchfiles import awatch

        from gym_runtime.dryrun.watch_limits import POLL_S

        keep = _Droppings(paths) if only is None else (lambda _c, p: Path(p) == only)
        loop = asyncio.get_running_loop()
        while True:
            try:
                async for changes in awatch(
                    *paths,
                    recursive=recursive,
                    step=QUIET_MS,
                    debounce=MAX_GROUP_MS,
                    stop_event=self._stop,
                    watch_filter=keep,
                    force_polling=poll,
                    poll_delay_ms=int(POLL_S * 1000),
                ):
                    if got := _lasting(changes):
                        self._since |= got
                        self._q.put_nowait((loop.time(), got))
                return
            except Exception as e:  # a name watchfiles cannot decode ended its watch: carry it, watch again
                odd = _undecodable(e)
                if odd is None or self._stop.is_set():
                    raise
                if keep(None, str(odd)):
                    self._since.add(odd)
                    self._q.put_nowait((loop.time(), {odd}))

    async def __aenter__(self) -> Edits:
        from gym_runtime.dryrun.watch_limits import exhausted

        self._git = _git_dirs([self.package, *self.trees])
        specs: list[tuple[tuple[Path, ...], dict[str, Any]]] = [
            ((self.package, *self.trees), {}),
            ((self.dataset.parent,), {"recursive": False, "only": self.dataset}),
        ]
        self._specs = specs
        self._tasks = [asyncio.create_task(self._pump(*paths, **kw)) for paths, kw in specs]
        # One turn of the loop runs each task up to its first wait, and awatch sets its inotify watches
        # (RustNotify) before that wait: from here on no edit is missed, however busy the host.
        await asyncio.sleep(0)
        polled = False
        for i, t in enumerate(self._tasks):
            exc = t.exception() if t.done() and not t.cancelled() else None
            why = exhausted(_alone(exc)) if exc is not None else None
            if why:  # this user's inotify instances or watches are used up: poll instead
                if why not in self.notes:
                    self.notes.append(why)
                paths, kw = specs[i]
                self._tasks[i] = asyncio.create_task(self._pump(*paths, **kw, poll=True))
                polled = True
        if polled:
            await asyncio.sleep(0)
        for i, t in enumerate(self._tasks):
            if t.done():
                await self.__aexit__()
                raise self._failed(i)
        return self

    def _failed(self, i: int) -> StartError:
        """``GR-START-WATCH-FILES`` for the watcher ``i`` that ended (module doc)."""
        from gym_runtime.dryrun.watch_limits import exhausted

        t = self._tasks[i]
        exc = None if t.cancelled() else t.exception()
        exc = _alone(exc) if exc is not None else None
        where = ", ".join(str(p) for p in self._specs[i][0])
        return StartError(
            f"dry-run --watch cannot watch {where} for edits: "
            + (f"{type(exc).__name__}: {exc}" if exc is not None else "the file watcher stopped"),
            code="GR-START-WATCH-FILES",
            hint=(exhausted(exc) if exc is not None else None)
            or "check that each directory exists and can be read, then start the watch again",
            extra={"stage": "watch"},
        )

    async def _take(self, timeout: float | None) -> tuple[float, set[Path]] | None:
        """The next group with the loop time it came, or ``None`` after ``timeout`` seconds. A wait
        that times out is kept for the next call (a dropped one could take a group and lose it).
        Raises :class:`StartError` ``GR-START-WATCH-FILES`` for a watcher that ended."""
        if self._getter is None:
            if not self._q.empty():
                return self._q.get_nowait()
            self._getter = asyncio.ensure_future(self._q.get())
        done, _ = await asyncio.wait([self._getter, *self._tasks], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if self._getter in done:
            got, self._getter = self._getter.result(), None
            return got
        for i, t in enumerate(self._tasks):
            if t in done:  # a watcher failed or ended
                raise self._failed(i)
        return None

    def _locked(self) -> bool:
        """Whether a git command holds the index of a repository a watched tree is in (module doc)."""
        for g in self._git:
            try:
                if time.time() - (g / "index.lock").stat().st_mtime < LOCK_STALE_S:
                    return True
            except OSError:
                continue
        return False

    async def next(self) -> set[Path]:
        """The paths of the next edit, once the tree is quiet (module doc). Raises :class:`StartError`
        ``GR-START-WATCH-FILES`` for a watcher that ended (a directory that cannot be watched)."""
        loop = asyncio.get_running_loop()
        called = loop.time()
        first = await self._take(None)
        if first is None:  # only after a timeout, and there is none
            return set()
        began = last = first[0]
        paths = set(first[1])
        # a group that came while the watch applied the previous edit goes on with that one's pace
        gap = began - self._last if began < called and began - self._last < SETTLE_MAX_MS / 1000 else 0.0
        while True:
            window = min(SETTLE_MAX_MS, max(SETTLE_MS, 2000 * gap)) / 1000
            now = loop.time()
            left = last + window - now
            waiting = (self._getter is not None and self._getter.done()) or not self._q.empty()
            if not waiting and (now - began >= SETTLE_LIMIT_S or (left <= 0 and not self._locked())):
                break
            got = await self._take(0 if waiting else max(left, QUIET_MS / 1000))
            if got is not None:
                gap, last = max(gap, got[0] - last), max(last, got[0])
                paths |= got[1]
        self._last = last
        self._since = set()
        return paths

    def since_last(self) -> set[Path]:
        """The paths that changed after :meth:`next` last returned (they are its next edit too)."""
        return set(self._since)

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        waits = [*self._tasks, *([self._getter] if self._getter else [])]
        for t in waits:
            t.cancel()
        await asyncio.gather(*waits, return_exceptions=True)
