"""Blend bench: seven environments of the ``nemo-gym`` 0.7.0 wheel in one ``gym-runtime up``, as a
GRPO job blends them; prints figures, asserts nothing.

    ./uvw run python bench/blend.py [--runs N] [--cold] [--signal INT|TERM] [--wheel WHEEL] [--python PY]
                                    [--sandbox-backend local|opensandbox|both] [--home DIR] [--only TREE ...]
                                    [--no-rows] [--killed-daemon] [--volume]

The package: each tree of :data:`BLEND` with its config, every tree that config names (its agent,
its environment server) and ``vllm_model``, unchanged (``assemble_tree_package``, as
``bench/gym_catalog.py`` packages one tree), into one directory whose manifest lists every config,
policy model first: 22 server instances (seven resources servers, seven agents, seven environment
servers, ``policy_model``); ``--only`` packages only the environments named (``--only
example_single_tool_call``: the 4-server example of docs/performance.md). The built-in stub model is the policy. Servers run on a CPython
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
builds the venvs when there are none (warm). ``GYM_RUNTIME_HOME`` is the bench's own (``--home``,
default ``blend-home``), kept under the tests' cache directory between invocations. The last lines: median / min / max of each figure.
Target: stop < 1 s with nothing left (docs/performance.md).

Once the figures at ready are taken (unless ``--no-rows``), every environment's example rows (its
tree's ``data/example.jsonl``, a row naming no agent of its config sent to the config's first agent,
as ``bench/gym_catalog.py`` does) go in one ``POST /rollouts/run`` to the head server; per run:
the batch's seconds and, per environment, rows scored of rows sent and each row's reward (``x``: a
row error, its code counted beside). The stub model's sampling is seeded by prompt and occurrence
(``gym_runtime/stub_model/app.py``) and every run starts a fresh one, so the same rows score the
same under either backend: the last line compares each row's reward (or row error's code) in every
run of every backend with the first run's, rows matched by environment and position.

``--sandbox-backend opensandbox`` (or ``both``: the two alternate, one start of each per run) starts
the OpenSandbox server the tests use, as ``bench/backends.py`` does (``tests/helpers/opensandbox/``:
needs root and podman), and runs the blend on it too (egress unenforced, no sidecar here). Per run
it then also says where the ready time went, under either backend, from the times the daemon's
progress lines came: *venvs* (the launch to its last ``venv ...`` line: config, venvs reused),
*add* (from there to its ``starting N server(s)`` line: bytecode, relays, and under ``opensandbox``
the sandboxes' creates), *spawn to ready* (from there to the ready line) with each server's own
seconds from its spawn to ready (``ready_after_s`` of ``/server_instances``: under ``opensandbox``
execd's commands, the preloaded parent's imports, readiness), median and max; the daemon's CPU seconds
at ready; under ``opensandbox`` the OpenSandbox server's RSS (its process tree and podman's
service), the number of sandboxes at ready and 1 s after the stop, and the PSS of the processes in
the run's sandboxes (their containers on this host: not in the daemon's tree) by role.

``--killed-daemon`` (with ``opensandbox``), after the runs: one start whose whole session is
SIGKILLed at ready (a pod's death: its sandboxes stay on the server), a start again in the same
state slot (its ``--work-dir``), which deletes what the killed daemon left before it creates its own, then
SIGTERM; prints the sandboxes the server lists (by the daemons' run label) at each point and the
restarted daemon's line saying what it deleted.

``--volume`` (with ``opensandbox``): the shared-volume delivery mode (docs/runtime.md, "Delivery
modes") on an OpenSandbox server that refuses every host mount (``allowed_host_paths = []``). A
podman named volume made for the bench (``tests/helpers/opensandbox/volume.py``; removed at the end)
is the ``opensandbox`` runs' claim (``GYM_RUNTIME_OPENSANDBOX_VOLUME``) and ``GYM_RUNTIME_HOME``: their
venvs (built by the first, unmeasured run), run directories (``--work-dir``) and the package's
delivered copy are on it, and the servers' interpreter is put on it (the image has none that Gym
0.7.0 accepts). ``local`` keeps its own home. One start is ``bench/blend_start.py``'s
(:class:`Started`); the rows' part is ``bench/blend_rows.py``, the ``opensandbox`` side (its
sandboxes, their memory, the killed daemon) ``bench/blend_osb.py``, the volume ``bench/blend_volume.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.backends import tree_rss  # noqa: E402
from bench.blend_osb import killed_daemon, sandbox_pss, sandboxes  # noqa: E402
from bench.blend_rows import compare_rows, run_rows, say_rows  # noqa: E402
from bench.blend_start import Started  # noqa: E402
from bench.blend_volume import on_volume  # noqa: E402
from bench.gym_catalog import agents_of, gym_env, routed  # noqa: E402
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


def assemble_blend(
    wheel: Path, root: Path, blend: tuple[tuple[str, str], ...] = BLEND
) -> tuple[Path, dict[str, list[dict]]]:
    """The blend package under ``root`` (module doc): each tree of ``blend`` packaged into the
    same directory (trees shared between environments are the same bytes), then one manifest
    listing every config, policy model first. Also each environment's example rows (its
    ``data/example.jsonl``, by tree), each routed as ``bench/gym_catalog.py`` routes a tree's row: a
    row naming no agent of its config gets the config's first agent."""
    shutil.rmtree(root, ignore_errors=True)
    configs: list[str] = []
    rows: dict[str, list[dict]] = {}
    for tree, config in blend:
        _, examples = assemble_tree_package(wheel, tree, config, root)
        agents = agents_of(root, tree, config)
        rows[tree] = [
            r if routed(r, agents) else {**r, "agent_ref": {"type": "responses_api_agents", "name": agents[0]}}
            for r in examples
        ]
        manifest = yaml.safe_load((root / "nemo-environment.yaml").read_text())
        configs += [c for c in manifest["config_paths"] if c not in configs]
    manifest = {
        "format": "native-v1",
        "config_paths": sorted(configs, key=lambda c: not c.startswith("responses_api_models/")),
        "metadata": {
            "name": f"gym-blend-{len(blend)}",
            "description": f"NeMo Gym {wheel_version(wheel)}: {', '.join(t for t, _ in blend)}, unchanged",
        },
    }
    (root / "nemo-environment.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    return root, rows


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


def phases(err: list[tuple[float, str]], ready_s: float) -> dict[str, float]:
    """Seconds of each phase of the start (module doc) from the daemon's timed progress lines."""
    venvs = max((t for t, ln in err if "] venv " in ln or ln.startswith("venv ")), default=0.0)
    add = next((t for t, ln in err if "starting " in ln and "server(s) (isolation" in ln), venvs)
    return {"venvs": venvs, "add": add - venvs, "spawn to ready": ready_s - add}


def one_run(
    pkg: Path, work: Path, env: dict[str, str], python: str, sig: int, server=None, rows: dict | None = None
) -> dict:
    """One start, measure and stop (module doc); ``{"error": ...}`` when no ready line came.
    ``server``: the OpenSandbox server the run uses (its memory and sandboxes are counted);
    ``rows``: example rows by environment, run once the figures at ready are taken (:func:`run_rows`)."""
    up = Started(pkg, work, env, python)
    proc, err = up.proc, up.err
    why = up.wait_ready()
    if why:
        return {"error": why}
    info, ready_s = up.info, up.ready_s
    with httpx.Client(base_url=info["head_server"], trust_env=False, timeout=60) as head:
        procs = head.get("/processes").json()["processes"]
        instances = head.get("/server_instances").json()
    each = [s.get("ready_after_s") for s in instances]
    cpu = psutil.Process(proc.pid).cpu_times()
    extra: dict = {"phases": phases(list(up.timed), ready_s), "cpu_s": cpu.user + cpu.system}
    each = [x for x in each if x is not None]
    if each:
        extra["server_ready"] = (statistics.median(each), max(each))
    if server is not None:
        extra["osb_rss"] = (tree_rss(server.process.pid) + tree_rss(server.podman_process.pid)) / MIB
        extra["sandboxes"] = sandboxes(server)
        extra["sandbox_pss"] = sandbox_pss(server, {s["sandbox"] for s in instances if s.get("sandbox")})
    by_kind, nprocs = tree_pss(proc.pid, {r["pid"]: kind_of(r) for r in procs})
    load = os.getloadavg()[0]
    if rows:
        extra.update(run_rows(info["head_server"], rows))
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
    up.reader.join(5)
    time.sleep(1)
    if server is not None:
        extra["sandboxes_left"] = sandboxes(server)
    return {
        **extra,
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
    ph = ", ".join(f"{k} {v:.1f} s" for k, v in r["phases"].items())
    each = r.get("server_ready")
    print(
        f"  phases: {ph}"
        + (f" (each server spawn to ready: median {each[0]:.1f} s, max {each[1]:.1f} s)" if each else "")
        + f"; daemon CPU {r['cpu_s']:.1f} s at ready"
        + (
            f"; OpenSandbox server + podman service RSS {r['osb_rss']:.0f} MiB, sandboxes {r['sandboxes']} at ready, "
            f"{r['sandboxes_left']} after the stop; in the sandboxes PSS {sum(r['sandbox_pss'].values()):,.0f} MiB: "
            + ", ".join(f"{k} {v:.0f}" for k, v in r["sandbox_pss"].items() if v)
            if "osb_rss" in r
            else ""
        )
    )


def spread(label: str, values: list[float], unit: str, fmt: str = ".2f") -> None:
    print(
        f"{label}: median {statistics.median(values):{fmt}}{' ' + unit if unit else ''}, min {min(values):{fmt}}, "
        f"max {max(values):{fmt}} over {len(values)} runs"
    )


def run_env(base: dict[str, str], server, home: Path, backend: str) -> dict[str, str]:
    """The daemon's environment for ``backend``: ``base`` (the release's settings, ``home``) and, with
    an OpenSandbox ``server``, the settings the tests' daemons get for it (their interpreter aside:
    the blend's is ``--python``)."""
    if server is None:
        return {**base, "GYM_RUNTIME_SANDBOX_BACKEND": backend}
    from tests.helpers.opensandbox.runs import daemon_env

    env = {**daemon_env(server, home, backend), **{k: v for k, v in base.items() if k.startswith("GYM_RUNTIME_")}}
    env.pop("GYM_RUNTIME_PYTHON", None)
    return env


def summary(label: str, done: list[dict]) -> None:
    spread(f"{label}ready", [r["ready_s"] for r in done], "s", ".1f")
    for k in done[0]["phases"]:
        spread(f"  {k}", [r["phases"][k] for r in done], "s", ".1f")
    spread(f"{label}daemon CPU at ready", [r["cpu_s"] for r in done], "s", ".1f")
    if "osb_rss" in done[0]:
        spread(f"{label}OpenSandbox server + podman service RSS", [r["osb_rss"] for r in done], "MiB", ",.0f")
        spread(f"{label}sandboxes left after the stop", [float(r["sandboxes_left"]) for r in done], "", ".0f")
        spread(f"{label}PSS in the sandboxes", [sum(r["sandbox_pss"].values()) for r in done], "MiB", ",.0f")
        for k in done[0]["sandbox_pss"]:
            spread(f"  {k}", [r["sandbox_pss"][k] for r in done], "MiB", ",.0f")
    spread(f"{label}tree PSS", [sum(sum(v) for v in r["pss"].values()) for r in done], "MiB", ",.0f")
    for k in KINDS:
        spread(f"  {k}", [sum(r["pss"][k]) for r in done], "MiB", ",.0f")
    if "rows_s" in done[0]:
        spread(f"{label}rows", [r["rows_s"] for r in done], "s", ".1f")
    spread(f"{label}stop", [r["stop_s"] for r in done], "s")
    spread(f"{label}processes left", [float(r["left"]) for r in done], "", ".0f")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cold", action="store_true", help="remove venvs, bytecode store, recorded resolutions each run")
    ap.add_argument("--signal", choices=("INT", "TERM"), default="INT")
    ap.add_argument("--wheel", type=Path, help="a nemo_gym-0.7.0 wheel (default: the tests' cached one)")
    ap.add_argument("--python", help="interpreter for the server venvs (default: tests/helpers/gym_python.py's)")
    ap.add_argument("--sandbox-backend", choices=("local", "opensandbox", "both"), default="local")
    ap.add_argument("--home", type=Path, help="GYM_RUNTIME_HOME (default: blend-home in the tests' cache)")
    ap.add_argument(
        "--only",
        nargs="+",
        metavar="TREE",
        choices=[t for t, _ in BLEND],
        help="package only these environments (example_single_tool_call alone: the 4-server example)",
    )
    ap.add_argument("--rows", action=argparse.BooleanOptionalAction, default=True, help="run the example rows at ready")
    ap.add_argument(
        "--killed-daemon", action="store_true", help="opensandbox: SIGKILL a daemon at ready, start it again"
    )
    ap.add_argument("--volume", action="store_true", help="opensandbox: the shared-volume delivery mode (module doc)")
    args = ap.parse_args()
    blend = tuple(e for e in BLEND if e[0] in args.only) if args.only else BLEND
    python = args.python or find_gym_python()
    if python is None:
        raise SystemExit("needs a CPython >= 3.13.14: none on this host and none provisioned (.ci/provision-python)")
    wheel = args.wheel or gym_wheel(sys.executable, "0.7.0")
    home = args.home or cache_dir() / "blend-home"
    base = {**os.environ, **gym_env(wheel_version(wheel)), "GYM_RUNTIME_HOME": str(home)}
    base.pop("GYM_RUNTIME_VENV_DIR", None)
    base.pop("PYTHONDONTWRITEBYTECODE", None)
    backends = ("local", "opensandbox") if args.sandbox_backend == "both" else (args.sandbox_backend,)
    sig = signal.SIGTERM if args.signal == "TERM" else signal.SIGINT
    work = Path(tempfile.mkdtemp(prefix="gym-runtime-blend-", dir=home.parent))  # an allowed host path
    pkg, rows = assemble_blend(wheel, work / "pkg", blend)
    print(
        f"blend of {len(blend)} environments (nemo-gym {wheel_version(wheel)}, {python}); "
        f"{'cold' if args.cold else 'warm'}, {args.runs} runs, stop by SIG{args.signal}; {os.cpu_count()} cores; "
        f"sandbox backend {' and '.join(backends)}"
    )
    with contextlib.ExitStack() as stack:
        server = None
        if "opensandbox" in backends:
            from tests.helpers.opensandbox.images import ensure_images
            from tests.helpers.opensandbox.server import running_server

            images = ensure_images()
            server = stack.enter_context(
                running_server(images.sandbox, images.execd, allowed=() if args.volume else None)
            )
            print(f"opensandbox-server {server.version} up in {server.start_seconds[0]:.1f} s", flush=True)
        envs = {b: run_env(base, server if b == "opensandbox" else None, home, b) for b in backends}
        homes, roots, pythons = (
            dict.fromkeys(backends, home),
            dict.fromkeys(backends, work),
            dict.fromkeys(backends, str(python)),
        )
        if args.volume and server is not None:  # the volume's mount point: the home, the run directories' root
            homes["opensandbox"], pythons["opensandbox"] = on_volume(stack, server, envs["opensandbox"], str(python))
            roots["opensandbox"] = homes["opensandbox"] / "runs"
        if not args.cold:
            for b in backends:
                first = one_run(pkg, roots[b] / f"prepare-{b}", envs[b], pythons[b], sig)
                print(
                    f"{b}: first, unmeasured run: "
                    + (f"{first['ready_s']:.1f} s" if "error" not in first else first["error"])
                )
        done: dict[str, list[dict]] = {b: [] for b in backends}
        for i in range(args.runs):
            for b in backends:
                if args.cold:
                    for sub in ("venvs", "bytecode", "resolutions"):
                        shutil.rmtree(homes[b] / sub, ignore_errors=True)
                r = one_run(
                    pkg,
                    roots[b] / f"run{i}-{b}",
                    envs[b],
                    pythons[b],
                    sig,
                    server if b == "opensandbox" else None,
                    rows if args.rows else None,
                )
                if "error" in r:
                    print(f"run {i + 1} {b}: {r['error']}")
                    continue
                print(f"[{b}] ", end="")
                say_run(i + 1, r)
                if "outcomes" in r:
                    say_rows(r)
                done[b].append(r)
        for b in backends:
            if done[b]:
                summary(f"{b}: " if len(backends) > 1 else "", done[b])
        compare_rows(done)
        if args.killed_daemon and server is not None:
            killed_daemon(pkg, roots["opensandbox"], envs["opensandbox"], pythons["opensandbox"], server)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
