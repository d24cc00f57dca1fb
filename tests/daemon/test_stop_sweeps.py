"""The last two sweeps of a stop run at once (gym_runtime/supervise/supervisor.py, ``_shutdown``):
what is left in the servers' process groups (``reap_orphans``) and the processes holding the run's
mark (``run_mark.kill_marked``, which reads every process's environment in a thread). One after the
other they added their times (0.16 s and 0.10 s at 22 servers on a loaded host)."""

from __future__ import annotations

import asyncio
import threading

from gym_runtime.supervise import Supervisor, run_mark
from gym_runtime.supervise import supervisor as supervisor_module
from tests.daemon.conftest import fast_options


def test_the_group_sweep_and_the_mark_sweep_run_at_once(monkeypatch) -> None:
    marked = threading.Event()
    seen: dict[str, object] = {}

    async def reap_orphans(pgids: set[int]) -> None:
        # returns only once the mark sweep has begun: one after the other, this waits in vain
        seen["overlapped"] = await asyncio.to_thread(marked.wait, 10)

    def kill_marked(mark: str) -> list[str]:
        seen["mark"] = mark
        marked.set()
        return []

    monkeypatch.setattr(supervisor_module, "reap_orphans", reap_orphans)
    monkeypatch.setattr(run_mark, "kill_marked", kill_marked)
    sup = Supervisor(fast_options())

    async def main() -> None:
        await sup._shutdown(1.0)

    asyncio.run(main())
    assert seen == {"overlapped": True, "mark": sup.run_mark}
