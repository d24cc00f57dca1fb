"""A replay of NeMo RL main's calls through the drop-in, against a real vLLM engine on the tiny model
(docs/trainers.md): two shards, each its own actor process with a Ray worker's command line
(tests/nemo_gym/nemo_rl_main_actor.py, in a venv holding ``nemo-gym==0.7.0`` and the project), each
``_spinup`` with NeMo RL main's keys (its own part of the 5000-5999 Gym port band, its own log and
capture directories, ledger token capture on, the trainer's Ray cluster); the route map built from
each shard's ``list_entries()`` (NeMo RL's ``_discover_route_shard_map``: every entry a shard hosts,
``policy_model`` in both); rows routed by ``agent_ref`` (shard A's agent) and by ``task_source``
(shard B's resources server, resolved to its agent by Gym's collector); ``run_rollouts`` through
Gym 0.7.0's own collector while ``health_check`` polls in a worker thread; each rollout's manifest
behind the control token (the token in no server's environment but ``policy_model``'s, the ledger
written where the trainer named it); then ``shutdown()`` within NeMo RL's 10 s, nothing left.

Stock vLLM has no NeMo RL worker extension, so it stages no token deltas and returns no commit
coordinates: each model call is in the manifest as a failure (``failures``, naming the call), which
is what Gym's ledger records for a worker answer without coordinates (docs/trainers.md, "Ledger
token capture": what this proves and what it does not).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.helpers.actor_venv import actor_venv
from tests.helpers.gym07 import gym07_trees
from tests.helpers.gym_package import cache_dir
from tests.helpers.gym_python import gym_python
from tests.nemo_gym.spinup import TREES, ours, rows_of, spinup_config
from tests.nemo_gym.test_gym_global_config import RAY_WORKER_ARGV
from tests.nemo_gym.test_nemo_rl_spinup import cluster, python  # noqa: F401 - fixtures

pytestmark = [pytest.mark.vllm, pytest.mark.pypi, pytest.mark.slow, pytest.mark.timeout(2400)]
ACTOR = Path(__file__).resolve().parents[1] / "nemo_gym" / "nemo_rl_main_actor.py"
MULTI = "resources_servers/example_tool_call_multireward"
MODEL = "responses_api_models/vllm_model/configs/vllm_model_for_training.yaml"
SHARDS = {
    "shard-a": (
        [MODEL, "resources_servers/example_single_tool_call/configs/example_single_tool_call.yaml"],
        5000,
        5499,
    ),
    "shard-b": ([MODEL, f"{MULTI}/configs/example_tool_call_multireward.yaml"], 5500, 5999),
}
TOKEN = "replay-control-secret"
CONTROL = "NEMO_GYM_TOKEN_CAPTURE_CONTROL_TOKEN"


def ledger_keys(capture: Path) -> dict:
    """The keys NeMo RL main's ``_spinup`` adds in ledger mode (its ``token_capture`` block enabled)."""
    return {
        "policy_model": {"responses_api_models": {"vllm_model": {"return_token_id_information": False}}},
        "token_id_capture": {
            "enabled": True,
            "all_agents": True,
            "rebuild_response": False,
            "dir": str(capture),
            "lineage_store": "nemo_gym.token_id_capture.lineage:FileLineageStore",
            "lineage_store_kwargs": {"root": str(capture / "lineage")},
            "external_staging": True,
            "external_staging_backend": "vllm_worker",
            "control_auth_token_env": CONTROL,
        },
    }


def server_environs(pid: int) -> dict[str, dict[str, str]]:
    """Each server process's environment (``NEMO_GYM_CONFIG_PATH`` names its instance)."""
    out = {}
    for p in psutil.Process(pid).children(recursive=True):
        try:
            env = p.environ()
        except psutil.Error:
            continue
        if "NEMO_GYM_CONFIG_PATH" in env:
            out[env["NEMO_GYM_CONFIG_PATH"]] = env
    return out


@pytest.fixture(scope="module")
def actor_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return actor_venv(tmp_path_factory.mktemp("actor") / "venv")


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    return gym07_trees(tmp_path / "Gym", (*TREES, MULTI))


def spinup_keys(shard: str, paths: list[str], low: int, high: int, engine_url: str, model: str, gcs: str, tmp: Path):
    """What NeMo RL main's ``_spinup`` passes for one shard in ledger mode: its own part of the port
    band, log directory and capture directory."""
    extra = {"nemo_gym_log_dir": str(tmp / shard / "logs"), **ledger_keys(tmp / shard / "token-capture")}
    return spinup_config(paths, [engine_url], model, gcs, ports=(low, high), extra=extra)


def send(proc: subprocess.Popen, body: dict) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(body) + "\n")
    proc.stdin.flush()


def read(proc: subprocess.Popen) -> dict:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        _, err = proc.communicate(timeout=60)
        said = [line for line in err.splitlines() if "GR-" in line or "error" in line.lower()]
        raise AssertionError(f"the actor of a shard exited {proc.returncode}: {said[-40:]}\n{err[-3000:]}")
    return json.loads(line)


