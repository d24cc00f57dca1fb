"""NeMo RL's ``_spinup`` through the drop-in, on NeMo Gym 0.7.0's own trees (from the wheel,
unchanged, laid out as a Gym checkout without a manifest: tests/helpers/gym07.py), joining a Ray
cluster the test started (its servers are Ray drivers, as Gym's are), with two stub model
processes as the policy's vLLM replicas; Gym 0.7.0's own ``RolloutCollectionHelper.run_examples``
(in a venv with ``nemo-gym==0.7.0``) collects the rows. Then: each result carries what NeMo RL
trains on (``response.output[*]`` ``prompt_token_ids``, ``generation_token_ids``,
``generation_log_probs``; ``reward``), both replicas served, ``poll()`` raises a picklable error
once a server was killed for good, and ``shutdown()`` leaves no process.

Gym 0.7.0 needs Python >= 3.13.14 (tests/helpers/gym_python.py), and its servers' Ray must be the
cluster's, so the cluster runs on that Python from a venv of the runtime's locked dependencies
(tests/helpers/node_image.py). The real engine: tests/vllm/test_nemo_rl_spinup.py.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gym_runtime.errors import GymRuntimeError
from tests.helpers.environments import StubEndpoint
from tests.helpers.gym07 import gym07_trees
from tests.helpers.gym_package import cache_dir, gym_venv
from tests.helpers.gym_python import gym_python
from tests.helpers.node_image import image_env, node_venv
from tests.helpers.ray_cluster import LocalRayCluster
from tests.nemo_gym.spinup import TREES, collect, kill_for_good, ours, rows_of, spinup, token_items

pytestmark = [pytest.mark.pypi, pytest.mark.slow, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def python() -> Path:
    return gym_python()


@pytest.fixture(scope="module")
def cluster(python: Path) -> Iterator[LocalRayCluster]:
    venv = node_venv(str(python))
    c = LocalRayCluster(python=str(venv / "bin" / "python"))
    c.env = {k: v for k, v in image_env(venv, c.env).items() if not k.startswith("GYM_RUNTIME_")}
    try:
        c.start({})
        yield c
    finally:
        c.stop()
    left = c.leftovers()
    assert not left, f"Ray processes left after the cluster stopped: {[p.pid for p in left]}"


@pytest.fixture
def on_the_node(python: Path, cluster: LocalRayCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process as NeMo RL's actor on a node of ``cluster``: the node's own Ray settings, the
    Gym checkout as working directory, the servers' Python and the tests' shared venv cache."""
    for key in ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_TMPDIR"):
        monkeypatch.setenv(key, cluster.env[key])
    monkeypatch.setenv("GYM_RUNTIME_PYTHON", str(python))
    monkeypatch.setenv("GYM_RUNTIME_VENV_DIR", str(cache_dir() / "venvs"))
    root = gym07_trees(tmp_path / "Gym", TREES)
    monkeypatch.chdir(root)
    return root


def served(url: str) -> int:
    return httpx.get(url.removesuffix("/v1") + "/stub/stats", trust_env=False).json()["chat_completions"]


def test_nemo_rls_spinup_collects_token_ids_and_rewards_then_poll_and_shutdown(
    on_the_node: Path, cluster: LocalRayCluster, tmp_path: Path
) -> None:
    venv = gym_venv("0.7.0")
    assert venv is not None
    before = ours(cluster.proc.pid)
    with StubEndpoint(tmp_path, "acme-policy") as a, StubEndpoint(tmp_path, "acme-policy") as b:
        rh, head_port = spinup([a.url, b.url], "acme-policy", cluster.address, tmp_path)
        try:
            assert rh.ready_info["ray"] == {
                "mode": "join",
                "address": cluster.address,
                "source": "config ray_head_node_address",
                "needed_by": rh.ready_info["ray"]["needed_by"],
                "without": rh.ready_info["ray"]["without"],
            }
            assert len(ours(cluster.proc.pid) - before) >= 2 + 4  # the stubs and the four servers
            rows = rows_of(on_the_node / "resources_servers/example_single_tool_call/data/example.jsonl", 4)
            results = collect(venv / "bin" / "python", head_port, rows)
            assert sorted(row["_rowidx"] for row, _ in results) == [0, 1, 2, 3]
            for _row, result in results:
                assert isinstance(result["reward"], float), result
                items = token_items(result)
                assert items, result["response"]["output"]
                for item in items:
                    assert item["prompt_token_ids"] and all(isinstance(t, int) for t in item["prompt_token_ids"])
                    assert len(item["generation_log_probs"]) == len(item["generation_token_ids"])
                    assert all(lp <= 0.0 for lp in item["generation_log_probs"])
            assert served(a.url) > 0 and served(b.url) > 0  # the list is the policy's replicas

            rh.poll()
            failure = kill_for_good(rh, "example_single_tool_call")
            assert failure.code.startswith("GR-START") and "example_single_tool_call" in failure.message
            again = pickle.loads(pickle.dumps(failure))  # NeMo RL's health_check raises it across Ray
            assert isinstance(again, GymRuntimeError) and again.render() == failure.render()
        finally:
            rh.shutdown()
        assert ours(cluster.proc.pid) - before == {a.running.proc.pid, b.running.proc.pid}
