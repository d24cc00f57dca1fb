"""Task sandbox figures: the ``gym_runtime`` provider against NeMo Gym's ``local`` provider. Prints a table and one JSON line.

    ./uvw run python bench/task_sandboxes.py [--creates 20] [--execs 200] [--parallel 8]

Both providers are driven the same way, through NeMo Gym 0.7.0's own ``AsyncSandbox`` in a venv
with ``nemo-gym==0.7.0`` (built once with uv into the tests' cache; needs PyPI the first time and a
Python >= 3.13.14). The ``gym_runtime`` sandboxes come from the daemon's task-sandbox service,
started in this process (its API on loopback, as under ``up``) with no image: the host's read-only
root. ``local`` runs the command on the host with no isolation at all, so it is the floor.

1. create -> first exec: ``start()`` of a sandbox and its first ``exec("true")``, ``--creates``
   times one after another (each sandbox stopped before the next): p50 and p99, ms.
2. exec latency: ``--execs`` sequential ``exec("true")`` in one sandbox: p50, p99 (ms).
3. exec throughput: ``--execs`` execs over ``--parallel`` concurrent callers in one sandbox:
   execs per second.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CLIENT = r"""
import asyncio, json, statistics, sys, time
from nemo_gym.sandbox import AsyncSandbox, SandboxSpec

def pct(xs, q):
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))] * 1000, 2)

async def bench(cfg, creates, execs, parallel):
    first = []
    for _ in range(creates):
        t0 = time.perf_counter()
        sb = await AsyncSandbox(cfg, SandboxSpec()).start()
        r = await sb.exec("true")
        first.append(time.perf_counter() - t0)
        assert r.return_code == 0, r
        await sb.stop()
    sb = await AsyncSandbox(cfg, SandboxSpec()).start()
    lat = []
    for _ in range(execs):
        t0 = time.perf_counter()
        await sb.exec("true")
        lat.append(time.perf_counter() - t0)
    async def worker(n):
        for _ in range(n):
            await sb.exec("true")
    t0 = time.perf_counter()
    await asyncio.gather(*(worker(execs // parallel) for _ in range(parallel)))
    wall = time.perf_counter() - t0
    await sb.stop()
    return {"create_first_exec_p50_ms": pct(first, 0.5), "create_first_exec_p99_ms": pct(first, 0.99),
            "exec_p50_ms": pct(lat, 0.5), "exec_p99_ms": pct(lat, 0.99),
            "execs_per_s": round((execs // parallel) * parallel / wall, 1)}

async def main():
    creates, execs, parallel = map(int, sys.argv[1:4])
    out = {}
    for name in ("gym_runtime", "local"):
        out[name] = await bench({name: {}}, creates, execs, parallel)
    print(json.dumps(out))

asyncio.run(main())
"""


async def run(args: argparse.Namespace) -> dict:
    from gym_runtime.task_sandboxes.api import TaskSandboxServer
    from gym_runtime.task_sandboxes.service import TaskSandboxService
    from gym_runtime.task_sandboxes.settings import TaskSandboxSettings
    from sandbox import EgressPolicy
    from tests.helpers.gym07 import gym07_venv
    from tests.helpers.gym_package import cache_dir

    python = gym07_venv(cache_dir() / "bench-gym07-venv")
    with tempfile.TemporaryDirectory() as tmp:
        service = TaskSandboxService(TaskSandboxSettings(), EgressPolicy(), Path(tmp) / "boxes")
        server = TaskSandboxServer(service)
        await server.start()
        try:
            env = {
                "PATH": "/usr/bin:/bin",
                "GYM_RUNTIME_SANDBOX_URL": server.url,
                "GYM_RUNTIME_SANDBOX_TOKEN": service.token("bench"),
            }
            proc = await asyncio.create_subprocess_exec(
                str(python),
                "-c",
                CLIENT,
                str(args.creates),
                str(args.execs),
                str(args.parallel),
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            out, err = await proc.communicate()
            if proc.returncode != 0:
                raise SystemExit(err.decode()[-3000:])
            return {"level": service.level, **json.loads(out.decode().strip().splitlines()[-1])}
        finally:
            await server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--creates", type=int, default=20)
    ap.add_argument("--execs", type=int, default=200)
    ap.add_argument("--parallel", type=int, default=8)
    args = ap.parse_args()
    res = asyncio.run(run(args))
    keys = ("create_first_exec_p50_ms", "create_first_exec_p99_ms", "exec_p50_ms", "exec_p99_ms", "execs_per_s")
    print(f"{'provider':<14}" + "".join(f"{k:>26}" for k in keys))
    for name in ("gym_runtime", "local"):
        print(f"{name:<14}" + "".join(f"{res[name][k]:>26}" for k in keys))
    print(f"(gym_runtime sandboxes at level {res['level']}: own user, pid, mount and network namespaces; local: none)")
    print(json.dumps({"bench": "task_sandboxes", **vars(args), **res}))


if __name__ == "__main__":
    main()
