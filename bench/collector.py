"""Bench NeMo Gym's own rollout collector against a head server: prints figures, asserts nothing.

    ./uvw run python bench/collector.py [--head HOST:PORT] [--rows 1000] [--concurrency 64]
                                        [--policy-base-url URL --policy-model-name NAME] [--gym-bin DIR]

``ng_collect_rollouts`` of ``nemo-gym`` 0.7.0 (a venv of it: ``--gym-bin``, default the one the
tests build, tests/helpers/gym_package.py) sends the 5 rows of ``example_single_tool_call``'s
``data/example.jsonl`` ``rows / 5`` times each, ``--concurrency`` at once
(``num_samples_in_parallel``), to ``example_single_tool_call_simple_agent`` through the head
server; Gym's collector finds each server from ``/global_config_dict_yaml`` and, under 0.7.0,
reaches the agent through the environment server in front of it (``nemo_gym/rollout_collection.py``).

Without ``--head`` the bench starts ``gym-runtime up`` on the real 0.7.0 package (the wheel's trees,
unchanged: ``assemble_gym_package``) with ``--policy-base-url`` as the policy (default: the
built-in stub model, started by the bench in a process of its own), waits for it, collects, stops.
With ``--head`` it only collects, e.g. against NeMo Gym's own ``ng_run`` serving the same trees with
the same policy URL, for the side-by-side figure.

Printed: rollouts collected and failed, rollouts/s as Gym's collector reports it over its
collection (its last "Finished N / N rollouts ... rollouts/min"; the collector's own start, ~10 s
of imports, is not in it), the per-rollout latency Gym records with ``+observability_enabled=true``
(``ng_perf.total_latency_ms``: p50, p90, p99, max) and the mean reward.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

AGENT = "example_single_tool_call_simple_agent"
RELEASE = "0.7.0"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low, high = int(pos), min(int(pos) + 1, len(ordered) - 1)
    return ordered[low] * (1 - (pos - low)) + ordered[high] * (pos - low)


def wait_http(url: str, timeout_s: float) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=2, trust_env=False)
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise SystemExit(f"{url} did not answer in {timeout_s:g}s")


def collect(gym_bin: Path, head: str, rows: list[dict], n: int, concurrency: int, work: Path) -> None:
    """Run Gym's collector; print the figures."""
    host, port = head.rsplit(":", 1)
    data = work / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = work / "out.jsonl"
    argv = [
        str(gym_bin / "ng_collect_rollouts"),
        f"+input_jsonl_fpath={data}",
        f"+output_jsonl_fpath={out}",
        f"+agent_name={AGENT}",
        f"+num_repeats={max(1, n // len(rows))}",
        f"+num_samples_in_parallel={concurrency}",
        f"+head_server.host={host}",
        f"+head_server.port={port}",
        "+observability_enabled=true",
        f"+model_call_capture_dir={work / 'capture'}",
    ]  # rows get ng_perf
    env = {"PATH": f"{gym_bin}:/usr/bin:/bin", "HOME": str(work), "NO_PROXY": "127.0.0.1"}
    t0 = time.monotonic()
    done = subprocess.run(argv, cwd=work, capture_output=True, text=True, env=env, timeout=3600)
    wall = time.monotonic() - t0
    if done.returncode != 0:
        print(done.stdout[-3000:] + done.stderr[-3000:])
        raise SystemExit(f"ng_collect_rollouts exited {done.returncode}")
    results = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    failed = [r for r in results if r.get("_ng_failure_class") or "reward" not in r]
    rewards = [r["reward"] for r in results if isinstance(r.get("reward"), (int, float))]
    latency = [
        float(r["ng_perf"]["total_latency_ms"])
        for r in results
        if isinstance((r.get("ng_perf") or {}).get("total_latency_ms"), (int, float))
    ]
    finished = re.findall(r"Finished (\d+) / (\d+) rollouts \(100%\) in \S+ \(([\d.]+) rollouts/min\)", done.stdout)
    print(
        f"collector: nemo-gym {RELEASE} ng_collect_rollouts, {len(results)} rollouts ({len(failed)} failed), "
        f"concurrency {concurrency}, head {head}; load {os.getloadavg()[0]:.1f}"
    )
    rate = (
        f"{float(finished[-1][2]) / 60:.1f} rollouts/s (Gym's own figure over its collection)"
        if finished
        else "no rate printed by Gym"
    )
    print(f"{rate}; wall {wall:.1f} s with the collector's own start")
    if latency:
        print(
            "per-rollout latency (ng_perf.total_latency_ms): "
            + ", ".join(f"{k} {quantile(latency, q):.0f} ms" for k, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)))
            + f", max {max(latency):.0f} ms"
        )
    else:
        print("per-rollout latency: the rows carry no ng_perf.total_latency_ms")
    if rewards:
        print(f"mean reward {statistics.fmean(rewards):.3f}")


