"""A real NeMo Gym 0.4.0 environment (server trees from the PyPI wheel, unchanged:
tests/helpers/gym_package.py) placed with ``up --placement ray`` (docs/scale-out.md): its resources
server pinned to a worker by a custom resource only that worker declares (a ``placement`` block
given as a command-line override: Gym's files stay as they are), ``/rollouts/run`` through
Gym's ``simple_agent`` returns rewards, the server's process runs under that worker's raylet, and a
stop leaves nothing.

Gym's trees need Python >= 3.12 and call ``ray.init`` at start, joining the cluster, so the whole
cluster and the daemon run on that Python, from a venv with the runtime's locked dependencies
(tests/helpers/node_image.py: what a cluster image gives its nodes), with this checkout on
``PYTHONPATH``. The servers' venvs are kept in the test cache between runs.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from tests.helpers.daemon import kill_tree, read_ready_line, wait_gone
from tests.helpers.gym_package import assemble_gym_package, cache_dir, gym_wheel, python_312_plus
from tests.helpers.node_image import image_env, node_venv
from tests.helpers.ray_cluster import LocalRayCluster
from tests.placement.test_nodes import replica_actors

pytestmark = [pytest.mark.pypi, pytest.mark.slow]
RESOURCES, AGENT = "example_single_tool_call", "example_single_tool_call_simple_agent"


@pytest.fixture(scope="module")
def image() -> tuple[str, Path]:
    python = python_312_plus()
    if python is None:
        pytest.skip("no Python >= 3.12 under pyenv (nemo-gym 0.4.0 requires it)")
    return python, node_venv(python)


@pytest.fixture(scope="module")
def cluster(image, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRayCluster]:
    _, venv = image
    c = LocalRayCluster(python=str(venv / "bin" / "python"))
    c.env = {k: v for k, v in image_env(venv, c.env).items() if not k.startswith("GYM_RUNTIME_")}
    c.env.update(
        {
            "GYM_RUNTIME_HOME": str(tmp_path_factory.mktemp("nodes-home")),
            "GYM_RUNTIME_VENV_DIR": str(cache_dir() / "venvs"),
        }
    )
    try:
        c.start({"gym": {"num_cpus": 2, "resources": {"gym_node": 1}}})
        yield c
    finally:
        c.stop()
    left = c.leftovers()
    assert not left, f"Ray processes left after the cluster stopped: {[p.pid for p in left]}"


PIN = f"{RESOURCES}.resources_servers.{RESOURCES}.placement.resources.gym_node=1"  # a command-line override


def raylet_of(cluster: LocalRayCluster, node_id: str) -> int:
    """The pid of node ``node_id``'s raylet (Ray starts it with ``--node_id=<id>``)."""
    for p in cluster.leftovers():
        try:
            if p.name() == "raylet" and f"--node_id={node_id}" in p.cmdline():
                return p.pid
        except psutil.Error:
            continue
    raise AssertionError(f"no raylet of node {node_id} found")


def test_a_gym_resources_server_pinned_to_a_worker_serves_rollouts(image, cluster, tmp_path: Path) -> None:
    python, venv = image
    pkg, rows = assemble_gym_package(gym_wheel(python), tmp_path / "pkg")
    env = {
        **cluster.env,
        "GYM_RUNTIME_HOME": str(tmp_path / "home"),
        "GYM_RUNTIME_PIN_NEMO_GYM": "0.4.0",
        "GYM_RUNTIME_PIN_OPENAI": "2.7.2",
        "GYM_RUNTIME_PIN_MODE": "gym",
        "GYM_RUNTIME_POLICY_API_KEY": "sk-test",
    }
    proc = subprocess.Popen(
        [
            str(venv / "bin" / "python"),
            "-m",
            "gym_runtime.cli.main",
            "up",
            str(pkg),
            PIN,
            "--work-dir",
            str(tmp_path / "run"),
            "--placement",
            "ray",
            "--ray-address",
            cluster.address,
            "--python",
            python,
            "--shutdown-grace",
            "2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        info = json.loads(read_ready_line(proc, timeout=1200))
        assert info["placement"] == "ray" and set(info["servers"]) == {"policy_model", RESOURCES, AGENT}
        table = {
            i["process_name"]: i
            for i in httpx.get(info["head_server"] + "/server_instances", trust_env=False, timeout=10).json()
        }
        res = table[RESOURCES]
        assert res["node_id"] == cluster.node_ids["gym"] and res["state"] == "ready"
        assert res["server_type"] == "resources_servers" and res["name"] == RESOURCES
        server = psutil.Process(res["remote_pid"])  # the server's process, under that worker's raylet
        assert raylet_of(cluster, cluster.node_ids["gym"]) in [p.pid for p in server.parents()]
        assert server.cwd().endswith(f"resources_servers/{RESOURCES}")
        ref = {"type": "responses_api_agents", "name": AGENT}
        r = httpx.post(
            info["head_server"] + "/rollouts/run",
            json={"examples": [{**row, "agent_ref": ref} for row in rows[:2]]},
            timeout=300,
            trust_env=False,
        )
        results = json.loads(r.text)["results"]
        for out in results:
            assert "error" not in out, out
            assert out["reward"] == 1.0
            assert [o["type"] for o in out["response"]["output"]] == [
                "function_call",
                "function_call_output",
                "message",
            ]
        pids = [t["remote_pid"] for t in table.values() if t.get("remote_pid")]
        assert len(pids) == 3
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(120) == 0
        assert wait_gone(pids, 60, zombies_count=False) == []
    finally:
        kill_tree(proc)
    assert replica_actors(cluster, 60) == []
