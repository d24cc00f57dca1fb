"""``Edits.next`` waits until the tree is quiet, and what it does with names and limits it cannot watch.

A ``git checkout`` or a formatter writes many files over seconds; taken after the first 100 ms of
quiet, the tree was half old, half new (case C62). A file name that is not UTF-8 ended the watch
with a traceback (case C72); used-up inotify instances did too (case C63).
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from gym_runtime.dryrun.edits import Edits, _rust_debug_bytes
from gym_runtime.dryrun.watch_limits import exhausted
from gym_runtime.errors import StartError


def _tree(tmp_path: Path) -> tuple[Path, Path, Path]:
    pkg = tmp_path / "pkg"
    server = pkg / "resources_servers" / "demo"
    server.mkdir(parents=True)
    rows = tmp_path / "rows.jsonl"
    rows.write_text("{}\n")
    return pkg.resolve(), rows.resolve(), server.resolve()


async def _write(files: list[Path], gap: float) -> None:
    for i, f in enumerate(files):
        if i:
            await asyncio.sleep(gap)
        f.write_text("VERSION = 2\n")


def test_files_written_250_ms_apart_are_one_edit(tmp_path: Path) -> None:
    pkg, rows, server = _tree(tmp_path)
    parts = [server / f"part_{p}.py" for p in "abcdef"]

    async def main() -> set[Path]:
        async with Edits(pkg, rows) as edits:
            writer = asyncio.create_task(_write(parts, 0.25))
            got = await asyncio.wait_for(edits.next(), 60)
            await writer
            return got

    assert asyncio.run(main()) == set(parts)


def test_files_that_came_while_the_last_edit_was_applied_are_one_edit_at_their_pace(tmp_path: Path) -> None:
    """Files 600 ms apart: the first is an edit of its own (nothing says more will come); those that
    came while it was applied set the pace of the next, which waits for the rest of the burst."""
    pkg, rows, server = _tree(tmp_path)
    parts = [server / f"part_{p}.py" for p in "abcdef"]

    async def main() -> tuple[set[Path], set[Path]]:
        async with Edits(pkg, rows) as edits:
            writer = asyncio.create_task(_write(parts, 0.6))
            first = await asyncio.wait_for(edits.next(), 60)
            await asyncio.sleep(1.5)  # a restart
            second = await asyncio.wait_for(edits.next(), 60)
            await writer
            return first, second

    first, second = asyncio.run(main())
    assert first == {parts[0]} and second == set(parts[1:])


def test_an_edit_waits_while_git_holds_its_index_lock(tmp_path: Path) -> None:
    pkg, rows, server = _tree(tmp_path)
    (pkg / ".git").mkdir()
    lock = pkg / ".git" / "index.lock"
    lock.write_text("")

    async def main() -> tuple[set[Path], bool]:
        async with Edits(pkg, rows) as edits:
            (server / "app.py").write_text("V = 2\n")
            loop = asyncio.get_running_loop()
            loop.call_later(1.5, (server / "util.py").write_text, "V = 2\n")
            loop.call_later(2.5, lock.unlink)
            got = await asyncio.wait_for(edits.next(), 60)
            return got, lock.exists()

    got, locked = asyncio.run(main())
    assert got == {server / "app.py", server / "util.py"} and not locked


def test_an_index_lock_left_by_a_git_that_died_is_not_waited_for(tmp_path: Path) -> None:
    pkg, rows, server = _tree(tmp_path)
    (pkg / ".git").mkdir()
    lock = pkg / ".git" / "index.lock"
    lock.write_text("")
    os.utime(lock, (time.time() - 3600, time.time() - 3600))

    async def main() -> set[Path]:
        async with Edits(pkg, rows) as edits:
            (server / "app.py").write_text("V = 2\n")
            return await asyncio.wait_for(edits.next(), 20)  # the lock is never removed

    assert asyncio.run(main()) == {server / "app.py"}


def test_a_file_name_that_is_not_utf8_is_carried_and_the_watch_goes_on(tmp_path: Path) -> None:
    pkg, rows, server = _tree(tmp_path)
    odd = os.path.join(os.fsencode(server), b"caf\xe9_notes.txt")

    async def main() -> tuple[set[Path], set[Path]]:
        async with Edits(pkg, rows) as edits:
            with open(odd, "wb") as f:
                f.write(b"legacy notes\n")
            first = await asyncio.wait_for(edits.next(), 30)
            (server / "app.py").write_text("V = 2\n")
            second = await asyncio.wait_for(edits.next(), 30)
            return first, second

    first, second = asyncio.run(main())
    assert first == {Path(os.fsdecode(odd))} and second == {server / "app.py"}


def test_rust_debug_paths_are_read_back_to_their_bytes() -> None:
    assert _rust_debug_bytes(r"/d/caf\xE9 \"q\" \\ \u{301}\n") == b'/d/caf\xe9 "q" \\ \xcc\x81\n'


def test_used_up_inotify_limits_are_named_with_the_setting_and_the_sysctl() -> None:
    emfile = exhausted(RuntimeError("Error creating recommended watcher: Too many open files (os error 24)"))
    assert emfile and "fs.inotify.max_user_instances = " in emfile and "this user holds " in emfile
    assert "sudo sysctl fs.inotify.max_user_instances=" in emfile and "polling" in emfile
    enospc = exhausted(OSError(28, "No space left on device"))
    assert enospc and "fs.inotify.max_user_watches" in enospc and "sudo sysctl fs.inotify.max_user_watches=" in enospc
    assert exhausted(RuntimeError("Unable to decode path")) is None and exhausted(None) is None


def test_since_last_names_what_changed_after_the_last_edit_was_taken(tmp_path: Path) -> None:
    """What the watch checks once it has applied an edit: files that changed meanwhile."""
    pkg, rows, server = _tree(tmp_path)

    async def main() -> tuple[set[Path], set[Path], set[Path], set[Path]]:
        async with Edits(pkg, rows) as edits:
            (server / "app.py").write_text("V = 2\n")
            first = await asyncio.wait_for(edits.next(), 30)
            quiet = edits.since_last()
            (server / "util.py").write_text("V = 2\n")  # while the edit is applied
            while not edits.since_last():
                await asyncio.sleep(0.05)
            late = edits.since_last()
            await asyncio.wait_for(edits.next(), 30)
            return first, quiet, late, edits.since_last()

    first, quiet, late, after = asyncio.run(main())
    assert first == {server / "app.py"} and quiet == set() and late == {server / "util.py"} and after == set()


def test_a_tree_that_cannot_be_watched_is_an_error_block_before_the_watch_says_it_watches(tmp_path: Path) -> None:
    pkg, rows, _server = _tree(tmp_path)
    gone = (tmp_path / "servers" / "gone").resolve()  # a built-in tree removed since the start

    async def main() -> None:
        async with Edits(pkg, rows, [gone]):
            raise AssertionError("entered")

    with pytest.raises(StartError) as ei:
        asyncio.run(main())
    assert ei.value.code == "GR-START-WATCH-FILES" and ei.value.exit_code == 3
    assert f"cannot watch {pkg}, {gone} for edits: FileNotFoundError" in ei.value.message, ei.value.message
    assert "exists and can be read" in ei.value.hint
