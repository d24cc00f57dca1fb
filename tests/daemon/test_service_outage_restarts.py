"""A server that cannot be given a sandbox because the sandbox service does not answer (backend
opensandbox: its start ends ``service-lost``, gym_runtime/supervise/service_outage.py) is not the
server's failure: it is started again every ``backoff_max_s`` without counting toward
``max_restarts`` and never taken for a start-up exit that repeats itself, ``/health`` says
``degraded`` with why while it waits, and once the backend's deadline passed (``service-gone``)
the run fails with ``GR-OSB-UNREACHABLE`` naming the service, never with a hint to fix the server
(case C73; against a real OpenSandbox server: tests/cases/test_c73_outage.py). A real server
process under the real supervisor, its exit marked as the opensandbox backend marks it."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from gym_runtime.supervise import Supervisor
from gym_runtime.supervise.member import READY, SERVICE_GONE, SERVICE_LOST
from tests.daemon.conftest import add_member, fast_options, start_sandbox
from tests.daemon.test_node_loss_restarts import APP

WHY = (
    "OpenSandbox server unreachable since 03:00:00 UTC (12s): the OpenSandbox server http://127.0.0.1:9 did not answer"
)


def lose_the_service(proc, reason: str = SERVICE_LOST) -> None:
    proc.mark(reason, WHY + ("; waiting up to 600s for it" if reason == SERVICE_LOST else "; gave up after 600s"))
    proc.kill_now()


def test_the_service_outage_is_waited_out_uncounted_and_named(tmp_path: Path, run) -> None:
    (tmp_path / "app.py").write_text(APP)
    (tmp_path / "serve").write_text("")

    async def main():
        sb = await start_sandbox(tmp_path / "sb")
        sup = Supervisor(fast_options(max_restarts=1, backoff_max_s=1.0))
        m = await add_member(
            sup, sb, "code_lookup", [sys.executable, str(tmp_path / "app.py"), "{port}"], tmp_path, tmp_path / "logs"
        )
        try:
            await sup.start()
            sup.state = "ready"  # as the environment sets it once every server is ready
            seen = []
            for _ in range(3):  # three outages in a row, more than max_restarts, each start the same exit
                before = m.proc
                lose_the_service(before)
                await sup.until(lambda before=before: m.proc is not before or m.last_exit is not None)
                await asyncio.sleep(0.05)
                seen.append((m.status, sup.health()))
                await sup.until(lambda before=before: m.proc is not before and m.status == READY)
            healthy = sup.health()
            lose_the_service(m.proc, SERVICE_GONE)
            await sup.until(lambda: sup.failure is not None)
            return seen, healthy, (m.restarts, sup.exit_code), sup.failure
        finally:
            sup.request_stop()
            await sup.wait_stopped()
            await sb.close()

    seen, healthy, counts, failure = run(main())
    for status, (code, body) in seen:
        assert status == "restarting" and code == 503 and body["status"] == "degraded", body
        assert body["sandbox_service"]["code_lookup"].startswith("OpenSandbox server unreachable since 03:00:00 UTC")
    assert healthy == (200, {"status": "ready"})
    assert counts == (0, 3)  # no restart counted; the run fails only once the deadline passed
    assert failure.code == "GR-OSB-UNREACHABLE" and failure.exit_code == 3
    assert "'code_lookup' could not be given a new sandbox: OpenSandbox server unreachable since" in failure.message
    assert "gave up after 600s" in failure.message
    assert "not at fault" in failure.hint and "fix the server" not in failure.hint
