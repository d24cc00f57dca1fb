"""Bench ``gym-runtime up``: prints figures, asserts nothing.

    ./uvw run python bench/up.py [PKG] [--skip-gym | --only-gym]    # default: examples/native-quickstart

Figures for the bundled example: time-to-ready with venvs cached (the first run builds or reuses
them) and with NO venvs (an empty venv dir; uv cache warm), memory (RSS) of the whole process tree
at ready, daemon RSS and idle CPU over 5 s, crash detection latency (SIGKILL a server's app, time
until the head server reports it), shutdown time after SIGTERM once ready and in the middle of
start-up, and processes left afterwards. Then the same start figures for the real NeMo Gym 0.4.0
package (three server trees from the PyPI wheel, unchanged; tests/helpers/gym_package.py), whose
servers use Ray: one private Ray head is started for them; and how long after the first (learning)
start the daemon has compiled what those processes imported (gym_runtime/venvs/bytecode.py), and a
start with NO venvs but the bytecode store kept (gym_runtime/venvs/pyc_store.py): the pod that
keeps ``$GYM_RUNTIME_HOME`` and the uv cache on a volume. Each start also prints the CPU seconds
its process tree used until ready (live processes plus the children they reaped). The bench runs
with a ``GYM_RUNTIME_HOME`` of its own, so its first start has an empty store.
Targets: bundled cached start < 3 s; real Gym package cached start <= 16 s; crash seen < 1 s;
shutdown < 1.5 s with nothing left; idle CPU < 1 %; daemon RSS < 150 MB.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.helpers.daemon import running  # noqa: E402


def launch(pkg: Path, work: Path, env: dict[str, str] | None = None, args: tuple[str, ...] = ()) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "gym_runtime.cli.main", "up", str(pkg), "--work-dir", str(work), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
        env={**os.environ, **(env or {})},
    )


def ready(
    pkg: Path, work: Path, env: dict[str, str] | None = None, args: tuple[str, ...] = ()
) -> tuple[subprocess.Popen, dict, float]:
    """Start ``up`` and wait for its ready line: (process, ready info, wall seconds)."""
    t0 = time.monotonic()
    proc = launch(pkg, work, env, args)
    line = proc.stdout.readline()
    wall = time.monotonic() - t0
    if not line:
        proc.wait()
        raise SystemExit(f"up exited {proc.returncode} without a ready line (logs: {work / 'logs'})")
    return proc, json.loads(line), wall


def start_figure(
    label: str, pkg: Path, work: Path, env: dict[str, str] | None = None, args: tuple[str, ...] = ()
) -> tuple[subprocess.Popen, dict]:
    """Print one time-to-ready line (and the tree's memory); returns the running daemon."""
    proc, info, wall = ready(pkg, work, env, args)
    procs = tree(proc.pid)
    rss = sum(p.memory_info().rss for p in procs if p.is_running())
    print(
        f"time-to-ready, {label}: {info['startup_s']:.2f} s in the daemon, {wall:.2f} s wall "
        f"(isolation {info['isolation']}, ray {info['ray']['mode']}); tree {len(procs)} processes, "
        f"{rss / 2**20:.0f} MB RSS, {cpu_s(procs):.1f} CPU s; load average {os.getloadavg()[0]:.1f}"
    )
    return proc, info


def tree(pid: int) -> list[psutil.Process]:
    try:
        p = psutil.Process(pid)
        return [p, *p.children(recursive=True)]
    except psutil.Error:
        return []


def cpu_s(procs: list[psutil.Process]) -> float:
    """CPU seconds (user + system) of ``procs`` and of the children they reaped."""
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def stop(proc: subprocess.Popen) -> tuple[float, int]:
    """SIGTERM; seconds until the daemon exited; how many of its processes are left 1 s later."""
    pids = [p.pid for p in tree(proc.pid)]
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)
    took = time.monotonic() - t0
    time.sleep(1)
    return took, sum(running(p) for p in pids)


def learned_users(venv_root: Path) -> tuple[int, int]:
    """(users learned, .pyc files) summed over the venvs under ``venv_root`` (venvs/bytecode.py)."""
    users = pycs = 0
    for record in venv_root.glob("*/.gym-runtime/pycache.json"):
        users += len(json.loads(record.read_text()).get("learned", []))
        pycs += sum(1 for _ in record.parent.parent.glob("lib/python3.*/site-packages/**/__pycache__/*.pyc"))
    return users, pycs


def stored_users(home: Path) -> int:
    """Users the bytecode store under ``home`` holds, summed over its records (venvs/pyc_store.py)."""
    return sum(len(json.loads(p.read_text()).get("users", [])) for p in (home / "bytecode/imports").glob("*.json"))


