"""Shards as NeMo RL's ``NemoGymShardSet`` makes them, through the ``RunHelper`` drop-in: several
starts of the same global config in one Ray cluster (a real three-node cluster on 127.0.0.1:
tests/helpers/ray_cluster.py), one Ray actor per shard on its own node (a STRICT_SPREAD placement
group), each shard with its own port range and log directory, all under one shared start deadline
(each start gets what is left of it as Gym's ``server_spinup_timeout_seconds``).

* both shards become ready, each head server in its shard's port range, each log directory its own;
  rows sent to the two shards are spread over them and every one gets its reward;
* the set's cleanup while a shard is still in ``start()`` (``shutdown`` on every actor at once):
  that start raises ``GR-START-INTERRUPTED`` across the actor boundary, every ``shutdown`` returns
  after it, and no process of either shard is left.

The environment is the built-in quickstart's trees without a manifest (tests/nemo_gym/test_job.py),
its policy one stub model process. Light on purpose: every node has one CPU.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from gym_runtime.errors import GymRuntimeError
from tests.helpers.environments import StubEndpoint
from tests.helpers.ray_cluster import LocalRayCluster
from tests.nemo_gym.spinup import free_port_in
from tests.nemo_gym.test_job import ARITH, POLICY, trees
from tests.nemo_gym.test_run_helper import row

pytestmark = [pytest.mark.pypi, pytest.mark.slow, pytest.mark.timeout(1800)]
WORKERS = {"n1": {"num_cpus": 1, "resources": {"gym_shard": 1}}, "n2": {"num_cpus": 1, "resources": {"gym_shard": 1}}}
RANGES = {"shard-a": (5000, 5499), "shard-b": (5500, 5999)}
DEADLINE_S = 900.0  # the set's one start deadline, shared by its shards


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalRayCluster]:
    c = LocalRayCluster()
    try:
        c.start(WORKERS)
        yield c
    finally:
        c.stop()
    left = c.leftovers()
    assert not left, f"Ray processes left after the cluster stopped: {[p.pid for p in left]}"


@pytest.fixture(scope="module")
def driver(cluster: LocalRayCluster):
    """This test process as the trainer's Ray driver, every address on loopback."""
    import ray._private.ray_constants as rc

    from gym_runtime.placement.cluster import connect

    with pytest.MonkeyPatch.context() as mp:
        for k, v in cluster.env.items():
            if k.startswith("RAY_"):
                mp.setenv(k, v)
        mp.setattr(rc, "ENABLE_RAY_CLUSTER", False)
        connected = connect(cluster.address, "test cluster")
        try:
            yield connected
        finally:
            with contextlib.suppress(Exception):
                connected.shutdown()


def shard_config(name: str, stub: str, tmp: Path, deadline: float) -> dict:
    low, high = RANGES[name]
    return {
        "config_paths": [POLICY, ARITH],
        "policy_model_name": "acme",
        "policy_api_key": "dummy_key",
        "policy_base_url": [stub],
        "default_host": "127.0.0.1",
        "port_range_low": low,
        "port_range_high": high,
        "global_aiohttp_connector_limit_per_host": 16384,
        "global_aiohttp_connector_limit": 65536,
        "head_server": {"host": "0.0.0.0", "port": free_port_in(low, high + 1)},
        "nemo_gym_log_dir": str(tmp / "logs" / name),
        "server_spinup_timeout_seconds": max(1.0, deadline - time.monotonic()),
    }


def leftovers(tmp: Path) -> list[int]:
    """Live processes of these shards: a server's ``HOME`` lies in its shard's run directory."""
    out = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if p.status() != psutil.STATUS_ZOMBIE and p.environ().get("HOME", "").startswith(str(tmp)):
                out.append(p.pid)
    return out


def test_two_shards_on_three_nodes_spread_rows_and_a_cleanup_during_a_start_leaves_nothing(
    cluster: LocalRayCluster, driver, tmp_path: Path
) -> None:
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from tests.nemo_gym.shard_actor import Shard

    root = trees(tmp_path)
    environ = {
        "GYM_RUNTIME_HOME": str(tmp_path / "home"),
        "GYM_RUNTIME_VENV_DIR": str(Path(os.environ["GYM_RUNTIME_HOME"]).parent / "shared-venvs"),
    }
    pg = placement_group([{"gym_shard": 1}, {"gym_shard": 1}], strategy="STRICT_SPREAD")
    ray.get(pg.ready(), timeout=120)

    def actor(i: int):
        return Shard.options(
            scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i)
        ).remote(str(root), environ)

    with StubEndpoint(tmp_path, "acme") as stub:
        shards = {"shard-a": actor(0), "shard-b": actor(1)}
        try:
            nodes = ray.get([s.node_id.remote() for s in shards.values()], timeout=120)
            assert len(set(nodes)) == 2 and set(nodes) <= set(cluster.node_ids.values())

            deadline = time.monotonic() + DEADLINE_S
            heads = dict(
                zip(
                    shards,
                    ray.get(
                        [s.spinup.remote(shard_config(n, stub.url, tmp_path, deadline)) for n, s in shards.items()],
                        timeout=DEADLINE_S,
                    ),
                    strict=True,
                )
            )
            for name, url in heads.items():
                low, high = RANGES[name]
                assert low <= int(url.rsplit(":", 1)[1]) <= high, (name, url)
                assert (tmp_path / "logs" / name / "logs" / "arithmetic.log").is_file()
            assert ray.get([s.health_check.remote() for s in shards.values()]) == [True, True]
            assert len(leftovers(tmp_path)) >= 6  # the check below sees the shards' servers (3 each)

            rows = [row(i, i + 1) for i in range(6)]
            got = {}
            for name, part in zip(
                heads, (rows[0::2], rows[1::2]), strict=True
            ):  # the set spreads a batch over its shards
                url = heads[name].replace("0.0.0.0", "127.0.0.1") + "/rollouts/run"
                got[name] = httpx.post(url, json={"examples": part}, timeout=300, trust_env=False).json()["results"]
            assert {n: len(r) for n, r in got.items()} == {"shard-a": 3, "shard-b": 3}
            assert all(r["reward"] in (0.0, 1.0) for rs in got.values() for r in rs), got

            assert ray.get(shards["shard-b"].shutdown.remote(), timeout=300) == []
            ray.kill(shards["shard-b"])
            shards["shard-b"] = actor(1)  # the shard comes back, and the set is cleaned up during its start
            starting = shards["shard-b"].spinup.remote(
                shard_config("shard-b", stub.url, tmp_path, time.monotonic() + DEADLINE_S)
            )
            end = time.monotonic() + DEADLINE_S
            while not ray.get(shards["shard-b"].starting_servers.remote(), timeout=60):
                assert time.monotonic() < end
                ready, _ = ray.wait([starting], timeout=0)
                assert not ready, "shard-b became ready before the cleanup could catch it in start()"
                time.sleep(0.2)
            left = ray.get([s.shutdown.remote() for s in shards.values()], timeout=300)
            assert left == [[], []]
            with pytest.raises(GymRuntimeError) as e:  # the start's own error, unpickled on this side
                ray.get(starting, timeout=60)
            assert e.value.code == "GR-START-INTERRUPTED"
            assert leftovers(tmp_path) == []
        finally:
            for s in shards.values():
                with contextlib.suppress(Exception):
                    ray.get(s.shutdown.remote(), timeout=120)
                ray.kill(s)
            remove_placement_group(pg)
