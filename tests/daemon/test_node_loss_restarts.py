"""A server's exit because its node was lost (placement ray: the replica's handle ends ``node-lost``,
docs/scale-out.md "Node loss") is not the server's failure and never ends the run: it is
restarted without counting toward ``max_restarts``, and two such exits in a row during start-up
are not taken for a start-up crash that repeats itself (case C29). A real server process under the
real supervisor, its exit marked ``node-lost`` as the replica's handle marks it.

Regression: the bundled example losing its busiest worker twice (tests/placement/
test_node_loss_example.py) had one replica end ``node-lost`` four times, twice while starting
with the same (empty) last log line: the environment failed and the daemon stopped, its head
server gone."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from gym_runtime.supervise import Supervisor
from gym_runtime.supervise.member import NODE_LOST, READY, STARTING
from tests.daemon.conftest import add_member, fast_options, start_sandbox

# says the same line on every start; serves only once the test created ``serve`` beside it
APP = """import os, sys
from http.server import HTTPServer, BaseHTTPRequestHandler
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
print("loading config", flush=True)
if not os.path.exists(os.path.join(os.path.dirname(__file__), "serve")):
    import time; time.sleep(3600)
HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def lose_its_node(proc) -> None:
    """What the replica's handle reports when its node is lost: the exit marked ``node-lost``."""
    proc.mark(NODE_LOST, "node 10.0.0.7 (3f2a9c1e) was lost: ActorUnavailableError")
    proc.kill_now()


def test_node_losses_are_restarted_beyond_max_restarts_and_never_fail_the_start(tmp_path: Path, run) -> None:
    (tmp_path / "app.py").write_text(APP)

    async def main():
        sb = await start_sandbox(tmp_path / "sb")
        sup = Supervisor(fast_options(max_restarts=1))
        m = await add_member(
            sup, sb, "acme_math", [sys.executable, str(tmp_path / "app.py"), "{port}"], tmp_path, tmp_path / "logs"
        )
        lost: list = []

        async def lose_while_starting(times: int) -> None:
            for _ in range(times):  # each start, once it said its (same) line
                while not (
                    m.status == STARTING
                    and m.proc is not None
                    and m.proc not in lost
                    and m.log.last_line() == "loading config"
                ):
                    await asyncio.sleep(0.02)
                lost.append(m.proc)
                lose_its_node(m.proc)
            (tmp_path / "serve").write_text("")

        try:
            losses = asyncio.ensure_future(lose_while_starting(3))
            await sup.start()  # three losses during start-up, max_restarts 1: still ready
            await losses
            starting = (m.restarts, m.node_losses, sup.state)
            before = m.proc
            lose_its_node(before)  # once more after ready
            await sup.until(lambda: m.status == READY and m.proc is not before)
            return starting, (m.restarts, m.node_losses, sup.state, sup.failure, m.last_exit["reason"])
        finally:
            sup.request_stop()
            await sup.wait_stopped()
            await sb.close()

    starting, after = run(main())
    assert starting == (3, 3, "ready")
    assert after == (4, 4, "ready", None, NODE_LOST)
