"""Supervisor behaviour with real processes in the real sandbox: crash detection, restart with
backoff (exit status 0 counts, case C24), readiness timeout report, log draining (case C25)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest

from gym_runtime.errors import StartError
from gym_runtime.supervise import Supervisor
from tests.daemon.conftest import add_member, fast_options, start_sandbox
from tests.helpers.cases import CASES

SERVE = """import sys, time
from http.server import HTTPServer, BaseHTTPRequestHandler
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
print("serving", flush=True)
HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def test_crash_is_seen_at_once_and_restarted(tmp_path: Path, run) -> None:
    (tmp_path / "app.py").write_text(SERVE)

    async def main() -> tuple[float, int, str]:
        sb = await start_sandbox(tmp_path / "sb")
        sup = Supervisor(fast_options())
        m = await add_member(
            sup, sb, "acme", [sys.executable, str(tmp_path / "app.py"), "{port}"], tmp_path, tmp_path / "logs"
        )
        try:
            await sup.start()
            t0 = time.monotonic()
            os.kill(m.proc.app_pid(), signal.SIGKILL)
            while m.status == "ready":
                await asyncio.sleep(0.001)
            seen = time.monotonic() - t0
            while m.status != "ready":
                await asyncio.sleep(0.01)
            async with httpx.AsyncClient(trust_env=False) as c:
                assert (await c.get(m.url)).status_code == 200
            return seen, m.restarts, m.last_exit["reason"]
        finally:
            sup.request_stop()
            await sup.wait_stopped()
            await sb.close()

    seen, restarts, reason = run(main())
    assert seen < 5.0  # event-driven (no polling period to wait out); the bound only catches a hang
    assert restarts == 1
    assert reason == "signal"


def test_a_stop_times_the_servers_then_what_they_use(tmp_path: Path, run) -> None:
    """The servers stop first, then the stub model / Ray head; ``stop_split`` (shown in the daemon's one
    ``stop took`` line) gives each group's seconds and names the second group's members."""
    (tmp_path / "app.py").write_text(SERVE)

    async def main() -> str:
        sb = await start_sandbox(tmp_path / "sb")
        sup = Supervisor(fast_options())
        for name, kind in (("acme", "server"), ("stub_model", "model")):
            await add_member(
                sup,
                sb,
                name,
                [sys.executable, str(tmp_path / "app.py"), "{port}"],
                tmp_path,
                tmp_path / "logs",
                kind=kind,
            )
        try:
            await sup.start()
            assert sup.stop_split == ""
        finally:
            sup.request_stop()
            await sup.wait_stopped()
            await sb.close()
        return sup.stop_split

    split = run(main())
    assert re.fullmatch(r"server instances \d+\.\d\ds, then stub_model \d+\.\d\ds", split), split


def test_exit_status_zero_is_a_failure_and_restarts_are_bounded(tmp_path: Path, run) -> None:
    # serves briefly, then exits 0 although nobody asked it to stop
    (tmp_path / "app.py").write_text(
        SERVE.replace(
            'print("serving", flush=True)',
            ('import threading, os\nthreading.Timer(0.4, lambda: os._exit(0)).start()\nprint("serving", flush=True)'),
        )
    )

    async def main():
        sb = await start_sandbox(tmp_path / "sb")
        sup = Supervisor(fast_options(max_restarts=2, keep_going=False))
        m = await add_member(
            sup, sb, "acme_judge", [sys.executable, str(tmp_path / "app.py"), "{port}"], tmp_path, tmp_path / "logs"
        )
        try:
            await sup.start()
            code = await asyncio.wait_for(sup.wait_stopped(), 30)
            return code, sup, m
        finally:
            sup.request_stop()
            await sup.wait_stopped()
            await sb.close()

    code, sup, m = run(main())
    assert code == 3
    assert m.restarts == 2
    assert m.last_exit["returncode"] == 0
    assert "acme_judge" in sup.failure.message and "status 0" in sup.failure.message
    assert "after 2 restarts" in sup.failure.message
    status, body = sup.health()
    assert status == 503 and body["error"]["code"] == "GR-START-CRASH"


