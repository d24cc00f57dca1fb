"""What an edit touched, for ``dry-run --watch``: file events from inotify, grouped and sorted (docs/rollouts.md).

:class:`Edits` watches the package directory (recursively), the server directories outside it
that the environment runs (the runtime's built-in servers, ``servers/``: an edit there restarts its
instances as one in the package does) and the dataset file (its directory, not recursively, so an
editor that replaces the file by a rename is still seen) with
``watchfiles`` (inotify underneath, never polling). A save is several events (an editor writes a
temporary file, renames it, touches the directory): ``watchfiles`` yields a group once no event
came for :data:`QUIET_MS` milliseconds (at most :data:`MAX_GROUP_MS` after the first), and
:meth:`Edits.next` merges the groups already waiting. Editor droppings (``.swp``, ``~``, ``.#``),
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
  :mod:`gym_runtime.rollouts.rebuild`);
* any other file under a server directory (the package's or a built-in one) -> ``servers``: the
  server instances whose implementation lives there (restarted);
* anything else -> ``ignored``.
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

QUIET_MS = 100  # a group ends after this long without an event
MAX_GROUP_MS = 1600  # ... or this long after its first event
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


class Edits:
    """Changed paths under ``package``, under each of ``trees`` (server directories outside it) and
    the ``dataset`` file, one debounced group at a time.

    Use as an async context manager (entered, the watches are set: an edit made after that is
    never missed); :meth:`next` -> the set of changed paths. Leaving it stops
    the watchers at once (their threads see the stop event within :data:`QUIET_MS`)."""

    def __init__(self, package: Path, dataset: Path, trees: Iterable[Path] = ()) -> None:
        self.package, self.dataset = package, dataset
        self.trees = sorted({t for t in trees if not _under(t, package)})
        self._stop = threading.Event()  # watchfiles' thread reads it (is_set)
        self._q: asyncio.Queue[set[Path]] = asyncio.Queue()
        self._tasks: list[asyncio.Task] = []

    async def __aenter__(self) -> Edits:
        from watchfiles import awatch

        dataset = self.dataset

        async def pump(*paths: Path, recursive: bool = True, only: Path | None = None) -> None:
            async for changes in awatch(
                *paths,
                recursive=recursive,
                step=QUIET_MS,
                debounce=MAX_GROUP_MS,
                stop_event=self._stop,
                watch_filter=_Droppings(paths) if only is None else lambda _c, p: Path(p) == only,
            ):
                if got := _lasting(changes):
                    self._q.put_nowait(got)

        self._tasks = [
            asyncio.create_task(pump(self.package, *self.trees)),
            asyncio.create_task(pump(dataset.parent, recursive=False, only=dataset)),
        ]
        # One turn of the loop runs each task up to its first wait, and awatch sets its inotify watches
        # (RustNotify) before that wait: from here on no edit is missed, however busy the host.
        await asyncio.sleep(0)
        return self

    async def next(self) -> set[Path]:
        """The paths of the next group, merged with any groups already waiting. Raises the error of a
        watcher that ended (a directory that cannot be watched)."""
        getter = asyncio.ensure_future(self._q.get())
        done, _ = await asyncio.wait([getter, *self._tasks], return_when=asyncio.FIRST_COMPLETED)
        if getter not in done:
            getter.cancel()
            for t in done:
                t.result()  # a watcher failed: its error; or it ended
            raise RuntimeError("the file watcher stopped")
        paths = getter.result()
        while not self._q.empty():
            paths |= self._q.get_nowait()
        return paths

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