def main() -> None:
    from tests.helpers.gym_package import assemble_gym_package, cache_dir, gym_venv, gym_wheel, release_python
    from tests.helpers.load import builds_quiet

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--head", help="HOST:PORT of a running head server (default: start gym-runtime up)")
    p.add_argument("--rows", type=int, default=1000)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--policy-base-url", help="policy model for our start (default: the stub model, started here)")
    p.add_argument("--policy-model-name", default="stub-model", help="its served model name (default %(default)s)")
    p.add_argument("--gym-bin", type=Path, help="bin/ of a venv with nemo-gym 0.7.0 (default: the tests' one)")
    args = p.parse_args()
    python = release_python(RELEASE)
    if python is None:
        raise SystemExit(f"no Python that nemo-gym {RELEASE} accepts (>= 3.13.14)")
    gym_bin = args.gym_bin or gym_venv(RELEASE) / "bin"
    work = Path(tempfile.mkdtemp(prefix="gym-runtime-collector-"))
    # a stable package path: the bytecode its servers learned (keyed by their trees) serves later runs
    pkg, rows = assemble_gym_package(gym_wheel(python, RELEASE), cache_dir() / "collector-pkg")
    if args.head:
        collect(gym_bin, args.head, rows, args.rows, args.concurrency, work)
        return
    procs: list[subprocess.Popen] = []
    try:
        policy = args.policy_base_url
        if policy is None:
            port = free_port()
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "gym_runtime.stub_model", "--port", str(port), "--p-correct", "1.0"],
                    start_new_session=True,
                )
            )
            wait_http(f"http://127.0.0.1:{port}/v1/models", 60)
            policy = f"http://127.0.0.1:{port}/v1"
        up = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gym_runtime.cli.main",
                "up",
                str(pkg),
                "--python",
                python,
                "--work-dir",
                str(work / "run"),
                "--policy-base-url",
                policy,
                "--policy-model-name",
                args.policy_model_name,
                "--policy-api-key-env",
                "BENCH_POLICY_KEY",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
            env={
                **os.environ,
                "BENCH_POLICY_KEY": "dummy",
                "GYM_RUNTIME_HOME": str(work / "home"),
                "GYM_RUNTIME_VENV_DIR": str(cache_dir() / "venvs"),
            },
        )
        procs.append(up)
        line = up.stdout.readline() if up.stdout else ""
        if not line:
            raise SystemExit(f"gym-runtime up exited {up.wait()} before ready (logs under {work / 'run'})")
        info = json.loads(line)
        print(
            f"gym-runtime up ready in {info['startup_s']:.1f} s (policy {policy}); "
            f"background compiles done {builds_quiet(info['head_server'], 3.0, 300.0, 0.5):.1f} s later"
        )
        collect(gym_bin, info["head_server"].split("//", 1)[1], rows, args.rows, args.concurrency, work)
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
