"""NeMo RL's ``_spinup`` (nemo_rl/environments/nemo_gym.py), with the one import swapped, and Gym
0.7.0's own collector: shared by the stub-model test (tests/nemo_gym/test_nemo_rl_spinup.py) and
the real-engine one (tests/vllm/test_nemo_rl_spinup.py).

``spinup`` builds exactly the global config NeMo RL's actor builds (its keys, a list
``policy_base_url``, ``dummy_key``, the node's address as ``default_host``, the 5000-5999 range,
the aiohttp limits, the trainer's GCS address, ``head_server`` on 0.0.0.0 and a free port of the
range) and calls ``RunHelper().start(GlobalConfigDictParserConfig(...))`` as it does.
``collect`` runs ``RolloutCollectionHelper().run_examples(rows, BaseServerConfig(...))`` in a venv
holding ``nemo-gym==0.7.0`` and returns each ``(row, result)``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil
from omegaconf import DictConfig

from gym_runtime.errors import GymRuntimeError
from gym_runtime.nemo_gym import GlobalConfigDictParserConfig, RunHelper
from gym_runtime.supervise import head_view

TREES = (
    "responses_api_models/vllm_model",
    "resources_servers/example_single_tool_call",
    "responses_api_agents/simple_agent",
    "environment_servers/legacy_agent",
)
CONFIG_PATHS = [
    "responses_api_models/vllm_model/configs/vllm_model_for_training.yaml",
    "resources_servers/example_single_tool_call/configs/example_single_tool_call.yaml",
]
AGENT = "example_single_tool_call_simple_agent"

COLLECT = r"""
import asyncio, json, sys
from nemo_gym.rollout_collection import RolloutCollectionHelper
from nemo_gym.server_utils import BaseServerConfig
args = json.loads(sys.argv[1])

async def main():
    out = []
    for task in RolloutCollectionHelper().run_examples(
            examples=args["rows"], head_server_config=BaseServerConfig(host=args["host"], port=args["port"])):
        row, result = await task
        out.append([row, result])
    print(json.dumps(out))

asyncio.run(main())
"""


def free_port_in(low: int, high: int) -> int:
    """A free port of ``[low, high)``, as NeMo RL's ``_get_free_port_local`` picks the head's."""
    for port in range(low, high):
        with socket.socket() as s, contextlib.suppress(OSError):
            s.bind(("0.0.0.0", port))
            return port
    raise AssertionError(f"no free port in {low}-{high}")


def spinup_config(
    config_paths: list[str],
    base_urls: list[str],
    model_name: str,
    gcs_address: str,
    ports: tuple[int, int] = (5000, 6000),
    extra: dict | None = None,
) -> dict:
    """The initial global config NeMo RL's ``_spinup`` passes (its keys, as its ``nemo_gym.py``
    builds them): the head server on a free port of ``ports`` (``[low, high)``), ``extra`` keys
    merged over them (NeMo RL main's ledger mode adds some)."""
    low, high = ports
    return {
        "config_paths": list(config_paths),
        "policy_model_name": model_name,
        "policy_api_key": "dummy_key",
        "policy_base_url": base_urls,
        "default_host": "127.0.0.1",
        "port_range_low": low,
        "port_range_high": high,
        "global_aiohttp_connector_limit_per_host": 16_384,
        "global_aiohttp_connector_limit": 65_536,
        "ray_head_node_address": gcs_address,
        "head_server": {"host": "0.0.0.0", "port": free_port_in(low, high)},
        **(extra or {}),
    }


def spinup(
    base_urls: list[str], model_name: str, gcs_address: str, dotenv_dir: Path, extra: dict | None = None
) -> tuple[RunHelper, int]:
    """NeMo RL's ``_spinup`` calls through the drop-in; the helper and the head server's port.
    ``extra``: more keys of the initial global config (NeMo RL main's ledger mode adds some)."""
    initial = spinup_config(CONFIG_PATHS, base_urls, model_name, gcs_address, extra=extra)
    head_port = initial["head_server"]["port"]
    rh = RunHelper()
    rh.start(
        global_config_dict_parser_config=GlobalConfigDictParserConfig(
            dotenv_path=dotenv_dir / "nemo_gym_env.yaml",
            initial_global_config_dict=DictConfig(initial),
            skip_load_from_cli=True,
        )
    )
    return rh, head_port


def rows_of(example_jsonl: Path, n: int) -> list[dict]:
    """The first ``n`` rows of Gym's example data, stamped as NeMo RL stamps them (``_rowidx``, ``agent_ref``)."""
    rows = [json.loads(line) for line in example_jsonl.read_text().splitlines() if line.strip()][:n]
    return [
        {**r, "_rowidx": i, "agent_ref": {"type": "responses_api_agents", "name": AGENT}} for i, r in enumerate(rows)
    ]


def collect(gym_python: Path, head_port: int, rows: list[dict]) -> list[tuple[dict, dict]]:
    """Gym 0.7.0's ``RolloutCollectionHelper.run_examples`` against the head server on this node."""
    done = subprocess.run(
        [str(gym_python), "-c", COLLECT, json.dumps({"rows": rows, "host": "127.0.0.1", "port": head_port})],
        capture_output=True,
        text=True,
        timeout=900,
        env={
            "PATH": f"{gym_python.parent}:/usr/bin:/bin",
            "HOME": os.environ.get("HOME", "/tmp"),
            "NO_PROXY": "127.0.0.1",
        },
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return [tuple(pair) for pair in json.loads(done.stdout.splitlines()[-1])]


def ours(cluster_pid: int) -> set[int]:
    """This process's live descendants, but the test cluster's own (its control process ``cluster_pid``,
    its nodes and the workers Ray starts for the servers' drivers)."""
    cluster = {cluster_pid, *(p.pid for p in psutil.Process(cluster_pid).children(recursive=True))}
    out = set()
    for p in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if p.pid not in cluster and p.status() != psutil.STATUS_ZOMBIE:
                out.add(p.pid)
    return out


def token_items(result: dict) -> list[dict]:
    """The ``response.output`` items NeMo RL trains on: those carrying generation token ids."""
    return [o for o in result["response"]["output"] if o.get("generation_token_ids")]


def kill_for_good(rh: RunHelper, name: str, deadline_s: float = 600) -> GymRuntimeError:
    """SIGKILL server ``name`` each time it is back up until the runtime gives up on it; returns
    what ``poll`` then raises."""
    killed: set[int] = set()
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            rh.poll()
        except GymRuntimeError as e:
            return e
        snap = next(s for s in head_view.instances(rh._runtime.env) if s["name"] == name)
        if snap["status"] == "ready" and snap["pid"] and snap["pid"] not in killed:
            killed.add(snap["pid"])
            with contextlib.suppress(ProcessLookupError):
                os.kill(snap["pid"], signal.SIGKILL)
        time.sleep(0.2)
    raise AssertionError(f"poll() did not raise within {deadline_s}s after killing {name} {len(killed)} times")
