"""Every step of a stop is bounded and named (gym_runtime/supervise/teardown.py)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from gym_runtime.supervise.teardown import Teardown
from tests.helpers.daemon import alive


def test_a_stuck_step_is_named_with_what_it_waited_on_and_the_next_steps_still_run() -> None:
    said: list[str] = []
    ran: list[str] = []

    async def stuck() -> None:
        await asyncio.Event().wait()

    async def boom() -> None:
        raise RuntimeError("holder gone")

    async def fine() -> str:
        ran.append("log sinks")
        return "ok"

    async def main() -> Teardown:
        td = Teardown(said.append)
        td.arm()
        try:
            await td.step("servers", stuck(), 0.2, lambda: "acme_math (pid 123, stopping)")
            await td.step("sandbox", boom(), 1.0)
            assert await td.step("log sinks", fine(), 1.0) == "ok"
        finally:
            td.disarm()
        return td

    td = asyncio.run(main())
    assert ran == ["log sinks"] and not td.clean
    assert [o.step for o in td.overruns] == ["servers", "sandbox"]
    assert said[0] == "stop: servers did not finish within 0.2s (waiting on: acme_math (pid 123, stopping)); going on"
    assert said[1].startswith("stop: sandbox failed (RuntimeError('holder gone'))")


def test_the_summary_is_one_line_with_each_step_and_its_note() -> None:
    async def main() -> Teardown:
        td = Teardown(lambda m: None)
        td.arm()
        await td.step("servers", asyncio.sleep(0.02), 1.0)
        td.note("servers", "server instances 0.01s, then stub_model 0.01s")
        await td.step("head server", asyncio.sleep(0.01), 1.0)
        td.note("head server", "")  # nothing to add: no parentheses
        await td.step("watchdog", asyncio.sleep(0), 1.0)  # under 5 ms: left out
        td.disarm()
        return td

    summary = asyncio.run(main()).summary()
    assert re.fullmatch(
        r"stop took \d\.\d\ds: servers \d\.\d\ds \(server instances 0\.01s, then stub_model "
        r"0\.01s\), head server \d\.\d\ds",
        summary,
    ), summary


def test_a_step_that_swallows_its_cancellation_does_not_hold_up_the_stop() -> None:
    async def stubborn() -> None:
        while True:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                pass

    async def main() -> float:
        td = Teardown(lambda m: None)
        t0 = time.monotonic()
        await td.step("stubborn", stubborn(), 0.2)
        took = time.monotonic() - t0
        for t in asyncio.all_tasks() - {asyncio.current_task()}:  # let asyncio.run end
            t.get_coro().close()
        return took

    assert asyncio.run(main()) < 5


def test_the_backstop_ends_a_process_whose_event_loop_is_stuck(tmp_path: Path) -> None:
    """The loop itself blocked (no deadline can fire): the backstop thread dumps the stacks, kills
    the given process groups and exits 3."""
    script = tmp_path / "stuck.py"
    script.write_text(
        textwrap.dedent("""
        import asyncio, subprocess, sys, time
        from gym_runtime.supervise.teardown import Teardown
        child = subprocess.Popen(["sleep", "60"], start_new_session=True)
        print(child.pid, flush=True)
        async def main():
            td = Teardown(print, lambda: [child.pid], hard_deadline_s=1.0)
            td.arm()
            td.current = "head server"
            time.sleep(30)  # a blocking call on the loop thread
        asyncio.run(main())
    """)
    )
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=20,
        cwd=Path(__file__).resolve().parents[2],
    )
    took = time.monotonic() - t0
    child = int(proc.stdout.split()[0])
    try:
        assert proc.returncode == 3 and took < 15
        assert "stop: not finished after 1s (in step: head server)" in proc.stderr
        assert "time.sleep(30)" in proc.stderr or "stuck.py" in proc.stderr  # the stacks say where
        time.sleep(0.2)
        assert alive([child]) == [] or _zombie(child)
    finally:
        if alive([child]):
            os.kill(child, signal.SIGKILL)


def _zombie(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def test_a_start_refused_before_anything_ran_says_no_stop(tmp_path: Path) -> None:
    """An invalid package is refused before anything starts: its error block alone, no ``stop took 0.00s``."""
    import shutil

    pkg = tmp_path / "pkg"
    shutil.copytree(Path(__file__).resolve().parents[2] / "examples" / "native-quickstart", pkg)
    manifest = pkg / "nemo-environment.yaml"
    manifest.write_text(manifest.read_text().replace("arithmetic.yaml", "arithmetc.yaml"))
    r = subprocess.run(
        [sys.executable, "-m", "gym_runtime.cli.main", "up", str(pkg)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "GYM_RUNTIME_HOME": str(tmp_path / "home")},
    )
    assert r.returncode == 1 and "GR-PKG-CONFIG-MISSING" in r.stderr, r.stderr
    assert "stop took" not in r.stderr, r.stderr