@pytest.fixture
def actors(actor_python: Path, checkout: Path, cluster) -> Iterator[dict[str, subprocess.Popen]]:  # noqa: F811 - the fixture imported above
    env = {
        **os.environ,
        "GYM_RUNTIME_PYTHON": str(gym_python()),
        "GYM_RUNTIME_VENV_DIR": str(cache_dir() / "venvs"),
        "GYM_RUNTIME_PRELOAD": "off",
        **{k: cluster.env[k] for k in ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_TMPDIR")},
    }
    procs = {
        name: subprocess.Popen(
            [str(actor_python), str(ACTOR)],
            cwd=checkout,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for name in SHARDS
    }
    try:
        yield procs
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
            p.communicate(timeout=60)


def test_nemo_rl_mains_calls_on_two_shards_in_ledger_mode(
    engine,
    cluster,  # noqa: F811 - the fixture imported above
    checkout: Path,
    actors: dict[str, subprocess.Popen],
    tmp_path: Path,
) -> None:
    served = engine("tools")
    before = ours(cluster.proc.pid)
    heads: dict[str, int] = {}
    for name, (paths, low, high) in SHARDS.items():  # both shards spin up at once, as the set's actors do
        keys = spinup_keys(name, paths, low, high, served.base_url, served.model, cluster.address, tmp_path)
        heads[name] = keys["head_server"]["port"]
        send(actors[name], {"argv": RAY_WORKER_ARGV, "initial": keys, "token": TOKEN})
    entries = {name: read(proc)["entries"] for name, proc in actors.items()}
    # the control token reached the model server of each shard, which serves the control routes, and no other
    environs = {name: server_environs(proc.pid) for name, proc in actors.items()}
    for name, servers in environs.items():
        assert {n for n, env in servers.items() if env.get(CONTROL)} == {"policy_model"}, (name, sorted(servers))
        assert servers["policy_model"][CONTROL] == TOKEN
    # NeMo RL's route map: every entry a shard hosts; policy_model is in both (an allowed duplicate)
    hosts: dict[str, list[str]] = {}
    for name, listed in entries.items():
        for entry in listed:
            hosts.setdefault(entry, []).append(name)
    assert hosts.pop("policy_model") == ["shard-a", "shard-b"]
    assert all(len(shards) == 1 for shards in hosts.values()), hosts
    assert hosts["example_single_tool_call_simple_agent"] == ["shard-a"]
    assert hosts["example_tool_call_multireward"] == ["shard-b"]
    by_agent = rows_of(checkout / "resources_servers/example_single_tool_call/data/example.jsonl", 2)
    by_source = [
        {k: v for k, v in r.items() if k != "agent_ref"} | {"task_source": "example_tool_call_multireward"}
        for r in rows_of(checkout / f"{MULTI}/data/example.jsonl", 2)
    ]
    routed: dict[str, list[dict]] = {name: [] for name in SHARDS}
    for i, row in enumerate(by_agent + by_source):
        row |= {"_rowidx": i, "_ng_rollout_id": f"rollout-{i}"}
        row["responses_create_params"].update(temperature=0, max_output_tokens=40)
        key = (row.get("agent_ref") or {}).get("name") or row["task_source"]
        (shard,) = hosts[key]
        routed[shard].append(row)
    assert [len(rows) for rows in routed.values()] == [2, 2]
    for name, proc in actors.items():  # the node's address, as NeMo RL's head_server_config holds it
        send(proc, {"rows": routed[name], "head": ["127.0.0.1", heads[name]]})
    outs = {name: read(proc) for name, proc in actors.items()}
    for name, out in outs.items():
        assert out["poll_errors"] == [] and out["polls"] > 0, out["poll_errors"]
        assert sorted(row["_rowidx"] for row, _ in out["results"]) == sorted(r["_rowidx"] for r in routed[name])
        for row, result in out["results"]:
            assert isinstance(result["reward"], float), result
            assert row["agent_ref"]["name"] in hosts and hosts[row["agent_ref"]["name"]] == [name]
            rollout_id = row["_ng_rollout_id"]
            answer = out["manifests"][rollout_id]
            assert answer["status"] == 200, answer
            manifest = json.loads(answer["body"])
            calls = {r["model_call_id"] for r in manifest["records"]} | {
                f["model_call_id"] for f in manifest["failures"]
            }
            assert manifest["rollout_id"] == rollout_id and calls, manifest
            assert out["refused"][rollout_id]["status"] == 401
        assert out["shutdown_s"] < 10, out["shutdown_s"]
        assert out["left"] == [], out["left"]
    for name in SHARDS:  # the ledger is written where the trainer named it
        lineage = tmp_path / name / "token-capture" / "lineage"
        assert lineage.is_dir() and any(lineage.iterdir()), name
    for proc in actors.values():
        assert proc.wait(timeout=60) == 0
    assert ours(cluster.proc.pid) - before == set()
