"""Bench the first start of a pod: prints figures, asserts nothing.

    ./uvw run python bench/fresh_pod.py [--runs 3] [--peer-cold SECONDS] [--blend]

The real NeMo Gym 0.7.0 package (the wheel's ``example_single_tool_call``, ``simple_agent``,
``vllm_model`` and ``legacy_agent`` trees, unchanged: tests/helpers/gym_package.py), or with
``--blend`` the 22-server blend of seven environments (:func:`bench.blend.assemble_blend`), the built-in
stub model as policy, a state root and venv root of the bench's own, the uv cache of the caller
(warm). Each start is ``gym-runtime up`` until its ready line, then SIGTERM; per start: the ready
time (in the daemon and wall), the CPU seconds its tree used until ready, the stop, processes left.

1. *Image build*: ``gym-runtime prefetch PKG --drop-venvs`` (what an image built for this package
   runs; the venvs are dropped, the caches kept): its time.
2. *Fresh pod from the image*: no venvs; the uv cache, the recorded resolutions and the bytecode
   store as ``prefetch`` left them (``--runs`` starts, the venvs deleted before each).
3. *Fresh pod from an image seeded for the release only*: a new state root filled by
   ``prefetch --gym-release --drop-venvs`` (the image's ``SEED_GYM_RELEASE=1``; no bytecode store).
4. *Cold*: no venvs, no bytecode store, no recorded resolutions (a pod with only a uv cache).

With ``--peer-cold`` (NeMo Gym's own ``ng_run`` cold start on this machine, e.g. the side-by-side
harness's median) each median is also printed as a ratio of it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.up import cpu_s, ready, stop, tree  # noqa: E402

RELEASE = "0.7.0"


def starts(
    label: str,
    pkg: Path,
    work: Path,
    env: dict[str, str],
    python: str,
    runs: int,
    reset: Callable[[], None],
    peer_cold: float | None,
) -> None:
    """``runs`` starts, ``reset()`` ahead of each; one line per start and the median."""
    took = []
    for i in range(runs):
        reset()
        # a loaded host's learning start takes minutes: deadlines far above up's defaults
        proc, info, wall = ready(
            pkg,
            work / f"{label.split()[0]}-{i}",
            env,
            ("--python", python, "--ready-timeout", "900", "--startup-timeout", "1800"),
        )
        cpu = cpu_s(tree(proc.pid))
        stopped, left = stop(proc)
        took.append(wall)
        print(
            f"  {label}, start {i + 1}: ready {info['startup_s']:.2f} s in the daemon, {wall:.2f} s wall, "
            f"{cpu:.1f} CPU s to ready; stop {stopped:.2f} s, {left} left; load {os.getloadavg()[0]:.1f}"
        )
    med = statistics.median(took)
    ratio = f" = {med / peer_cold:.2f}x the peer's cold {peer_cold:.1f} s" if peer_cold else ""
    print(f"{label}: median ready {med:.2f} s wall{ratio}")


def prefetch(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "gym_runtime.cli.main", "prefetch", *argv, "--drop-venvs"],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=3600,
    )
    if done.returncode != 0:
        raise SystemExit(f"prefetch {' '.join(argv)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return time.monotonic() - t0


def main() -> None:
    from tests.helpers.gym_package import assemble_gym_package, gym_wheel, release_python

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--peer-cold", type=float, metavar="S", help="the peer's cold start on this machine, seconds")
    p.add_argument("--blend", action="store_true", help="the 22-server blend (bench/blend.py) instead of the example")
    args = p.parse_args()
    python = release_python(RELEASE)
    if python is None:
        raise SystemExit(f"no Python that nemo-gym {RELEASE} accepts (>= 3.13.14)")
    work = Path(tempfile.mkdtemp(prefix="gym-runtime-fresh-pod-"))
    wheel = gym_wheel(python, RELEASE)
    if args.blend:
        from bench.blend import assemble_blend

        pkg, what = assemble_blend(wheel, work / "pkg")[0], "blend (22 servers)"
    else:
        pkg, what = assemble_gym_package(wheel, work / "pkg")[0], "package"
    print(f"fresh pod: nemo-gym {RELEASE} {what}, {python}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    try:
        home = work / "image-home"
        env = {"GYM_RUNTIME_HOME": str(home), "GYM_RUNTIME_VENV_DIR": str(home / "venvs")}
        print(f"image build (prefetch PKG --drop-venvs): {prefetch([str(pkg), '--python', python], env):.1f} s")
        venvs = home / "venvs"
        starts(
            "fresh pod from the image",
            pkg,
            work,
            env,
            python,
            args.runs,
            lambda: shutil.rmtree(venvs, ignore_errors=True),
            args.peer_cold,
        )

        home = work / "release-home"
        env = {"GYM_RUNTIME_HOME": str(home), "GYM_RUNTIME_VENV_DIR": str(home / "venvs")}
        print(
            f"release seed (prefetch --gym-release --drop-venvs): "
            f"{prefetch(['--gym-release', '--python', python], env):.1f} s"
        )
        seed = work / "release-seed"
        shutil.copytree(home, seed)

        def from_seed(home: Path = home) -> None:  # each start begins from the seed alone
            shutil.rmtree(home, ignore_errors=True)
            shutil.copytree(seed, home)

        starts("release-seeded pod", pkg, work, env, python, args.runs, from_seed, args.peer_cold)

        home = work / "cold-home"
        env = {"GYM_RUNTIME_HOME": str(home), "GYM_RUNTIME_VENV_DIR": str(home / "venvs")}
        starts(
            "cold (uv cache only)",
            pkg,
            work,
            env,
            python,
            args.runs,
            lambda: shutil.rmtree(home, ignore_errors=True),
            args.peer_cold,
        )
    except BaseException:
        print(f"kept {work} (the runs' logs) for a look")
        raise
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