def test_readiness_timeout_reports_phase_and_log_tail(tmp_path: Path, run) -> None:
    (tmp_path / "app.py").write_text(
        "import time\nfor i in range(60):\n    print('warming up step', i, flush=True)\ntime.sleep(3600)\n"
    )

    async def main():
        sb = await start_sandbox(tmp_path / "sb")
        sup = Supervisor(fast_options(server_ready_timeout_s=1.0))
        await add_member(sup, sb, "slowpoke", [sys.executable, str(tmp_path / "app.py")], tmp_path, tmp_path / "logs")
        try:
            with pytest.raises(StartError) as e:
                await sup.start()
            return e.value
        finally:
            sup.request_stop()
            await sup.wait_stopped()
            await sb.close()

    err = run(main())
    assert err.code == "GR-START-TIMEOUT"
    assert "slowpoke" in err.message and "phase:" in err.message
    tail = err.extra["log_tails"]["slowpoke"]
    assert len(tail) == 40 and tail[-1] == "warming up step 59"
    assert "warming up step 59" in err.render()


def test_c24_uvicorn_workers_startup_failure(tmp_path: Path, run) -> None:
    """Case C24: uvicorn --workers 2 prints "running on", the lifespan raises in the workers, the
    parent exits 0. Not ready, a failure, bounded restarts, the traceback tail in the report."""
    import yaml

    case = CASES / "C24"
    app_dir = tmp_path / "acme_judge"
    app_dir.mkdir()
    (app_dir / "app.py").write_text((case / "resources_servers/acme_judge/app.py").read_text())
    launch = yaml.safe_load((case / "configs/acme_judge.yaml").read_text())["acme_judge"]["resources_servers"][
        "acme_judge"
    ]["launch"]
    argv = [sys.executable, "-m", *launch]  # uvicorn from the daemon's env (no PyPI needed)
    argv[argv.index("--port") + 1] = "{port}"

    async def main():
        sb = await start_sandbox(tmp_path / "sb")
        sup = Supervisor(fast_options(max_restarts=1))
        m = await add_member(sup, sb, "acme_judge", argv, app_dir, tmp_path / "logs")
        try:
            with pytest.raises(StartError) as e:
                await sup.start()
            return e.value, m
        finally:
            sup.request_stop()
            await sup.wait_stopped()
            await sb.close()

    err, m = run(main())
    assert m.status == "failed" and m.restarts == 1
    assert m.last_exit["returncode"] == 0  # uvicorn's parent says "success"
    assert "acme_judge" in err.message and "status 0" in err.message
    assert "RuntimeError: judge credentials missing" in err.render()


def test_c25_chatty_server_never_blocks(tmp_path: Path, run) -> None:
    """Case C25: ~100 KB per stream at start-up, ~10 KB per request; healthy after 200 requests,
    every byte in the log file, the tail in memory."""
    src = (CASES / "C25/resources_servers/chatty/app.py").read_text()
    assert "9251" in src
    (tmp_path / "app.py").write_text(src.replace("9251", "int(__import__('sys').argv[1])"))

    async def main():
        sb = await start_sandbox(tmp_path / "sb")
        sup = Supervisor(fast_options())
        m = await add_member(
            sup, sb, "chatty", [sys.executable, str(tmp_path / "app.py"), "{port}"], tmp_path, tmp_path / "logs"
        )
        try:
            await sup.start()
            async with httpx.AsyncClient(trust_env=False) as c:
                for _ in range(200):
                    assert (await c.get(m.url, timeout=5)).status_code == 200
            await asyncio.sleep(0.2)
            m.log.drain_now()
            return m.log.path.stat().st_size, m.log.tail(5)
        finally:
            sup.request_stop()
            await sup.wait_stopped()
            await sb.close()

    size, tail = run(main())
    assert size > 2_000_000
    assert tail[-1].startswith("request log 099")
