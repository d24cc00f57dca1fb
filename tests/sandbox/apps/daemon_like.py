"""A daemon stand-in (project interpreter): starts a Sandbox at the level in argv[2], spawns
forker.py (which leaves a child and a double-forked setsid grandchild), prints READY with the
report, then blocks forever until it is SIGKILLed by the test."""

import asyncio
import json
import os
import sys
import time
from pathlib import Path

from sandbox import EgressPolicy, IsolationLevel, ProcessSpec, Sandbox


async def main():
    work = Path(sys.argv[1])
    level = None if sys.argv[2] == "auto" else IsolationLevel(sys.argv[2])
    sb = await Sandbox.start(EgressPolicy.from_environ({}), work, level=level)
    py, apps = Path(sys.argv[3]), Path(__file__).parent
    proc = sb.spawn(
        ProcessSpec(
            "forker",
            [str(py), str(apps / "forker.py")],
            work,
            {"PATH": "/usr/bin"},
            read_only_paths=[py.parent.parent, apps],
            writable_paths=[work],
            stdout_fd=os.open(os.devnull, os.O_WRONLY),
        )
    )
    time.sleep(0.05)
    deadline = time.monotonic() + 20
    while len(proc.tree()) < (5 if sb.level != IsolationLevel.NONE else 3) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    print(
        "READY "
        + json.dumps(
            {"level": sb.level.value, "warning": sb.report.warning, "holder": sb.holder.pid if sb.holder else None}
        ),
        flush=True,
    )
    await asyncio.Event().wait()


asyncio.run(main())