def gym_figures(work: Path) -> None:
    """The real NeMo Gym 0.4.0 package: start with no venvs (learning bytecode), the background
    harvest of what was imported and its save to the store, starts with venvs and bytecode cached
    (best of 3), then starts with no venvs but the store kept."""
    from tests.helpers.gym_package import assemble_gym_package, gym_wheel, python_312_plus

    python = python_312_plus()
    if python is None:
        print("real Gym package: skipped (no Python >= 3.12 under pyenv)")
        return
    pkg, _ = assemble_gym_package(gym_wheel(python), work / "gym-pkg")
    venvs = work / "gym-venvs"
    env = {
        "GYM_RUNTIME_PIN_NEMO_GYM": "0.4.0",
        "GYM_RUNTIME_PIN_OPENAI": "2.7.2",
        "GYM_RUNTIME_PIN_MODE": "gym",
        "GYM_RUNTIME_VENV_DIR": str(venvs),
        "GYM_RUNTIME_HOME": str(work / "home"),
    }
    print(f"real Gym package (nemo-gym 0.4.0: vllm_model, example_single_tool_call, simple_agent; {python})")
    proc, info = start_figure(
        "no venvs (uv cache warm), learning bytecode", pkg, work / "gym-cold", env, ("--python", python)
    )
    t0, users = time.monotonic(), len(info["servers"]) + (info["ray"]["mode"] == "local")
    while learned_users(venvs)[0] < users and time.monotonic() - t0 < 300:
        time.sleep(0.2)
    learned, pycs = learned_users(venvs)
    print(
        f"bytecode learned for {learned}/{users} processes {time.monotonic() - t0:.2f} s after ready "
        f"({pycs} .pyc in the venvs)"
    )
    while stored_users(work / "home") < learned and time.monotonic() - t0 < 300:
        time.sleep(0.2)
    print(f"saved to the bytecode store {time.monotonic() - t0:.2f} s after ready")
    stop(proc)
    best = None
    for i in range(3):
        proc, info, wall = ready(pkg, work / f"gym-cached{i}", env, ("--python", python))
        best = min(best or info["startup_s"], info["startup_s"])
        took, left = stop(proc)
        print(
            f"time-to-ready, venvs and bytecode cached, run {i + 1}: {info['startup_s']:.2f} s in the daemon, "
            f"{wall:.2f} s wall; shutdown {took:.2f} s, processes left: {left}"
        )
    print(f"real Gym package cached start (best of 3): {best:.2f} s (target <= 16 s)")
    for i in range(2):
        shutil.rmtree(venvs)  # the uv cache and the bytecode store are kept
        proc, info = start_figure(
            f"no venvs, bytecode store kept, run {i + 1}", pkg, work / f"gym-stored{i}", env, ("--python", python)
        )
        stop(proc)


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    pkg = Path(args[0] if args else ROOT / "examples/native-quickstart").resolve()
    work = Path(tempfile.mkdtemp(prefix="gym-runtime-bench-"))
    if "--only-gym" in sys.argv:
        gym_figures(work)
        shutil.rmtree(work, ignore_errors=True)
        return
    print(f"package: {pkg}")
    cached = {"GYM_RUNTIME_VENV_DIR": str(work / "venvs"), "GYM_RUNTIME_HOME": str(work / "home")}
    proc, _ = start_figure("no venvs (uv cache warm)", pkg, work / "cold", cached)
    stop(proc)
    proc, info = start_figure("venvs cached", pkg, work / "run", cached)
    daemon = psutil.Process(proc.pid)
    daemon.cpu_percent(None)
    time.sleep(5)
    print(f"daemon idle: {daemon.cpu_percent(None):.2f} % CPU over 5 s, {daemon.memory_info().rss / 2**20:.0f} MB RSS")

    head = httpx.Client(base_url=info["head_server"], trust_env=False)
    name, pid = next((s["process_name"], s["pid"]) for s in head.get("/server_instances").json())
    t0 = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    while next(s for s in head.get("/server_instances").json() if s["process_name"] == name)["state"] == "ready":
        time.sleep(0.002)
    print(f"crash detection ({name} SIGKILLed): {1000 * (time.monotonic() - t0):.1f} ms until the head reports it")
    while head.get("/health").status_code != 200:
        time.sleep(0.05)
    took, left = stop(proc)
    print(f"shutdown after SIGTERM once ready: {took:.2f} s, processes left: {left}")
    shutil.rmtree(work / "venvs")  # the uv cache and the bytecode store (saved by now) are kept
    proc, _ = start_figure("no venvs, bytecode store kept", pkg, work / "stored", cached)
    stop(proc)

    phases = (
        (0.4, "config / venv check", cached),
        (1.0, "venvs building", {**cached, "GYM_RUNTIME_VENV_DIR": str(work / "v2")}),
        (1.2, "servers starting", cached),
    )
    for delay, phase, env in phases:
        proc = launch(pkg, work / f"mid{delay}", env)
        time.sleep(delay)
        took, left = stop(proc)
        print(f"shutdown after SIGTERM {delay:.1f} s into start-up ({phase}): {took:.2f} s, processes left: {left}")
    if "--skip-gym" not in sys.argv:
        gym_figures(work)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
