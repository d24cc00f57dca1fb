"""``dry-run --watch`` on a copy of the bundled example: real daemon, real files, the stub model.

An edit of a resources server's ``verify()`` restarts that server and prints a new table whose
``change`` column names each row's move (the rows it did not touch stay ``same``: the stub model
samples each run as the first); a syntax error shows the error block and the watch goes
on; the next good edit recovers; an edit that declares Ray in the server, which the environment
started without, is refused with its block and the server keeps running; Ctrl-C exits 130 and
leaves no process.

An edit of the server's ``requirements.txt`` rebuilds its venv in the background with real uv (a
tiny wheel from a loopback index the test holds until it has seen an app edit's table, or from a
local ``--find-links`` directory): the server keeps serving on its venv meanwhile, then runs on
the new one, which has the package; a requirement no index has shows the build's error block,
leaves nothing half-built, and the watch goes on; Ctrl-C during a rebuild stops its uv and keeps
nothing of it. Venvs these tests build in the shared venv cache are removed by them.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest

from tests.helpers.daemon import declaring_ray, descendants, wait_gone
from tests.helpers.environments import shared_venvs
from tests.helpers.index import SimpleIndex
from tests.helpers.watch import (
    WatchRun,
    has_module,
    mean_of,
    rows_of,
    running_venvs,
    set_requirements,
    set_reward,
    tiny_wheel,
    watched_quickstart,
)

pytestmark = [pytest.mark.pypi, pytest.mark.slow]


@pytest.mark.timeout(900)  # three runs of the example and a failed start, each waited for on its own
def test_edit_verify_reruns_rows_with_changes_then_syntax_error_then_recovery(tmp_path: Path) -> None:
    pkg, rows = watched_quickstart(tmp_path)
    run = WatchRun(
        pkg,
        rows,
        tmp_path / "run",
        "--samples",
        "2",
        env={"GYM_RUNTIME_HOME": str(tmp_path / "home"), **shared_venvs()},
    )
    try:
        first = run.table(1)
        arithmetic = rows_of(first, "arithmetic_agent")
        assert len(arithmetic) == 4 and {mean_of(r) for r in arithmetic} == {"1.00"}, first
        assert "change" not in first[2]  # the first table has nothing to compare with

        mark = len(run.err)
        set_reward(pkg, "REWARD = 0.0")
        second = run.table(2)
        assert run.stderr_after(mark, r"restarting arithmetic$") >= mark
        assert "· startup " in first[0] and "· startup " not in second[0]  # the start was timed once
        arithmetic = rows_of(second, "arithmetic_agent")
        assert {mean_of(r) for r in arithmetic} == {"0.00"}, second
        assert all(r.endswith("mean -1.00") for r in arithmetic), second
        # the stub samples each run as the first (its counts reset): rows the edit did not touch stay
        log = (tmp_path / "run" / "logs" / "arithmetic.log").read_text()
        assert "] start #2: " in log, log  # the restart after an edit goes on numbering (it said #1 again)
        lookup = rows_of(second, "code_lookup_agent")
        assert lookup and all(r.endswith(" same") for r in lookup), second
        assert any(line.startswith(f"against run 1: {len(arithmetic)} row(s) changed") for line in second), second

        mark = len(run.err)
        set_reward(pkg, "REWARD = = 0.0")  # a syntax error
        block = run.stderr_after(mark, r"error\[GR-START-CRASH\]: server 'arithmetic'")
        run.stderr_after(block, r"SyntaxError")
        run.stderr_after(block, r"then save: the watch starts it again")  # not "start again": it runs on
        run.stderr_after(block, r"not running the rows: arithmetic did not start")
        assert run.proc.poll() is None
        assert not any("· run 3" in line for line in run.out)

        set_reward(pkg, "REWARD = 1.0")
        third = run.table(3)
        arithmetic = rows_of(third, "arithmetic_agent")
        assert {mean_of(r) for r in arithmetic} == {"1.00"}, third
        assert all(r.endswith("mean +1.00") for r in arithmetic), third  # against run 2, not the broken edit

        mark = len(run.err)
        app = pkg / "resources_servers" / "example_arithmetic" / "app.py"
        good = app.read_text()
        app.write_text(declaring_ray(good))  # the environment started without Ray
        block = run.stderr_after(mark, r"error\[GR-START-WATCH-RAY\]: after this edit arithmetic uses Ray")
        run.stderr_after(block, r"start dry-run --watch again to bring arithmetic up with Ray")
        run.stderr_after(block, r"the environment keeps running as it was")
        app.write_text(good)
        fourth = run.table(4)  # the server was never stopped: the undo is one more edit
        assert _means(fourth) == {"1.00"} and not any("· run 5" in line for line in run.out), fourth

        lines = rows.read_text().splitlines(keepends=True)
        rows.write_text("".join(lines[1:]))  # a row removed from the dataset is counted as gone
        fifth = run.table(5)
        assert any(
            line.startswith("against run 4: 0 row(s) changed") and line.rstrip().endswith("0 new, 1 gone")
            for line in fifth
        ), fifth

        kids = [p.pid for p in descendants(run.proc.pid)]
        assert kids
        assert run.interrupt() == 130, "".join(run.err[-20:])
        assert wait_gone(kids, 5.0) == []
        assert "Traceback" not in "".join(run.err)
    finally:
        run.close()


@pytest.mark.timeout(600)
def test_a_server_restarted_once_its_imports_are_learned_is_forked_from_its_parent_again(tmp_path: Path) -> None:
    """Venvs of its own (a home of its own): each server learns its imports at the start and the
    daemon removes its learning dir once harvested; a config edit then restarts ``code_lookup``,
    which is forked from its venv's preloaded parent again, reading the shared cache (it was
    started on its own, and the parent forked nothing more)."""
    pkg, rows = watched_quickstart(tmp_path)
    run = WatchRun(pkg, rows, tmp_path / "run", env={"GYM_RUNTIME_HOME": str(tmp_path / "home")})
    try:
        run.table(1)
        run.stderr_after(0, r"bytecode: compiled what code_lookup imports into venv")
        config = pkg / "resources_servers" / "example_code_lookup" / "configs" / "code_lookup.yaml"
        config.write_text(config.read_text().replace("salt: quickstart", "salt: edited"))
        mark = len(run.err)
        run.table(2)
        run.stderr_after(mark, r"code_lookup: ready in")
        said = "".join(run.err)
        assert "starts on its own" not in said and "could not be forked" not in said, said
    finally:
        run.close()


def _means(table: list[str]) -> set[str]:
    return {mean_of(r) for r in rows_of(table, "arithmetic_agent")}


def _venv_with_tiny(run: WatchRun) -> Path:
    """The venv a running server of the watch runs on that holds ``acme_watch_tiny``."""
    found = [v for v in running_venvs(run.proc.pid) if has_module(v, "acme_watch_tiny")]
    assert len(found) == 1, running_venvs(run.proc.pid)
    return found[0]


@pytest.mark.timeout(900)
def test_requirements_edit_rebuilds_the_venv_while_the_server_keeps_serving(tmp_path: Path) -> None:
    pkg, rows = watched_quickstart(tmp_path)
    tiny_wheel(tmp_path / "wheels", 0.5, str(tmp_path))
    venv_root = Path(shared_venvs()["GYM_RUNTIME_VENV_DIR"])
    new_venv = None
    with SimpleIndex(tmp_path / "wheels") as index:
        run = WatchRun(
            pkg,
            rows,
            tmp_path / "run",
            "--samples",
            "2",
            env={"GYM_RUNTIME_HOME": str(tmp_path / "home"), "UV_HTTP_TIMEOUT": "600", **shared_venvs()},
        )
        try:
            assert _means(run.table(1)) == {"1.00"}
            before = running_venvs(run.proc.pid)

            index.hold()  # the build waits for the wheel until the app edit's table is in
            mark = len(run.err)
            set_requirements(pkg, f"--index-url {index.url}\nacme-watch-tiny==0.1.0\n")
            run.stderr_after(
                mark,
                r"rebuilding venv for arithmetic \(requirements\.txt changed\); "
                r"arithmetic keeps serving on its current venv$",
            )
            set_reward(pkg, "REWARD = 0.0")  # an app edit during the rebuild: restarted on the current venv
            second = run.table(2)
            assert _means(second) == {"0.00"}, second
            assert not any("rebuilt in" in line for line in run.err[mark:]), "".join(run.err[mark:])
            assert not any(has_module(v, "acme_watch_tiny") for v in running_venvs(run.proc.pid))

            index.release()
            run.stderr_after(mark, r"venv for arithmetic rebuilt in [0-9.]+ s; restarting arithmetic$")
            third = run.table(3)
            assert _means(third) == {"0.00"}, third
            new_venv = _venv_with_tiny(run)
            assert new_venv not in before
            assert any(p.startswith("/files/acme_watch_tiny-0.1.0") for p in index.requests), index.requests

            set_reward(pkg, "REWARD = __import__('acme_watch_tiny').REWARD")  # the server imports it
            fourth = run.table(4)
            assert _means(fourth) == {"0.50"}, fourth

            # Ctrl-C while a rebuild downloads: uv is stopped with the rest, nothing of the build is kept
            tiny_wheel(tmp_path / "wheels", 0.25, str(tmp_path), version="0.2.0")
            index.hold()
            mark = len(run.err)
            set_requirements(pkg, f"--index-url {index.url}\nacme-watch-tiny==0.2.0\n")
            run.stderr_after(mark, r"rebuilding venv for arithmetic \(requirements\.txt changed\)")
            deadline = time.monotonic() + 120
            while not any(p.startswith("/files/acme_watch_tiny-0.2.0") for p in index.requests):
                assert time.monotonic() < deadline, index.requests
                time.sleep(0.1)
            kids = [p.pid for p in descendants(run.proc.pid)]
            assert run.interrupt() == 130, "".join(run.err[-20:])
            assert wait_gone(kids, 5.0) == []
            assert not list((venv_root / ".tmp").glob(f"*.{run.proc.pid}.*")), "the cancelled build left its dir"
            assert "Traceback" not in "".join(run.err)
        finally:
            run.close()
            if new_venv is not None:  # it lives in the tests' shared venv cache
                shutil.rmtree(new_venv, ignore_errors=True)


@pytest.mark.timeout(900)
def test_a_requirement_no_index_has_shows_its_error_and_the_watch_goes_on(tmp_path: Path) -> None:
    pkg, rows = watched_quickstart(tmp_path)
    wheels = tmp_path / "wheels"
    tiny_wheel(wheels, 0.5, str(tmp_path))
    venv_root = Path(shared_venvs()["GYM_RUNTIME_VENV_DIR"])
    new_venv = None
    run = WatchRun(
        pkg,
        rows,
        tmp_path / "run",
        "--samples",
        "2",
        env={"GYM_RUNTIME_HOME": str(tmp_path / "home"), **shared_venvs()},
    )
    try:
        assert _means(run.table(1)) == {"1.00"}
        before = running_venvs(run.proc.pid)

        mark = len(run.err)
        set_requirements(pkg, "--no-index\nacme-watch-no-such-package\n")  # offline: no index is asked
        run.stderr_after(mark, r"rebuilding venv for arithmetic \(requirements\.txt changed\)")
        block = run.stderr_after(mark, r"error\[GR-BUILD-[A-Z-]+\]: .*arithmetic")
        text = "".join(run.err[block : run.stderr_after(block, r"^\(arithmetic keeps serving on its current venv; ")])
        assert "acme-watch-no-such-package" in text, text
        digest = re.search(r"arithmetic-([0-9a-f]{12})\.stage1\.log", text)
        assert digest is not None, text
        assert not list(venv_root.glob(f"{digest[1]}*")), "a failed build left its venv"
        assert not list((venv_root / ".tmp").glob(f"{digest[1]}*")), "a failed build left its temporary dir"
        assert run.proc.poll() is None and running_venvs(run.proc.pid) == before
        assert not any("· run 2" in line for line in run.out)

        set_reward(pkg, "REWARD = 0.0")  # still watching: an app edit gets its table, on the current venv
        assert _means(run.table(2)) == {"0.00"}

        mark = len(run.err)  # the next good edit applies: the wheel from a local directory, still no index
        set_requirements(pkg, f"--no-index\n--find-links {wheels}\nacme-watch-tiny==0.1.0\n")
        run.stderr_after(mark, r"venv for arithmetic rebuilt in [0-9.]+ s; restarting arithmetic$")
        assert _means(run.table(3)) == {"0.00"}
        new_venv = _venv_with_tiny(run)

        assert run.interrupt() == 130, "".join(run.err[-20:])
        assert "Traceback" not in "".join(run.err)
    finally:
        run.close()
        if new_venv is not None:  # it lives in the tests' shared venv cache
            shutil.rmtree(new_venv, ignore_errors=True)
