"""A crash that is the same on every start is not restarted again and again: a server that exits
during start-up the way its previous start did (same status, same last log line) fails at once
(case C29's second half, tests/cases/data/C29/README.md); an exit that changes is restarted as before,
and so is a member whose start-up is bound by the host's load (the private Ray head)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gym_runtime.errors import StartError
from gym_runtime.supervise import Supervisor
from tests.daemon.conftest import add_member, fast_options, start_sandbox

SAME = (
    "import sys\nprint('loading config', flush=True)\nprint(\"error: Interpolation key 'candidate' not found\", "
    "file=sys.stderr, flush=True)\nsys.exit(1)\n"
)
# a different last line on every start
CHANGING = "import sys, time\nprint('failed at', time.time_ns(), flush=True)\nsys.exit(1)\n"


def _start(tmp_path: Path, run, argv: list[str], load_bound: bool = False) -> tuple[StartError, object]:
    async def main():
        sb = await start_sandbox(tmp_path / "sb")
        sup = Supervisor(fast_options(max_restarts=3))
        m = await add_member(sup, sb, "acme_calc", argv, tmp_path, tmp_path / "logs")
        m.load_bound_start = load_bound
        try:
            with pytest.raises(StartError) as e:
                await sup.start()
            return e.value, m
        finally:
            sup.request_stop()
            await sup.wait_stopped()
            await sb.close()

    return run(main())


def test_same_startup_crash_twice_fails_at_once(tmp_path: Path, run) -> None:
    (tmp_path / "app.py").write_text(SAME)
    err, m = _start(tmp_path, run, [sys.executable, str(tmp_path / "app.py")])
    assert err.code == "GR-START-CRASH" and m.status == "failed"
    assert m.restarts == 1  # two starts, not 1 + 3 restarts
    assert "the same way as on its previous start" in err.message
    assert "Interpolation key 'candidate' not found" in err.message  # the error itself, in the message
    assert "restarts are for servers that were ready once" in err.message
    assert "loading config" in err.cause and str(m.log.path) in err.log  # the log tail is still the cause
    # the hint points at fields both renderings have (the block's cause/log lines, JSON's keys), not "above"
    assert err.hint == (
        "the error is the same on every start: fix the server or its config (its last log lines "
        "are in cause, the whole log in log), then start again"
    )


def test_a_crash_that_changes_is_restarted_up_to_the_limit(tmp_path: Path, run) -> None:
    (tmp_path / "app.py").write_text(CHANGING)
    err, m = _start(tmp_path, run, [sys.executable, str(tmp_path / "app.py")])
    assert m.restarts == 3 and "after 3 restarts" in err.message
    assert err.hint == (
        "read the server's last log lines (cause) and its log file (log); fix the server or its "
        "config, then start again"
    )


def test_a_load_bound_start_is_restarted_up_to_the_limit_even_when_identical(tmp_path: Path, run) -> None:
    """Ray's ``ray start`` fails the same way each time its raylet misses its fixed 30 s to register on
    a loaded host, and succeeds once the load drops: such a member gets every restart."""
    (tmp_path / "app.py").write_text(SAME)
    err, m = _start(tmp_path, run, [sys.executable, str(tmp_path / "app.py")], load_bound=True)
    assert m.restarts == 3 and "after 3 restarts" in err.message
    assert "the same way as on its previous start" not in err.message


def test_a_silent_startup_crash_says_there_is_no_log_line_yet(tmp_path: Path, run) -> None:
    """A server that exits twice the same way without a line of output (e.g. a start refused
    before it ran) is named without a ``last log line: None``."""
    (tmp_path / "app.py").write_text("import sys\nsys.exit(3)\n")
    err, m = _start(tmp_path, run, [sys.executable, str(tmp_path / "app.py")])
    assert err.code == "GR-START-CRASH" and m.restarts == 1
    assert "the same way as on its previous start (no log line from it yet); not restarted again" in err.message
    assert "None" not in err.message
