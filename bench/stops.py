"""Stop ``gym-runtime up`` many times and print the distribution of stop times; asserts nothing.

    ./uvw run python bench/stops.py [PKG] [--runs N] [--gym [--gym-version V]] [--signal INT|TERM]
                                    [--isolation LEVEL] [--at SECONDS [--cold]]

Each run: start ``up`` (venvs reused after the first run), wait for the ready line, send a burst of
rollouts through ``POST /rollouts/run`` (so the sandbox's forwards carry traffic just before the
stop), send the signal, and time until the daemon exits. With ``--at``, the signal comes that many
seconds after the launch instead, in whatever phase the start is (the daemon's last progress line
is printed): a first, unmeasured run to ready builds the venvs, or with ``--cold`` every run starts
with the venvs deleted (a stop during the build). Printed per run: stop seconds, the load
average, exit code, processes left 1 s later, the daemon's own "stop took" line (seconds per
teardown step) and any step the daemon named as slow (``ignored SIGTERM``, ``did not
finish within``). Then min / median / p90 / max. A run that has not exited 40 s after the signal is
counted as a hang and killed. ``--gym`` uses the real NeMo Gym package of ``--gym-version`` (0.4.0
by default: three server trees from the PyPI wheel, all Ray drivers, one private Ray head; 0.7.0
adds the ``legacy_agent`` environment server, on a Python >= 3.13.14) with the built-in stub model
as policy.
Target: every stop well under 1 s for the bundled example, and no stop anywhere near a pod's 30 s.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.helpers.daemon import running  # noqa: E402

SLOW_MARKS = ("ignored SIGTERM", "did not finish within", "unclean stop", "not finished after")


def rows_for(pkg_rows: list[dict], agent: str, n: int) -> list[dict]:
    ref = {"type": "responses_api_agents", "name": agent}
    return [{**pkg_rows[i % len(pkg_rows)], "agent_ref": ref} for i in range(n)]


def example_rows() -> tuple[Path, list[dict], str]:
    pkg = ROOT / "examples/native-quickstart"
    rows = [json.loads(line) for line in (ROOT / "examples/native-quickstart.jsonl").read_text().splitlines() if line]
    agent = rows[0]["agent_ref"]["name"]
    return pkg, rows, agent


def gym_rows(work: Path, version: str = "0.4.0") -> tuple[Path, list[dict], str, dict[str, str], tuple[str, ...]]:
    sys.path.insert(0, str(ROOT))
    from tests.helpers.gym_package import assemble_gym_package, gym_wheel, release_python

    python = release_python(version)
    if python is None:
        raise SystemExit(f"--gym needs a Python that nemo-gym {version} accepts under pyenv")
    pkg, rows = assemble_gym_package(gym_wheel(python, version), work / "gym-pkg")
    env = (
        {"GYM_RUNTIME_PIN_NEMO_GYM": "0.4.0", "GYM_RUNTIME_PIN_OPENAI": "2.7.2", "GYM_RUNTIME_PIN_MODE": "gym"}
        if version == "0.4.0"
        else {"GYM_RUNTIME_PIN_NEMO_GYM": version}
    )
    return pkg, rows, "example_single_tool_call_simple_agent", env, ("--python", python)


def one_stop(
    pkg: Path,
    rows: list[dict],
    work: Path,
    env: dict[str, str],
    args: tuple[str, ...],
    sig: int,
    at: float | None = None,
) -> dict:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gym_runtime.cli.main", "up", str(pkg), "--work-dir", str(work), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, **env},
    )
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)
    reader.start()
    if at is None:
        line = proc.stdout.readline()
        if not line:
            proc.wait()
            reader.join(5)
            return {"error": f"no ready line (exit {proc.returncode}): {''.join(err[-5:])}"}
        info = json.loads(line)
        with httpx.Client(base_url=info["head_server"], trust_env=False, timeout=120) as head:
            head.post("/rollouts/run", json={"examples": rows})
    else:
        time.sleep(at)
        if proc.poll() is not None:
            reader.join(5)
            return {"error": f"exited {proc.returncode} before the signal: {''.join(err[-5:])}"}
    phase = err[-1].strip() if err else "(no progress line yet)"
    pids = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
    t0 = time.monotonic()
    proc.send_signal(sig)
    try:
        code = proc.wait(40)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        code = "hang"
    took = time.monotonic() - t0
    reader.join(5)
    time.sleep(1)
    left = sum(running(p) for p in pids)
    slow = [ln.strip() for ln in err if any(m in ln for m in SLOW_MARKS)]
    steps = next((ln.split("] ", 1)[-1].strip() for ln in err if "stop took" in ln), "")
    return {
        "stop_s": took,
        "exit": code,
        "left": left,
        "slow": slow,
        "steps": steps,
        "load": os.getloadavg()[0],
        "phase": phase,
    }


def main() -> None:
    argv = sys.argv[1:]
    runs = int(argv[argv.index("--runs") + 1]) if "--runs" in argv else 10
    sig = (
        signal.SIGTERM
        if "TERM" in (argv[argv.index("--signal") + 1] if "--signal" in argv else "INT")
        else signal.SIGINT
    )
    extra = ("--isolation", argv[argv.index("--isolation") + 1]) if "--isolation" in argv else ()
    work = Path(tempfile.mkdtemp(prefix="gym-runtime-stops-"))
    env = {"GYM_RUNTIME_HOME": str(work / "home"), "GYM_RUNTIME_VENV_DIR": str(work / "venvs")}
    if "--gym" in argv:
        pkg, rows, agent, genv, args = gym_rows(
            work, argv[argv.index("--gym-version") + 1] if "--gym-version" in argv else "0.4.0"
        )
        env.update(genv)
        rows = rows_for(rows, agent, 11)
    else:
        positional = [
            a for i, a in enumerate(argv) if not a.startswith("--") and (i == 0 or not argv[i - 1].startswith("--"))
        ]
        pkg, rows, agent = example_rows()
        pkg = Path(positional[0]).resolve() if positional else pkg
        rows, args = rows_for(rows, agent, 24), ()
    at = float(argv[argv.index("--at") + 1]) if "--at" in argv else None
    cold = "--cold" in argv
    print(
        f"package: {pkg}; {runs} stops by {signal.Signals(sig).name}"
        + (f", {at:g} s after the launch{' with the venvs deleted' if cold else ''}" if at is not None else "")
    )
    if at is not None and not cold:
        r = one_stop(pkg, rows, work / "prepare", env, (*args, *extra), sig)
        print("venvs prepared by a run to ready" if "error" not in r else f"preparing run: {r['error']}")
    times: list[float] = []
    for i in range(runs):
        if cold:
            shutil.rmtree(work / "venvs", ignore_errors=True)
        r = one_stop(pkg, rows, work / f"run{i}", env, (*args, *extra), sig, at)
        if "error" in r:
            print(f"run {i + 1}: {r['error']}")
            continue
        times.append(r["stop_s"])
        print(
            f"run {i + 1}: stop {r['stop_s']:.2f} s (load average {r['load']:.1f}), exit {r['exit']}, "
            f"processes left {r['left']}"
            + (f"; slow: {' | '.join(r['slow'])}" if r["slow"] else "")
            + (f"\n  at: {r['phase']}" if at is not None else "")
            + (f"\n  daemon: {r['steps']}" if r["steps"] else "")
        )
    if times:
        times.sort()
        p90 = times[min(len(times) - 1, int(0.9 * len(times)))]
        print(
            f"stop seconds over {len(times)} runs: min {times[0]:.2f}, median {statistics.median(times):.2f}, "
            f"p90 {p90:.2f}, max {times[-1]:.2f}"
        )


if __name__ == "__main__":
    main()
