"""Time ``dry-run --watch`` from an edit of a resources server's ``verify()`` to the new table; asserts nothing.

    ./uvw run python bench/watch.py [--edits N] [--samples K]

Copies the bundled example with its own ``arithmetic`` server (``tests/helpers/watch.py``), starts
the watch, waits for the first table, then N times (default 10) flips the server's ``REWARD`` and
times from the write to the end of the next table. Prints each time, the median, and the load
average. Target: a median <= 3 s on an idle host.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.helpers.environments import shared_venvs  # noqa: E402
from tests.helpers.watch import WatchRun, set_reward, watched_quickstart  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--edits", type=int, default=10)
    ap.add_argument("--samples", type=int, default=2)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        pkg, rows = watched_quickstart(work)
        run = WatchRun(
            pkg,
            rows,
            work / "run",
            "--samples",
            str(a.samples),
            env={"GYM_RUNTIME_HOME": str(work / "home"), **shared_venvs()},
        )
        try:
            run.table(1)
            took = []
            for i in range(a.edits):
                t0 = time.perf_counter()
                set_reward(pkg, f"REWARD = {float(i % 2)}")  # 0.0, 1.0, 0.0, ...: every edit moves the mean
                run.table(i + 2)
                took.append(time.perf_counter() - t0)
                print(f"edit {i + 1}: {took[-1]:.2f} s", flush=True)
            print(
                f"median edit -> new table: {statistics.median(took):.2f} s over {len(took)} edits "
                f"(min {min(took):.2f}, max {max(took):.2f}); load average {os.getloadavg()}"
            )
            print(f"exit on Ctrl-C: {run.interrupt()}")
        finally:
            run.close()


if __name__ == "__main__":
    main()
