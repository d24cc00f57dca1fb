"""Case C51: a server's ``\\r`` progress bars (never ending their line) leave bounded logs.

The drain keeps at most one capped line in progress, a redraw replaces the line under way (the
file keeps every byte), every line shown (tail, ``/servers/{name}/logs``, ``gym-runtime logs``, a
failure's cause) is capped with a cut marker counting what was dropped, and a traceback written
right after a bar still starts its own line. Speed and memory figures: ``bench/log_drain.py``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from gym_runtime.errors import StartError
from gym_runtime.supervise import LogSink, Supervisor
from gym_runtime.supervise.lines import LINE_MAX_BYTES, Lines, cut_marker
from tests.daemon.conftest import add_member, fast_options, start_sandbox
from tests.helpers.cases import CASES
from tests.helpers.daemon import kill_tree, read_ready_line, simple_env, up_process
from tests.helpers.progress import progress_bar_app

CASE = CASES / "C51"
CHATTY = CASE / "pkg/resources_servers/chatty_env"
SHOWN_MAX = LINE_MAX_BYTES + len(cut_marker(10**12).encode())  # one shown line, cut marker included
REDRAW = re.compile(r"^(Loading tasks: +\d+%\|#*\s*\| \d+/\d+ |judge cache warm-up: \d+ it )")
CRASH_LINE = "RuntimeError: task file tasks.parquet is corrupt (row group 3)"


def test_lines_follow_a_terminal_and_cut_long_lines() -> None:
    lines = Lines(64)
    assert lines.feed(b"first\r\n\nbar 1%\rbar 2%") == ["first", ""]
    assert lines.pending() == "bar 2%"
    assert lines.feed(b"\r") == [] and lines.pending() == "bar 2%"  # '\r' at a chunk's end: wait for the next byte
    assert lines.feed(b"\ndone\r") == ["bar 2%"]
    assert lines.feed(b"bar 100%Traceback (most recent call last):\n") == [
        "bar 100%",
        "Traceback (most recent call last):",
    ]
    out = lines.feed(b"x" * 1000 + b"\n")
    assert out == ["x" * 32 + cut_marker(1000 - 64) + "x" * 32]
    assert lines.feed(b"\xff\xfeok") == [] and lines.end() == ["\ufffd\ufffdok"] and lines.end() == []


def test_chunking_never_changes_the_lines() -> None:
    """The same stream cut at every byte or in one piece gives the same lines (and cuts)."""
    stream = b"a\r\nb\rc\r\r\nlong " + b"y" * 300 + b"\rz\nend"
    whole, bytewise = Lines(100), Lines(100)
    one = whole.feed(stream) + whole.end()
    many = [line for i in range(len(stream)) for line in bytewise.feed(stream[i : i + 1])] + bytewise.end()
    assert one == many == ["a", "c", "z", "end"]


def test_an_error_block_shows_the_latest_start_only(tmp_path: Path) -> None:
    """What a failed start shows of a server's log begins at its latest start note: the lines an
    earlier start of the run wrote (a server restarted after an edit) are not the failure's."""
    sink = LogSink(tmp_path / "s.log")
    sink.note("start #1: python app.py (cwd /srv)")
    sink._write(b"INFO: 127.0.0.1 - GET / 200\n" * 30)
    sink.note("start #2: python app.py (cwd /srv)")
    sink._write(b"Traceback (most recent call last):\nNameError: name 'x' is not defined\n")
    lines = sink.since_start(40)
    assert "] start #2: " in lines[0] and lines[-1] == "NameError: name 'x' is not defined" and len(lines) == 3
    assert len(sink.tail(40)) == 34  # the log itself keeps them all
    assert sink.since_start(2) == sink.tail(2)  # fewer lines than since the note: the last ones
    sink.close()


def test_the_case_probe_keeps_the_partial_line_bounded(tmp_path: Path) -> None:
    """The case's unit probe (~64 KB chunks of redraws, logsink_probe.py) through a sink
    (30 MB) end with one pending line, a single redraw, and every byte in the file."""
    probe = (CASE / "logsink_probe.py").read_text()
    chunk = eval(re.search(r"chunk = (.*)\n", probe).group(1))  # the case's own chunk expression
    assert len(chunk) > 60_000 and chunk.count(b"\r") > 800
    sink = LogSink(tmp_path / "probe.log")
    for _ in range(512):
        sink._write(chunk)
    tail = sink.tail(3)
    assert len(tail) == 1 and len(tail[0].encode()) <= SHOWN_MAX
    assert tail[0].startswith("downloading shards:") or "downloading shards:".startswith(tail[0])
    assert sink.bytes_written == 512 * len(chunk) == (tmp_path / "probe.log").stat().st_size
    sink.close()


def _chatty(progress_mb: float, crash: bool, port: int) -> dict[str, str]:
    conf = {"host": "127.0.0.1", "port": port, "progress_mb": progress_mb, "newline": False, "crash_after": crash}
    return {
        "NEMO_GYM_CONFIG_DICT": json.dumps({"chatty": {"resources_servers": {"chatty_env": conf}}}),
        "NEMO_GYM_CONFIG_PATH": "chatty",
    }


