"""CLI start-up figures: wall time of short commands as a user runs them. Prints; asserts nothing.

    ./uvw run python bench/cli.py [--runs 15] [--bin PATH/TO/gym-runtime]

Commands: ``--help``, ``status`` (no daemon running: the shortest path to an answer), ``validate``
and ``config`` of the bundled example. Each is run ``--runs`` times after one unmeasured run;
medians and minimums are printed, with ``python -X importtime``'s five most expensive imports of
``--help``. Target: every command < 0.3 s. An install without bytecode for its own modules (``uv sync``
on a host with ``PYTHONDONTWRITEBYTECODE=1``) pays compilation on every start: the line
``bytecode`` says whether the runtime's modules have it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "native-quickstart"


def timed(argv: list[str], env: dict[str, str], runs: int) -> tuple[float, float]:
    subprocess.run(argv, env=env, capture_output=True)
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, env=env, capture_output=True)
        out.append(time.perf_counter() - t0)
    return statistics.median(out), min(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--bin", default=str(Path(sys.executable).with_name("gym-runtime")))
    args = ap.parse_args()
    home = tempfile.mkdtemp(prefix="gym-runtime-cli-bench-")
    env = {**os.environ, "GYM_RUNTIME_HOME": home}
    cached = list((ROOT / "gym_runtime" / "cli" / "__pycache__").glob("main.*.pyc"))
    print(f"bytecode: {'present' if cached else 'absent'} for gym_runtime/cli (python {sys.version.split()[0]}); "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    med, best = timed([sys.executable, "-c", "pass"], env, args.runs)
    print(f"{'python -c pass':<22} median {med * 1000:6.0f} ms   min {best * 1000:6.0f} ms   (the interpreter alone)")
    for label, argv in (("--help", ["--help"]), ("status (no daemon)", ["status"]),
                        ("validate example", ["validate", str(EXAMPLE)]),
                        ("config example", ["config", str(EXAMPLE)])):
        med, best = timed([args.bin, *argv], env, args.runs)
        print(f"{label:<22} median {med * 1000:6.0f} ms   min {best * 1000:6.0f} ms   (target < 300 ms)")
    imp = subprocess.run([sys.executable, "-X", "importtime", "-m", "gym_runtime.cli.main", "--help"], env=env,
                         capture_output=True, text=True).stderr.splitlines()
    rows = sorted((int(ln.split("|")[1]), ln.split("|")[2].strip()) for ln in imp if ln.startswith("import time:")
                  and ln.split("|")[1].strip().isdigit())
    print("--help, largest cumulative imports: " + ", ".join(f"{n} {us / 1000:.0f} ms" for us, n in rows[-5:][::-1]))


if __name__ == "__main__":
    main()
