"""CLI start-up figures: wall time of short commands as a user runs them. Prints; asserts nothing.

    ./uvw run python bench/cli.py [--runs 15] [--bin PATH/TO/gym-runtime]

Commands: ``--help``, ``status`` (no daemon running: the shortest path to an answer), ``validate``
and ``config`` of the bundled example, and ``validate`` of each ``--package PKG`` given (e.g. a
package of NeMo Gym 0.7.0 trees, whose SDK imports ``validate`` checks: target < 1 s); for each
validated package also the in-process cost of the Gym release checks alone (the SDK import scan
and each server's Python choice), best of ``--runs``. Each is run ``--runs`` times after one unmeasured run;
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
    ap.add_argument("--package", action="append", default=[], metavar="PKG", help="also validate PKG")
    args = ap.parse_args()
    home = tempfile.mkdtemp(prefix="gym-runtime-cli-bench-")
    env = {**os.environ, "GYM_RUNTIME_HOME": home}
    cached = list((ROOT / "gym_runtime" / "cli" / "__pycache__").glob("main.*.pyc"))
    print(
        f"bytecode: {'present' if cached else 'absent'} for gym_runtime/cli (python {sys.version.split()[0]}); "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    med, best = timed([sys.executable, "-c", "pass"], env, args.runs)
    print(f"{'python -c pass':<22} median {med * 1000:6.0f} ms   min {best * 1000:6.0f} ms   (the interpreter alone)")
    for label, argv in (
        ("--help", ["--help"]),
        ("status (no daemon)", ["status"]),
        ("validate example", ["validate", str(EXAMPLE)]),
        ("config example", ["config", str(EXAMPLE)]),
    ):
        med, best = timed([args.bin, *argv], env, args.runs)
        print(f"{label:<22} median {med * 1000:6.0f} ms   min {best * 1000:6.0f} ms   (target < 300 ms)")
    for pkg in args.package:
        med, best = timed([args.bin, "validate", pkg], env, args.runs)
        print(
            f"{'validate ' + Path(pkg).name:<22} median {med * 1000:6.0f} ms   min {best * 1000:6.0f} ms   (target < 1 s)"
        )
    for pkg in [str(EXAMPLE), *args.package]:
        scan, python = release_checks(pkg, args.runs)
        print(
            f"  {Path(pkg).name}: SDK import scan {scan * 1000:.0f} ms, Python choice of every server "
            f"{python * 1000:.0f} ms (in process, best of {args.runs})"
        )
    imp = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "gym_runtime.cli.main", "--help"],
        env=env,
        capture_output=True,
        text=True,
    ).stderr.splitlines()
    rows = sorted(
        (int(ln.split("|")[1]), ln.split("|")[2].strip())
        for ln in imp
        if ln.startswith("import time:") and ln.split("|")[1].strip().isdigit()
    )
    print("--help, largest cumulative imports: " + ", ".join(f"{n} {us / 1000:.0f} ms" for us, n in rows[-5:][::-1]))


def release_checks(pkg: str, runs: int) -> tuple[float, float]:
    """Seconds of the SDK import scan and of the Python checks of ``pkg`` (the best of ``runs``)."""
    sys.path.insert(0, str(ROOT))
    from gym_runtime.cli.validate import PLACEHOLDERS
    from gym_runtime.config import build_config
    from gym_runtime.gym_release import choose_release
    from gym_runtime.gym_release.imports import check_imports
    from gym_runtime.package import load_package
    from gym_runtime.settings import load_settings
    from gym_runtime.venvs.python_choice import python_problems

    settings = load_settings()
    package = load_package(pkg)
    release = choose_release(package, settings)
    merged = build_config(package, [], defaults=PLACEHOLDERS, release=release)
    scan, python = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        check_imports(package, release)
        t1 = time.perf_counter()
        python_problems(merged, settings)
        scan.append(t1 - t0)
        python.append(time.perf_counter() - t1)
    return min(scan), min(python)


if __name__ == "__main__":
    main()