def test_case_server_bar_leaves_a_bounded_tail(tmp_path: Path, run) -> None:
    """The case's own server (4 MB of redraws, then a ticking bar) is ready; its tail is a few
    capped lines ending with a single redraw, and the file holds every byte."""

    async def main():
        sb = await start_sandbox(tmp_path / "sb")
        sup = Supervisor(fast_options())
        port = sb.allocate_port()
        m = await add_member(
            sup,
            sb,
            "chatty",
            [sys.executable, str(CHATTY / "app.py")],
            CHATTY,
            tmp_path / "logs",
            port=port,
            env=_chatty(4, False, port),
        )
        try:
            await sup.start()
            async with httpx.AsyncClient(trust_env=False) as c:
                assert (await c.post(m.url + "/verify", json={"x": 1}, timeout=10)).json()["reward"] == 1.0
            m.log.drain_now()
            return m.log.tail(200), m.log.path.stat().st_size
        finally:
            sup.request_stop()
            await sup.wait_stopped()
            await sb.close()

    tail, size = run(main())
    assert size > 4_000_000
    assert all(len(line.encode()) <= SHOWN_MAX for line in tail)
    assert sum(len(line) for line in tail) < 64 * 1024
    assert REDRAW.match(tail[-1]) and "\r" not in tail[-1]


def test_case_crash_after_bar_has_its_traceback_on_its_own_line(tmp_path: Path, run) -> None:
    """The case's crash variant (5 MB of redraws, then a traceback): GR-START-CRASH whose cause is
    small, holds the traceback header as a line of its own, and names the RuntimeError."""

    async def main():
        sb = await start_sandbox(tmp_path / "sb")
        sup = Supervisor(fast_options(max_restarts=0))
        port = sb.allocate_port()
        await add_member(
            sup,
            sb,
            "chatty",
            [sys.executable, str(CHATTY / "app.py")],
            CHATTY,
            tmp_path / "logs",
            port=port,
            env=_chatty(5, True, port),
        )
        try:
            with pytest.raises(StartError) as e:
                await sup.start()
            return e.value
        finally:
            sup.request_stop()
            await sup.wait_stopped()
            await sb.close()

    err = run(main())
    assert err.code == "GR-START-CRASH"
    block = json.dumps(err.to_dict())
    assert len(block) < 64 * 1024, len(block)
    lines = err.extra["log_tails"]["chatty"]
    assert "Traceback (most recent call last):" in lines
    assert REDRAW.match(lines[lines.index("Traceback (most recent call last):") - 1])
    assert CRASH_LINE in lines and CRASH_LINE in err.message + (err.cause or "")


def test_up_head_logs_and_cli_logs_are_bounded(tmp_path: Path) -> None:
    """A real ``up`` whose resources server writes 8 MB of redraws: the head server's
    ``/servers/acme_math/logs?tail=3`` and ``gym-runtime logs acme_math`` (daemon running, and
    from the files once it stopped) answer a few KB; the log file keeps every byte."""
    pkg = simple_env(tmp_path / "pkg")
    app = pkg / "resources_servers/acme_math/app.py"
    app.write_text(progress_bar_app(8) + app.read_text())
    home = tmp_path / "home"
    env = {**os.environ, "GYM_RUNTIME_HOME": str(home)}
    daemon = up_process(pkg, tmp_path, env={"GYM_RUNTIME_HOME": str(home)})
    try:
        head = json.loads(read_ready_line(daemon))["head_server"]
        r = httpx.get(f"{head}/servers/acme_math/logs?tail=3", timeout=30, trust_env=False)
        assert r.status_code == 200 and len(r.content) < 16 * 1024, len(r.content)
        assert REDRAW.match(r.json()["lines"][-1])
        cli = subprocess.run(
            [sys.executable, "-m", "gym_runtime.cli.main", "logs", "acme_math"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert cli.returncode == 0 and len(cli.stdout) < 128 * 1024, len(cli.stdout)
        daemon.terminate()
        assert daemon.wait(30) == 0
    finally:
        kill_tree(daemon)
    log = tmp_path / "run/logs/acme_math.log"
    assert log.stat().st_size > 8_000_000
    cli = subprocess.run(
        [sys.executable, "-m", "gym_runtime.cli.main", "logs", "acme_math", "--tail", "1000"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0 and len(cli.stdout) < 128 * 1024, len(cli.stdout)
    shown = cli.stdout.splitlines()
    assert all(len(line.encode()) <= SHOWN_MAX for line in shown)
    assert any(REDRAW.match(line) for line in shown)


def test_a_daemon_note_with_text_that_is_no_text_is_written(tmp_path: Path) -> None:
    """A note carrying model output (a lone surrogate) is written escaped, never raising; a bar
    under way ends before it, so the note is a line of its own in the file and the tail."""
    sink = LogSink(tmp_path / "s.log")
    sink._write(b"\rbar 10%")
    sink.note("the policy said \ud83d")
    sink.close()
    assert sink.tail(3)[0] == "bar 10%" and sink.tail(3)[1].endswith("] the policy said \\ud83d")
    assert (tmp_path / "s.log").read_bytes().split(b"\n")[1].endswith(b"the policy said \\ud83d")
