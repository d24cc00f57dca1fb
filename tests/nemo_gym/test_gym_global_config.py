"""NeMo Gym's in-process global config after the drop-in's ``start()``, in one venv holding
``nemo-gym==0.7.0`` and gym-runtime (tests/helpers/actor_venv.py), in a process whose command line
is a Ray worker's (tests/nemo_gym/actor_process.py), as inside NeMo RL's ``NemoGym`` actor.

NeMo RL main's ``list_entries()`` (``nemo_rl/environments/nemo_gym.py``) calls
``nemo_gym.global_config.get_global_config_dict()`` there after ``_spinup``; Gym's own
``RunHelper.start`` leaves the resolved config in that cache, and without it Gym parses the
worker's argv as Hydra overrides (``SystemExit: 2``). Held here:

* without a start, Gym's read of that argv does fail (the reason for the rest);
* after the drop-in's ``start()``: ``list_entries`` names every server instance the head server
  lists (its three server groups; the environment server in front of the agent too is in the
  config, with its address), each at the port the head server gives; Gym's
  ``ServerClient.load_head_server_config`` reads the head server; the policy values are the job's,
  the key unmasked as Gym keeps it; the cache is kept after ``shutdown()``, as Gym's is;
* two shards (two actors with their own port ranges, log directories and ``config_paths``, as
  NeMo RL's ``NemoGymShardSet`` starts them): each one's ``list_entries`` names its own servers,
  and the agent -> shard map NeMo RL builds from them sends each agent to the one shard that hosts it.

The environments are the built-in quickstart's trees without a manifest
(tests/nemo_gym/test_job.py), the policy two stub model processes.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.actor_venv import actor_venv
from tests.helpers.environments import StubEndpoint
from tests.helpers.gym_python import gym_python
from tests.nemo_gym.spinup import free_port_in
from tests.nemo_gym.test_job import ARITH, POLICY, trees

pytestmark = [pytest.mark.pypi, pytest.mark.slow, pytest.mark.timeout(1800)]
ACTOR = Path(__file__).with_name("actor_process.py")
RAY_WORKER_ARGV = [
    "/opt/nemo_rl_venv/lib/python3.13/site-packages/ray/_private/workers/default_worker.py",
    "--node-ip-address=127.0.0.1",
    "--node-manager-port=39121",
    "--object-store-name=/tmp/ray/session_latest/sockets/plasma_store",
    "--raylet-name=/tmp/ray/session_latest/sockets/raylet",
    "--redis-address=None",
    "--worker-launch-time-ms=1765000000000",
    "--worker-type=WORKER",
]
CODE_LOOKUP = "resources_servers/example_code_lookup/configs/code_lookup.yaml"
SERVER_GROUPS = ("responses_api_agents", "responses_api_models", "resources_servers")


@pytest.fixture(scope="module")
def python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The actor venv's interpreter (``nemo-gym==0.7.0`` + this checkout)."""
    return actor_venv(tmp_path_factory.mktemp("actor") / "venv")


@pytest.fixture
def gcs() -> Iterator[str]:
    """The trainer's Ray cluster address NeMo RL passes: a loopback listener (the runtime checks it
    is reachable; no server here uses Ray, so nothing more is asked of it)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield f"127.0.0.1:{listener.getsockname()[1]}"


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[list[str]]:
    with StubEndpoint(tmp_path, "acme") as a, StubEndpoint(tmp_path, "acme") as b:
        yield [a.url, b.url]


def initial(paths: list[str], replicas: list[str], gcs: str, low: int, high: int, log_dir: Path) -> dict:
    """The global config NeMo RL's ``_spinup`` builds for one shard (its keys and values)."""
    return {
        "config_paths": paths,
        "policy_model_name": "acme",
        "policy_api_key": "dummy_key",
        "policy_base_url": replicas,
        "default_host": "127.0.0.1",
        "port_range_low": low,
        "port_range_high": high,
        "global_aiohttp_connector_limit_per_host": 16384,
        "global_aiohttp_connector_limit": 65536,
        "ray_head_node_address": gcs,
        "head_server": {"host": "0.0.0.0", "port": free_port_in(low, high)},
        "nemo_gym_log_dir": str(log_dir),
    }


