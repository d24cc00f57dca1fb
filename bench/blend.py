"""Blend bench: seven environments of the ``nemo-gym`` 0.7.0 wheel in one ``gym-runtime up``, as a
GRPO job blends them; prints figures, asserts nothing.

    ./uvw run python bench/blend.py [--runs N] [--cold] [--signal INT|TERM] [--wheel WHEEL] [--python PY]

The package: each tree of :data:`BLEND` with its config, every tree that config names (its agent,
its environment server) and ``vllm_model``, unchanged (``assemble_tree_package``, as
``bench/gym_catalog.py`` packages one tree), into one directory whose manifest lists every config,
policy model first: 22 server instances (seven resources servers, seven agents, seven environment
servers, ``policy_model``). The built-in stub model is the policy. Servers run on a CPython
>= 3.13.14 (``tests/helpers/gym_python.py``, or ``--python``); the pins are the wheel's release
(docs/runtime.md, "Gym releases").

Each run: launch ``up``, wait for its ready line (*ready*: wall seconds from the launch; every server
answers ``GET /``), sum PSS (``psutil``'s ``memory_full_info().pss``) over the daemon's process tree,
split by kind from the head server's ``GET /processes``: ``daemon``, ``preloaded parents`` (one per
venv, holding what its servers share), ``forked servers`` (the Gym servers), ``others`` (sandbox
holders, bubblewrap, the stub model, the orphan watchdog); then the signal, the seconds until the
daemon exits, the processes of its tree still alive 1 s later, and the daemon's own ``stop took``
line (seconds per teardown step). With ``--cold`` every run starts with the venvs, the bytecode
store and the recorded resolutions removed (``$GYM_RUNTIME_HOME/{venvs,bytecode,resolutions}``; the
uv cache is kept: a fresh pod whose only volume is the uv cache); otherwise a first, unmeasured run
builds the venvs when there are none (warm). ``GYM_RUNTIME_HOME`` is the bench's own, kept under the
tests' cache directory between invocations. The last lines: median / min / max of each figure.
Target: stop < 1 s with nothing left (docs/performance.md).
"""

from __future__ import annotations

import argparse
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
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.gym_catalog import gym_env  # noqa: E402
from tests.helpers.daemon import running  # noqa: E402
from tests.helpers.gym_package import assemble_tree_package, cache_dir, gym_wheel, wheel_version  # noqa: E402
from tests.helpers.gym_python import find_gym_python  # noqa: E402

BLEND = (
    ("example_single_tool_call", "example_single_tool_call.yaml"),
    ("example_tool_call_multireward", "example_tool_call_multireward.yaml"),
    ("gpqa_diamond", "gpqa_diamond.yaml"),
    ("math_advanced_calculations", "math_advanced_calculations.yaml"),
    ("circle_count", "circle_count.yaml"),
    ("workplace_assistant", "workplace_assistant.yaml"),
    ("xlam_fc", "xlam_fc.yaml"),
)
KINDS = ("daemon", "preloaded parents", "forked servers", "others")
MIB = 2**20


