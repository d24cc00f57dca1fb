"""``dry-run --watch`` on a copy of the bundled example: real daemon, real files, the stub model.

An edit of a resources server's ``verify()`` restarts that server and prints a new table whose
``change`` column names each row's move; a syntax error shows the error block and the watch goes
on; the next good edit recovers; Ctrl-C exits 130 and leaves no process.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.daemon import descendants, wait_gone
from tests.helpers.environments import shared_venvs
from tests.helpers.watch import WatchRun, mean_of, rows_of, set_reward, watched_quickstart

pytestmark = [pytest.mark.pypi, pytest.mark.slow]


@pytest.mark.timeout(900)  # three runs of the example and a failed start, each waited for on its own
def test_edit_verify_reruns_rows_with_changes_then_syntax_error_then_recovery(tmp_path: Path) -> None:
    pkg, rows = watched_quickstart(tmp_path)
    run = WatchRun(pkg, rows, tmp_path / "run", "--samples", "2",
                   env={"GYM_RUNTIME_HOME": str(tmp_path / "home"), **shared_venvs()})
    try:
        first = run.table(1)
        arithmetic = rows_of(first, "arithmetic_agent")
        assert len(arithmetic) == 4 and {mean_of(r) for r in arithmetic} == {"1.00"}, first
        assert "change" not in first[2]  # the first table has nothing to compare with

        mark = len(run.err)
        set_reward(pkg, "REWARD = 0.0")
        second = run.table(2)
        assert run.stderr_after(mark, r"restarting arithmetic$") >= mark
        arithmetic = rows_of(second, "arithmetic_agent")
        assert {mean_of(r) for r in arithmetic} == {"0.00"}, second
        assert all(r.endswith("mean -1.00") for r in arithmetic), second
        assert any(line.startswith("against run 1: ") for line in second), second

        mark = len(run.err)
        set_reward(pkg, "REWARD = = 0.0")  # a syntax error
        block = run.stderr_after(mark, r"error\[GR-START-CRASH\]: server 'arithmetic'")
        run.stderr_after(block, r"SyntaxError")
        run.stderr_after(block, r"not running the rows: arithmetic did not start")
        assert run.proc.poll() is None
        assert not any("· run 3" in line for line in run.out)

        set_reward(pkg, "REWARD = 1.0")
        third = run.table(3)
        arithmetic = rows_of(third, "arithmetic_agent")
        assert {mean_of(r) for r in arithmetic} == {"1.00"}, third
        assert all(r.endswith("mean +1.00") for r in arithmetic), third  # against run 2, not the broken edit

        kids = [p.pid for p in descendants(run.proc.pid)]
        assert kids
        assert run.interrupt() == 130, "".join(run.err[-20:])
        assert wait_gone(kids, 5.0) == []
        assert "Traceback" not in "".join(run.err)
    finally:
        run.close()
