"""``Edits`` (inotify through watchfiles) and ``classify``: what ``dry-run --watch`` sees of an edit.

The watch printed its first table before its watches were set, so an edit saved right after the
table (as a test, or a quick author, does) was missed on a busy host and the watch sat idle.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from gym_runtime.dryrun.edits import Edits, classify


def _tree(tmp_path: Path) -> tuple[Path, Path, Path]:
    pkg = tmp_path / "pkg"
    app = pkg / "resources_servers" / "demo" / "app.py"
    app.parent.mkdir(parents=True)
    app.write_text("REWARD = 1.0\n")
    (pkg / "configs").mkdir()
    (pkg / "configs" / "demo.yaml").write_text("a: 1\n")
    rows = tmp_path / "rows.jsonl"
    rows.write_text("{}\n")
    return pkg, rows, app


def test_an_edit_saved_as_soon_as_the_watch_is_entered_is_seen(tmp_path: Path) -> None:
    pkg, rows, app = _tree(tmp_path)

    async def main() -> set[Path]:
        async with Edits(pkg.resolve(), rows.resolve()) as edits:
            app.write_text("REWARD = 0.0\n")  # no pause: the watches are set once entered
            return await asyncio.wait_for(edits.next(), 30)

    assert app.resolve() in asyncio.run(main())


def test_classify_sorts_server_config_rows_and_the_rest(tmp_path: Path) -> None:
    pkg, rows, app = _tree(tmp_path)
    pkg, rows = pkg.resolve(), rows.resolve()
    dirs = {"demo": app.parent.resolve(), "other": (pkg / "elsewhere").resolve()}
    edit = classify(
        [app, pkg / "configs" / "demo.yaml", rows, pkg / "README.md", app.parent / "requirements.txt"], pkg, rows, dirs
    )
    assert edit.servers == {"demo"} and edit.config and edit.rows
    assert edit.requirements == {(app.parent / "requirements.txt").resolve()}
    assert edit.ignored == {(pkg / "README.md").resolve()}


def test_an_edit_of_install_files_asks_one_rebuild_per_server_directory(tmp_path: Path) -> None:
    pkg, rows, app = _tree(tmp_path)
    pkg, rows, sdir = pkg.resolve(), rows.resolve(), app.parent.resolve()
    dirs = {"demo": sdir, "demo_b": sdir, "other": (pkg / "resources_servers" / "other").resolve()}
    edit = classify(
        [sdir / "requirements.txt", sdir / "overrides.txt", sdir / "pyproject.toml", sdir / "sub" / "requirements.txt"],
        pkg,
        rows,
        dirs,
    )
    assert edit.rebuilds(dirs) == {sdir: (["demo", "demo_b"], ["overrides.txt", "pyproject.toml", "requirements.txt"])}
    assert edit.servers == {"demo", "demo_b"}  # a requirements.txt below the top is the server's code
    assert not classify([sdir / "requirements.txt"], pkg, rows, dirs).acts  # the rebuild acts once it has ended


def test_a_built_in_server_tree_the_environment_runs_is_watched_and_restarts_its_instances(tmp_path: Path) -> None:
    pkg, rows, _app = _tree(tmp_path)
    built_in = (tmp_path / "servers" / "resources_servers" / "example_arithmetic").resolve()
    built_in.mkdir(parents=True)
    (built_in / "app.py").write_text("REWARD = 1.0\n")
    pkg, rows = pkg.resolve(), rows.resolve()

    async def main() -> set[Path]:
        async with Edits(pkg, rows, [built_in, pkg / "resources_servers" / "demo"]) as edits:
            assert edits.trees == [built_in]  # a server directory inside the package is watched with it
            (built_in / "app.py").write_text("REWARD = 0.0\n")
            return await asyncio.wait_for(edits.next(), 30)

    got = asyncio.run(main())
    assert built_in / "app.py" in got
    edit = classify(got, pkg, rows, {"arithmetic": built_in, "demo": (pkg / "resources_servers" / "demo").resolve()})
    assert edit.servers == {"arithmetic"} and not edit.config and not edit.ignored


def test_a_file_in_a_server_folder_no_running_server_is_from_merges_the_config_again(tmp_path: Path) -> None:
    """An ``app.py`` added next to the configs of a built-in implementation moves the instance to
    the package's folder: the config is merged again, which names that move (it was ignored)."""
    pkg, rows, app = _tree(tmp_path)
    pkg, rows = pkg.resolve(), rows.resolve()
    built_in = (tmp_path / "servers" / "resources_servers" / "example_arithmetic").resolve()
    dirs = {"demo": app.parent.resolve(), "arithmetic": built_in}
    added = pkg / "resources_servers" / "example_arithmetic" / "app.py"
    edit = classify([added], pkg, rows, dirs, ("resources_servers", "responses_api_agents"))
    assert edit.config and not edit.servers and not edit.ignored
    edit = classify(
        [pkg / "notes" / "x" / "app.py", pkg / "README.md", added.with_name("NOTES.md")],
        pkg,
        rows,
        dirs,
        ("resources_servers",),
    )
    assert not edit.acts and len(edit.ignored) == 3  # not a server folder, or no code there


def test_editor_droppings_and_files_made_and_removed_within_a_save_are_no_edit(tmp_path: Path) -> None:
    """A vim swap file, and the temporary file an editor or ``sed -i`` writes and renames over the
    file it saves, are no edit of the server (each restarted it); the saved file is."""
    pkg, rows, app = _tree(tmp_path)
    pkg, rows, app = pkg.resolve(), rows.resolve(), app.resolve()

    async def main() -> set[Path]:
        async with Edits(pkg, rows) as edits:
            (app.parent / ".app.py.swp").write_text("swap")
            (app.parent / "4913").write_text("")  # vim's probe of the directory
            (app.parent / "4913").unlink()
            temp = app.parent / "sedAbC123"
            temp.write_text("REWARD = 0.5\n")
            temp.rename(app)
            got = await asyncio.wait_for(edits.next(), 30)
            await asyncio.sleep(0.5)  # anything left over comes in a later group
            while not edits._q.empty():
                got |= edits._q.get_nowait()[1]
            return got

    assert asyncio.run(main()) == {app}


def test_a_tree_under_a_folder_named_like_a_dropping_is_still_watched(tmp_path: Path) -> None:
    """The droppings filter reads a path below its watched root: a runtime installed in a ``.venv``
    (its built-in server trees there) or a package kept under one is watched."""
    pkg, rows, app = _tree(tmp_path / ".venv" / "lib")
    pkg, rows, app = pkg.resolve(), rows.resolve(), app.resolve()

    async def main() -> set[Path]:
        async with Edits(pkg, rows) as edits:
            (app.parent / "__pycache__").mkdir()
            (app.parent / "__pycache__" / "app.cpython-311.pyc").write_bytes(b"")
            app.write_text("REWARD = 0.5\n")
            return await asyncio.wait_for(edits.next(), 30)

    assert asyncio.run(main()) == {app}