def actor(python: Path, root: Path, body: dict) -> subprocess.Popen:
    env = {
        **os.environ,
        "GYM_RUNTIME_PYTHON": str(gym_python()),
        "GYM_RUNTIME_VENV_DIR": str(Path(os.environ["GYM_RUNTIME_HOME"]).parent / "shared-venvs"),
    }
    return subprocess.Popen(
        [str(python), str(ACTOR), json.dumps({"argv": RAY_WORKER_ARGV, **body})],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def answer(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=1500)
    assert proc.returncode == 0, err[-5000:]
    return json.loads(out.splitlines()[-1])


def check_entries(out: dict, gcs: str, low: int, high: int) -> None:
    """``list_entries`` names every server instance the head server lists in Gym's three server
    groups, at the head server's ports; Gym's other reads see this run."""
    listed = {name: stype for name, stype, _, _ in out["instances"]}
    assert out["entries"] == {n: [t] for n, t in listed.items() if t in SERVER_GROUPS}, out
    assert out["ports"] == {name: port for name, _, _, port in out["instances"]}, out
    head_port = int(out["head_url"].rsplit(":", 1)[1])
    assert out["head_server"] == ["0.0.0.0", head_port] and low <= head_port <= high
    assert out["port_range"] == [low, high]
    assert out["ray_head_node_address"] == gcs
    assert out["kept_after_shutdown"] is True


def test_without_a_start_gym_parses_a_ray_workers_command_line_and_exits(python: Path, tmp_path: Path) -> None:
    probe = (
        "import sys; sys.argv = __import__('json').loads(sys.argv[1]);"
        "from nemo_gym.global_config import get_global_config_dict; get_global_config_dict()"
    )
    done = subprocess.run(
        [str(python), "-c", probe, json.dumps(RAY_WORKER_ARGV)], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 2 and "--node-ip-address" in done.stderr, done.stderr[-3000:]


def test_list_entries_in_a_ray_worker_names_every_server_instance_the_head_lists(
    python: Path, replicas: list[str], gcs: str, tmp_path: Path
) -> None:
    root = trees(tmp_path)
    body = {"mode": "entries", "initial": initial([POLICY, ARITH], replicas, gcs, 5000, 5999, tmp_path)}
    out = answer(actor(python, root, body))
    check_entries(out, gcs, 5000, 5999)
    assert set(out["entries"]) == {"policy_model", "arithmetic", "arithmetic_agent"}
    assert {name for name, *_ in out["instances"]} == {*out["entries"], "arithmetic_environment_server"}
    assert out["policy"] == ["acme", "dummy_key", replicas]  # the key as Gym keeps it, not masked
    assert out["policy_model_base_url"] == replicas


def test_two_shards_each_list_their_own_entries_and_every_agent_has_one_shard(
    python: Path, replicas: list[str], gcs: str, tmp_path: Path
) -> None:
    root = trees(tmp_path)
    shards = {"shard-a": ([POLICY, ARITH], 5000, 5499), "shard-b": ([POLICY, CODE_LOOKUP], 5500, 5999)}
    procs = {
        name: actor(python, root, {"mode": "entries", "initial": initial(p, replicas, gcs, lo, hi, tmp_path / name)})
        for name, (p, lo, hi) in shards.items()
    }
    outs = {name: answer(proc) for name, proc in procs.items()}
    for name, (_, lo, hi) in shards.items():
        check_entries(outs[name], gcs, lo, hi)
    agents: dict[str, list[str]] = {}  # NeMo RL's agent -> shard map, from each shard's list_entries
    for name, out in outs.items():
        for entry, groups in out["entries"].items():
            if "responses_api_agents" in groups:
                agents.setdefault(entry, []).append(name)
    assert agents == {"arithmetic_agent": ["shard-a"], "code_lookup_agent": ["shard-b"]}, outs
    shared = set(outs["shard-a"]["entries"]) & set(outs["shard-b"]["entries"])
    assert shared == {"policy_model"}  # the one entry both host (NeMo RL: allowed_duplicate_entries)
