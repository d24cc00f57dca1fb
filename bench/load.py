"""Bench the daemon under load: prints figures, asserts nothing.

    ./uvw run python bench/load.py [PKG] [--rollouts 10000] [--batch 500] [--concurrency 64 256]
                                   [--isolation full] [--json OUT.json]

One ``gym-runtime up PKG`` (default: examples/native-quickstart with the built-in stub model) at
``--isolation`` (default: full, required). For each concurrency: ``--rollouts`` rollouts through
``POST /rollouts/run`` in batches of ``--batch`` rows, then the same through the agents' ``/run``
directly (the ready line's URLs, so the head server's own cost shows as the difference). Per
phase: rollouts per second, p50/p99 latency of one rollout, the daemon's RSS, open file
descriptors and TCP connections before and after (goal: flat within 10%), lost rows (neither a
result nor a row error; goal 0), failed rows by code, and server restarts (goal 0). The host's
load average is printed at the start and the end: on a shared host, figures are only comparable
at a low load. The CI test ``tests/reliability/test_load.py`` runs a reduced size and checks
correctness only.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers.daemon import kill_tree, read_ready_line, up_process  # noqa: E402 - after ROOT is on sys.path
from tests.helpers.load import (  # noqa: E402 - after ROOT is on sys.path
    example_rows,
    footprint,
    percentile,
    restarts,
    run_batch,
    run_direct,
    unanswered,
)


def phase(label: str, send, total: int, batch: int, pid: int, head: str) -> dict:
    """Send ``total`` rows in batches of ``batch`` with ``send(rows) -> BatchRun``; the figures."""
    send(example_rows(min(batch, 100)))  # warm-up: connection pools, first imports
    before = footprint(pid)
    latencies: list[float] = []
    lost = 0
    codes: collections.Counter[str] = collections.Counter()
    t0 = time.monotonic()
    for start in range(0, total, batch):
        rows = example_rows(min(batch, total - start))
        run = send(rows)
        lost += len(unanswered(run.results, len(rows)))
        latencies += [x for x in run.latency_s if x is not None]
        codes.update(r["error"]["code"] for r in run.results if isinstance(r.get("error"), dict))
    wall = time.monotonic() - t0
    after = footprint(pid)
    out = {
        "phase": label,
        "rollouts": total,
        "wall_s": round(wall, 1),
        "rollouts_per_s": round(total / wall, 1),
        "p50_s": round(percentile(latencies, 0.50), 3),
        "p99_s": round(percentile(latencies, 0.99), 3),
        "before": before,
        "after": after,
        "lost": lost,
        "failed": dict(codes),
        "restarts": {k: v for k, v in restarts(head).items() if v},
    }
    rss = 100 * (after["rss_mb"] - before["rss_mb"]) / before["rss_mb"]
    print(
        f"{label}: {total} rollouts in {wall:.1f} s = {out['rollouts_per_s']} rollouts/s; latency p50 "
        f"{out['p50_s']} s, p99 {out['p99_s']} s; daemon RSS {before['rss_mb']} -> {after['rss_mb']} MB "
        f"({rss:+.1f}%), fds {before['fds']} -> {after['fds']}, TCP connections {before['connections']} -> "
        f"{after['connections']}; lost rows {lost}; failed {dict(codes) or 0}; restarts {out['restarts'] or 0}",
        flush=True,
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("package", nargs="?", default=str(ROOT / "examples/native-quickstart"))
    ap.add_argument("--rollouts", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--isolation", default="full", choices=["full", "partial", "none"])
    ap.add_argument("--skip-direct", action="store_true", help="only POST /rollouts/run")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gym-runtime-load-"))
    load0 = os.getloadavg()
    print(
        f"package {args.package}; {args.rollouts} rollouts per phase in batches of {args.batch}; "
        f"isolation {args.isolation}; host: {os.cpu_count()} cores, load average {load0[0]:.2f} {load0[1]:.2f} "
        f"{load0[2]:.2f}",
        flush=True,
    )
    flags = ("--isolation", args.isolation) + (("--require-isolation",) if args.isolation == "full" else ())
    proc = up_process(Path(args.package), work, *flags)
    figures: list[dict] = []
    try:
        info = json.loads(read_ready_line(proc, timeout=900))
        head = info["head_server"]
        print(f"ready in {info['startup_s']} s (isolation {info['isolation']})", flush=True)
        for c in args.concurrency:
            figures.append(
                phase(
                    f"/rollouts/run, concurrency {c}",
                    lambda rows, c=c: run_batch(head, rows, c),
                    args.rollouts,
                    args.batch,
                    proc.pid,
                    head,
                )
            )
            if not args.skip_direct:
                figures.append(
                    phase(
                        f"agents' /run directly, concurrency {c}",
                        lambda rows, c=c: run_direct(info["servers"], rows, c),
                        args.rollouts,
                        args.batch,
                        proc.pid,
                        head,
                    )
                )
        proc.terminate()
        print(f"stopped with exit code {proc.wait(60)}")
    finally:
        kill_tree(proc)
    load1 = os.getloadavg()
    print(f"load average at the end: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "load_start": load0,
                    "load_end": load1,
                    "cores": os.cpu_count(),
                    "isolation": args.isolation,
                    "phases": figures,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
