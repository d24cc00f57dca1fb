"""Bench the two relays that can front an agent: prints figures, asserts nothing.

    ./uvw run python bench/relay.py [--runs 3]

The package is NeMo Gym 0.7.0's ``example_single_tool_call`` with its main config, the trees of the
wheel unchanged (``tests/helpers/gym_package.py``): ``vllm_model``, the resources server,
``simple_agent`` and the environment server ``example_single_tool_call_environment_server``
(``environment_servers/legacy_agent``) in front of the agent; the stub model is the policy. It is
started twice per run, venvs kept (one learning start first):

- ``sdk relay``: the package ships Gym's own ``environment_servers/legacy_agent`` tree (it runs on
  the SDK, in the venv the other Gym servers share);
- ``built-in relay``: the same package without that tree, so the config's ``legacy_agent`` is the
  runtime's built-in (``servers/environment_servers/legacy_agent``: no SDK, its own small venv).

Per start: the daemon's ``startup_s``, the relay's ``ready_after_s`` (from its spawn to its first
answer to ``GET /``) and its process's RSS / PSS at ready, and the whole tree's RSS. Medians of
``--runs`` at the end. The relay lookup (package, then built-in) is chosen on these figures:
docs/architecture.md §8.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.up import ready, stop, tree  # noqa: E402
from tests.helpers.gym_package import assemble_gym_package, gym_wheel, release_python  # noqa: E402

RELAY = "example_single_tool_call_environment_server"


def one_start(pkg: Path, work: Path, env: dict[str, str], python: str) -> dict[str, float]:
    proc, info, _ = ready(pkg, work, env, ("--python", python))
    try:
        head = info["head_server"]
        row = next(
            r for r in httpx.get(head + "/server_instances", trust_env=False).json() if r["process_name"] == RELAY
        )
        procs = httpx.get(head + "/processes", trust_env=False).json()["processes"]
        relay = next(p for p in procs if p["member"] == RELAY and p["role"] == "server")
        total = sum(p.memory_info().rss for p in tree(proc.pid) if p.is_running()) / 2**20
        return {
            "startup_s": info["startup_s"],
            "relay ready_after_s": row["ready_after_s"],
            "relay rss_mb": relay["rss_mb"],
            "relay pss_mb": relay["pss_mb"] or 0.0,
            "tree rss_mb": total,
        }
    finally:
        stop(proc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    python = release_python("0.7.0")
    if python is None:
        raise SystemExit("no Python >= 3.13.14 (nemo-gym 0.7.0 requires it; .ci/provision-python builds one)")
    work = Path(tempfile.mkdtemp(prefix="gr-bench-relay-"))
    try:
        sdk, _ = assemble_gym_package(gym_wheel(python, "0.7.0"), work / "sdk-relay")
        builtin = work / "builtin-relay"
        shutil.copytree(sdk, builtin)
        shutil.rmtree(builtin / "environment_servers")
        env = {"GYM_RUNTIME_HOME": str(work / "home"), "GYM_RUNTIME_VENV_DIR": str(work / "venvs")}
        figures: dict[str, list[dict[str, float]]] = {"sdk relay": [], "built-in relay": []}
        for label, pkg in (("sdk relay", sdk), ("built-in relay", builtin)):
            one_start(pkg, work / f"learn-{label}", env, python)  # builds venvs, learns bytecode
        for run in range(args.runs):
            for label, pkg in (("sdk relay", sdk), ("built-in relay", builtin)):
                f = one_start(pkg, work / f"run{run}-{label}", env, python)
                figures[label].append(f)
                print(f"run {run + 1} {label}: " + ", ".join(f"{k} {v:.2f}" for k, v in f.items()))
        for label, runs in figures.items():
            print(f"median {label}: " + ", ".join(f"{k} {statistics.median(r[k] for r in runs):.2f}" for k in runs[0]))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
