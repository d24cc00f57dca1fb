"""Servers that use Ray under the ``opensandbox`` backend (``opensandbox_server``: a real OpenSandbox
server on podman): each starts its own Ray inside its sandbox (Ray mode ``own``, docs/runtime.md
"Sandbox backends"), as NeMo Gym's ``initialize_ray`` does when the config names no
``ray_head_node_address``; a cluster to join is refused (``GR-OSB-RAY``).

* Without Ray: the stdlib fixture server declaring ``ray_enabled = True`` (``simple_env``) shows
  what the daemon gives such a server: mode ``own``, no address in its config, none of the private
  head's variables, its sandbox's memory raised to ``gym_runtime.ray.own.MEMORY_MB``; ``--ray-address`` stops
  ``up`` before anything is built.
* With Ray: NeMo Gym 0.7.0's ``example_single_tool_call`` tree from the PyPI wheel, unchanged, with
  its environment server (``tests/helpers/gym_package.py``; venvs on the interpreter
  ``gym_python()`` answers, the host's own or the one ``.ci/provision-python`` builds, named to the
  daemon as ``GYM_RUNTIME_PYTHON`` and allowed by the test server; cached between runs), dry-run under each backend with the
  built-in stub model and ``GYM_RUNTIME_RAY_UNDECLARED=always`` (the environment server's class
  declares no ``ray_enabled`` and its tree imports no Ray: by default it would run without Ray): the rewards are equal on every row, each server that uses Ray said in its
  sandbox that Gym started a cluster (under ``local`` it joined the private head), and the stop
  leaves no sandbox.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from gym_runtime.ray.own import MEMORY_MB
from tests.helpers.daemon import kill_tree, read_ready_line, simple_env, up_process
from tests.helpers.gym_package import assemble_gym_package, cache_dir, gym_wheel
from tests.helpers.gym_python import gym_python
from tests.helpers.opensandbox.runs import daemon_env

pytestmark = [pytest.mark.opensandbox]
RELEASE = "0.7.0"
AGENT = "example_single_tool_call_simple_agent"
STARTED = "NeMo Gym is starting a new Ray cluster..."  # nemo_gym/server_utils.py initialize_ray, no address
JOINED = "Connecting to Ray cluster at specified address: "  # the same, with ray_head_node_address


def _instances(ready: dict) -> list[dict]:
    return httpx.get(ready["head_server"] + "/server_instances", timeout=10).json()


def _memory_mib(server, box: str) -> int:
    answer = server.docker("GET", f"/containers/sandbox-{box}/json")
    answer.raise_for_status()
    return answer.json()["HostConfig"]["Memory"] >> 20


def test_a_server_that_uses_ray_gets_no_cluster_to_join(opensandbox_server, tmp_path: Path) -> None:
    server = opensandbox_server
    env = {**daemon_env(server, tmp_path / "home"), "GYM_RUNTIME_SERVER_MEMORY_MB": "512"}
    proc = up_process(simple_env(tmp_path / "pkg", ray=True), tmp_path, env=env)
    try:
        ready = json.loads(read_ready_line(proc, timeout=600))
        assert ready["ray"] == {
            "mode": "own",
            "address": None,
            "source": "needed by acme_math",
            "needed_by": ["acme_math"],
            "without": [],
        }
        seen = json.loads((tmp_path / "run" / "servers" / "acme_math" / "contract.json").read_text())["env"]
        config = seen["NEMO_GYM_CONFIG_DICT"]
        assert "acme_math" in config and "ray_head_node_address" not in config
        assert not {"RAY_ADDRESS", "RAY_JOB_CONFIG_JSON_ENV_VAR", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"} & set(seen)
        assert seen["RAY_enable_worker_prestart"] == "0"
        boxes = {s["process_name"]: s["sandbox"] for s in _instances(ready)}
        assert _memory_mib(server, boxes["acme_math"]) == MEMORY_MB  # its own Ray runs inside the same limit
        assert [n for n, b in boxes.items() if b == boxes["acme_math"]] == ["acme_math"]  # a sandbox of its own
        shared = sum(1 for b in boxes.values() if b == boxes["acme_agent"])  # the servers of its venv without Ray
        assert _memory_mib(server, boxes["acme_agent"]) == 512 * shared  # each keeps the setting: their sum
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(120) == 0
        assert f"ray: acme_math's sandbox gets {MEMORY_MB} MiB of memory, not 512" in proc.stderr.read()
    finally:
        kill_tree(proc)
    assert server.sandboxes() == []

    home = tmp_path / "refused"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "gym_runtime.cli.main",
            "up",
            str(tmp_path / "pkg"),
            "--work-dir",
            str(home / "run"),
            "--ray-address",
            "10.0.0.5:6379",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=daemon_env(server, home),
    )
    assert r.returncode == 1 and r.stdout == "", r.stderr
    assert "error[GR-OSB-RAY]" in r.stderr and "--ray-address=10.0.0.5:6379" in r.stderr
    assert "a server's sandbox is no node of it" in r.stderr and r.stderr.count("error[") == 1
    assert not (home / "venvs").exists()  # refused before any build


@pytest.fixture(scope="module")
def gym_tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """``(package, rows file, interpreter)``: the 0.7.0 example tree and its rows, each addressed to
    its agent (the rows ship without ``agent_ref``)."""
    python = str(gym_python())  # named to the daemon (GYM_RUNTIME_PYTHON); the server allows its prefix
    root = tmp_path_factory.mktemp("gym-own-ray")
    pkg, rows = assemble_gym_package(gym_wheel(python, RELEASE), root / "pkg")
    dataset = root / "rows.jsonl"
    ref = {"type": "responses_api_agents", "name": AGENT}
    dataset.write_text("".join(json.dumps({**row, "agent_ref": ref}) + "\n" for row in rows))
    return pkg, dataset, python


def _dry_run(server, tree: tuple[Path, Path, str], backend: str, tmp: Path) -> tuple[dict, str]:
    """``dry-run`` of the tree under ``backend``: ({row: sorted rewards}, its stderr)."""
    pkg, dataset, python = tree
    env = {
        **daemon_env(server, tmp / "home", backend),
        "GYM_RUNTIME_PYTHON": python,
        "GYM_RUNTIME_VENV_DIR": str(cache_dir() / "venvs"),  # the venvs the other real-tree tests use
        "GYM_RUNTIME_RAY_UNDECLARED": "always",
    }
    out = tmp / f"{backend}.jsonl"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "gym_runtime.cli.main",
            "dry-run",
            str(pkg),
            "--dataset",
            str(dataset),
            "--samples",
            "1",
            "--out",
            str(out),
            "--work-dir",
            str(tmp / backend),
        ],
        capture_output=True,
        text=True,
        timeout=1500,
        env=env,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    rewards: dict = {}
    for line in out.read_text().splitlines():
        row = json.loads(line)
        rewards.setdefault(row["row"], []).append(row["reward"])
    return {k: sorted(v) for k, v in rewards.items()}, r.stderr


def _ray_users(stderr: str) -> set[str]:
    return set(re.findall(r"ray: (\S+) uses Ray: ", stderr))


@pytest.mark.pypi
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_gym_070_tree_rewards_equal_the_local_backend(opensandbox_server, gym_tree, tmp_path: Path) -> None:
    server = opensandbox_server
    local, local_err = _dry_run(server, gym_tree, "local", tmp_path)
    t0 = time.monotonic()
    remote, err = _dry_run(server, gym_tree, "opensandbox", tmp_path)
    print(f"dry-run of the 0.7.0 tree under opensandbox: {time.monotonic() - t0:.1f} s")
    assert remote == local and len(local) == 5 and all(v == [1.0] for v in remote.values()), (local, remote)
    users = _ray_users(err)
    assert users and users == _ray_users(local_err)  # the same servers use Ray under both backends
    assert "ray: each server that uses Ray starts its own in its sandbox" in err
    for name in users:
        inside = (tmp_path / "opensandbox" / "logs" / f"{name}.log").read_text()
        assert STARTED in inside and "Started Ray cluster at " in inside and JOINED not in inside, inside[-3000:]
        assert JOINED + "127.0.0.1:" in (tmp_path / "local" / "logs" / f"{name}.log").read_text()
    assert server.sandboxes() == []  # dry-run's stop deleted every sandbox of the run
