"""A replica killed for memory on a node that lives (placement ray: the replica's handle ends
``oom``, docs/scale-out.md "Crash, out of memory or node loss") is the server's failure: restarted
with the supervisor's usual backoff and counted toward ``max_restarts``, never taken for a node's
loss; past its restarts the environment fails with ``GR-PLACE-OOM``, the memory Ray measured named
and the fix (the server's ``placement.memory``). A real server process under the real supervisor,
its exit marked ``oom`` as the replica's handle marks it."""

from __future__ import annotations

import sys
from pathlib import Path

from gym_runtime.supervise import Supervisor
from gym_runtime.supervise.member import FAILED, OOM, READY
from tests.daemon.conftest import add_member, fast_options, start_sandbox
from tests.daemon.test_node_loss_restarts import APP

DETAIL = (
    "its worker was killed by Ray's memory monitor on node 10.0.0.7 (3f2a9c1e): the node's memory was "
    "3.54GB used of 23.54GB; Memory usage 3728809984B exceeded threshold of 3715600640B (14.7% of "
    "25276194816B limit); its placement.memory: none declared"
)


def test_an_oom_killed_replica_is_restarted_as_a_crash_then_fails_naming_memory_and_the_fix(
    tmp_path: Path, run
) -> None:
    (tmp_path / "app.py").write_text(APP)
    (tmp_path / "serve").write_text("")

    async def main():
        sb = await start_sandbox(tmp_path / "sb")
        sup = Supervisor(fast_options(max_restarts=1, keep_going=True))
        m = await add_member(
            sup, sb, "acme_math", [sys.executable, str(tmp_path / "app.py"), "{port}"], tmp_path, tmp_path / "logs"
        )
        try:
            await sup.start()
            first = m.proc
            first.mark(OOM, DETAIL)
            first.kill_now()
            await sup.until(lambda: m.status == READY and m.proc is not first)
            once = (m.restarts, m.node_losses, m.last_exit["reason"], m.last_exit["detail"])
            m.proc.mark(OOM, DETAIL)
            m.proc.kill_now()
            await sup.until(lambda: m.status == FAILED)
            return once, sup.failure
        finally:
            sup.request_stop()
            await sup.wait_stopped()
            await sb.close()

    once, failure = run(main())
    assert once == (1, 0, OOM, DETAIL)  # counted as a crash, not as a node's loss
    assert failure is not None and failure.code == "GR-PLACE-OOM"
    assert "server 'acme_math' exited with status" in failure.message and "(oom): " + DETAIL in failure.message
    assert "after 1 restart" in failure.message
    assert "`memory:` in its `placement:` block" in failure.hint