def assemble_blend(wheel: Path, root: Path) -> Path:
    """The blend package under ``root`` (module doc): each tree of :data:`BLEND` packaged into the
    same directory (trees shared between environments are the same bytes), then one manifest
    listing every config, policy model first."""
    shutil.rmtree(root, ignore_errors=True)
    configs: list[str] = []
    for tree, config in BLEND:
        assemble_tree_package(wheel, tree, config, root)
        manifest = yaml.safe_load((root / "nemo-environment.yaml").read_text())
        configs += [c for c in manifest["config_paths"] if c not in configs]
    manifest = {
        "format": "native-v1",
        "config_paths": sorted(configs, key=lambda c: not c.startswith("responses_api_models/")),
        "metadata": {
            "name": f"gym-blend-{len(BLEND)}",
            "description": f"NeMo Gym {wheel_version(wheel)}: {', '.join(t for t, _ in BLEND)}, unchanged",
        },
    }
    (root / "nemo-environment.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    return root


def kind_of(row: dict) -> str:
    """A row of the head server's ``GET /processes`` as one of :data:`KINDS`."""
    if row["role"] == "daemon":
        return "daemon"
    if row["role"] == "sandbox" and row["component"] == "preloaded parent":
        return "preloaded parents"
    if row["role"] == "server":
        return "forked servers"
    return "others"


def tree_pss(daemon_pid: int, kinds: dict[int, str]) -> tuple[dict[str, list[float]], int]:
    """PSS in MiB of every process of the daemon's tree, grouped by kind (a pid the head server did not
    list counts as ``others``), and the number of processes."""
    by_kind: dict[str, list[float]] = {k: [] for k in KINDS}
    root = psutil.Process(daemon_pid)
    procs = [root, *root.children(recursive=True)]
    for p in procs:
        try:
            pss = p.memory_full_info().pss / MIB
        except psutil.Error:
            continue
        by_kind[kinds.get(p.pid, "others")].append(pss)
    return by_kind, len(procs)


def one_run(pkg: Path, work: Path, env: dict[str, str], python: str, sig: int) -> dict:
    """One start, measure and stop (module doc); ``{"error": ...}`` when no ready line came."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gym_runtime.cli.main", "up", str(pkg), "--work-dir", str(work), "--python", python],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=env,
    )
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(proc.stderr or ()), daemon=True)
    reader.start()
    line = proc.stdout.readline() if proc.stdout else ""
    ready_s = time.monotonic() - t0
    if not line:
        proc.wait()
        reader.join(5)
        return {"error": f"no ready line (exit {proc.returncode}): {''.join(err[-8:])}"}
    info = json.loads(line)
    with httpx.Client(base_url=info["head_server"], trust_env=False, timeout=60) as head:
        rows = head.get("/processes").json()["processes"]
    by_kind, nprocs = tree_pss(proc.pid, {r["pid"]: kind_of(r) for r in rows})
    load = os.getloadavg()[0]
    pids = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
    t1 = time.monotonic()
    proc.send_signal(sig)
    try:
        code: int | str = proc.wait(40)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        code = "hang"
    stop_s = time.monotonic() - t1
    reader.join(5)
    time.sleep(1)
    return {
        "ready_s": ready_s,
        "servers": len(info.get("servers") or []),
        "processes": nprocs,
        "pss": by_kind,
        "stop_s": stop_s,
        "exit": code,
        "left": sum(running(p) for p in pids),
        "load": load,
        "steps": next((ln.split("] ", 1)[-1].strip() for ln in err if "stop took" in ln), ""),
    }


def say_run(i: int, r: dict) -> None:
    pss = r["pss"]
    total = sum(sum(v) for v in pss.values())
    split = ", ".join(
        f"{k} {sum(v):.0f}" + (f" ({len(v)}: {min(v):.0f}-{max(v):.0f} each)" if len(v) > 1 else "")
        for k, v in pss.items()
        if v
    )
    print(
        f"run {i}: ready {r['ready_s']:.1f} s ({r['servers']} servers, {r['processes']} processes; load average "
        f"{r['load']:.1f}); tree PSS {total:,.0f} MiB: {split}; stop {r['stop_s']:.2f} s, exit {r['exit']}, "
        f"processes left {r['left']}" + (f"\n  daemon: {r['steps']}" if r["steps"] else "")
    )


def spread(label: str, values: list[float], unit: str, fmt: str = ".2f") -> None:
    print(
        f"{label}: median {statistics.median(values):{fmt}}{' ' + unit if unit else ''}, min {min(values):{fmt}}, "
        f"max {max(values):{fmt}} over {len(values)} runs"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cold", action="store_true", help="remove venvs, bytecode store, recorded resolutions each run")
    ap.add_argument("--signal", choices=("INT", "TERM"), default="INT")
    ap.add_argument("--wheel", type=Path, help="a nemo_gym-0.7.0 wheel (default: the tests' cached one)")
    ap.add_argument("--python", help="interpreter for the server venvs (default: tests/helpers/gym_python.py's)")
    args = ap.parse_args()
    python = args.python or find_gym_python()
    if python is None:
        raise SystemExit("needs a CPython >= 3.13.14: none on this host and none provisioned (.ci/provision-python)")
    wheel = args.wheel or gym_wheel(sys.executable, "0.7.0")
    home = cache_dir() / "blend-home"
    env = {**os.environ, **gym_env(wheel_version(wheel)), "GYM_RUNTIME_HOME": str(home)}
    env.pop("GYM_RUNTIME_VENV_DIR", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    sig = signal.SIGTERM if args.signal == "TERM" else signal.SIGINT
    work = Path(tempfile.mkdtemp(prefix="gym-runtime-blend-"))
    pkg = assemble_blend(wheel, work / "pkg")
    print(
        f"blend of {len(BLEND)} environments (nemo-gym {wheel_version(wheel)}, {python}); "
        f"{'cold' if args.cold else 'warm'}, {args.runs} runs, stop by SIG{args.signal}; {os.cpu_count()} cores"
    )
    if not args.cold and not (home / "venvs").is_dir():
        first = one_run(pkg, work / "prepare", env, str(python), sig)
        print("venvs built by a first, unmeasured run" if "error" not in first else f"first run: {first['error']}")
    done: list[dict] = []
    for i in range(args.runs):
        if args.cold:
            for sub in ("venvs", "bytecode", "resolutions"):
                shutil.rmtree(home / sub, ignore_errors=True)
        r = one_run(pkg, work / f"run{i}", env, str(python), sig)
        if "error" in r:
            print(f"run {i + 1}: {r['error']}")
            continue
        say_run(i + 1, r)
        done.append(r)
    if done:
        spread("ready", [r["ready_s"] for r in done], "s", ".1f")
        spread("tree PSS", [sum(sum(v) for v in r["pss"].values()) for r in done], "MiB", ",.0f")
        for k in KINDS:
            spread(f"  {k}", [sum(r["pss"][k]) for r in done], "MiB", ",.0f")
        spread("stop", [r["stop_s"] for r in done], "s")
        spread("processes left", [float(r["left"]) for r in done], "", ".0f")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
