"""Watching many servers' exits under the opensandbox backend: requests per second to execd and the
time to see an exit, at N sandboxes, asked each on its own clock (as each server's handle did: its
command's status every 0.5 s, its log every 0.25 s) against one pass a second for all
(sandbox/opensandbox/passes.py, as the handles ask now). Prints a table and one JSON line.

    ./uvw run python bench/opensandbox_watch.py [--sandboxes 8 16]

Runs the tests' real OpenSandbox server on podman with the project's execd stand-in
(tests/helpers/opensandbox/; needs root, podman, runc). The N sandboxes are made through
:meth:`OpenSandboxEnvironment.prepare` (creates under the default bound); each runs a background
``sleep`` ending at its own time (``WINDOW_S`` + i * 0.1 s); the requests of the first ``WINDOW_S``
seconds, while every command runs, give requests/s; an exit's latency is when it was seen less
when its ``sleep`` ended (the command's start, as execd answered it, plus its length).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

WINDOW_S = 4.0


async def watch(boxes: list, mode: str) -> dict:
    from opensandbox.models.execd import RunCommandOpts

    from sandbox.opensandbox.passes import Passes

    passes = Passes(call_s=3.0)
    calls = {"n": 0, "window": 0}
    t0 = time.monotonic()

    async def call(make):
        calls["n"] += 1
        if time.monotonic() - t0 < WINDOW_S:
            calls["window"] += 1
        return await asyncio.wait_for(make(), 3.0)

    async def own_clock(make, every_s: float):
        await asyncio.sleep(every_s)
        return await call(make)

    starts = []
    for i, box in enumerate(boxes):
        ex = await box.commands.run(["sleep", f"{WINDOW_S + 0.1 * i:.1f}"], opts=RunCommandOpts(background=True))
        starts.append((box, ex.id, time.monotonic() + WINDOW_S + 0.1 * i))
    t0 = time.monotonic()
    calls["n"] = calls["window"] = 0

    def ask(make, every_s: float):
        return own_clock(make, every_s) if mode == "handles" else passes.ask(lambda: call(make))

    async def one(box, cid: str, ends: float) -> float:
        def status():
            return box.commands.get_command_status(cid)

        def log():
            return box.commands.get_background_command_logs(cid, None)

        async def logs():
            while True:
                await ask(log, 0.25)

        pump = asyncio.ensure_future(logs())
        try:
            while True:
                st = await ask(status, 0.5)
                if st.running is False:
                    return time.monotonic() - ends
        finally:
            pump.cancel()

    lat = await asyncio.gather(*(one(*s) for s in starts))
    await passes.close()
    window = min(WINDOW_S, time.monotonic() - t0)
    return {
        "requests_per_s": round(calls["window"] / window, 1),
        "exit_seen_p50_s": round(statistics.median(lat), 3),
        "exit_seen_max_s": round(max(lat), 3),
    }


async def run(n: int, server, work: Path) -> dict:
    from sandbox.opensandbox.environment import OpenSandboxEnvironment
    from sandbox.opensandbox.service import SandboxService
    from sandbox.opensandbox.spec import RunLabels
    from sandbox.policy import EgressPolicy
    from tests.helpers.opensandbox.runs import connection, servers_apart

    conn = connection(server)
    service = SandboxService(conn)
    env = await OpenSandboxEnvironment.open(service, RunLabels.new(work, "bench"), EgressPolicy(), work)
    try:
        t0 = time.monotonic()
        await env.prepare(servers_apart(n, work))  # a venv each: a sandbox each
        made_s = time.monotonic() - t0
        boxes = list(env.groups.ready.values())
        out = {"sandboxes": n, "created_s": round(made_s, 1), "most_creates_in_flight": env.gate.max_seen}
        for mode in ("handles", "passes"):
            out[mode] = await watch(boxes, mode)
        return out
    finally:
        await env.close()
        await service.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sandboxes", type=int, nargs="+", default=[8, 16])
    args = ap.parse_args()
    from tests.helpers.opensandbox.images import ensure_images
    from tests.helpers.opensandbox.server import running_server

    images = ensure_images()
    results = []
    with running_server(images.sandbox, images.execd) as server:
        for n in args.sandboxes:
            with tempfile.TemporaryDirectory(prefix="osb-watch-") as work:
                results.append(asyncio.run(run(n, server, Path(work))))
    print(f"{'N':>4} {'mode':>8} {'req/s':>8} {'exit p50 s':>11} {'exit max s':>11}")
    for r in results:
        for mode in ("handles", "passes"):
            m = r[mode]
            print(
                f"{r['sandboxes']:>4} {mode:>8} {m['requests_per_s']:>8} {m['exit_seen_p50_s']:>11} {m['exit_seen_max_s']:>11}"
            )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
