"""One real Ray cluster per test module: a head (1 CPU) and two workers with distinct custom
resources and labels, every node on 127.0.0.1 (tests/helpers/ray_cluster.py). Stopped after the
module, with nothing left: the teardown fails when a raylet, GCS or worker process survives.

Workers: ``a`` (2 CPUs, resource ``node_a``, label ``gr-pool=a``) and ``b`` (2 CPUs, ``node_b``,
``gr-pool=b``). A test that kills a node's raylet adds the node back (:func:`restore`); each test
starts with every worker up anyway (tests/conftest.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from tests.helpers.ray_cluster import LocalRayCluster

WORKERS = {
    "a": {"num_cpus": 2, "resources": {"node_a": 1}, "labels": {"gr-pool": "a"}},
    "b": {"num_cpus": 2, "resources": {"node_b": 1}, "labels": {"gr-pool": "b"}},
}


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


def restore(cluster: LocalRayCluster, name: str) -> None:
    """Add worker ``name`` back after a test killed it."""
    cluster.ensure(name)


@pytest.fixture(scope="module")
def driver(cluster: LocalRayCluster):
    """This test process as the Ray driver (like the daemon), with every address on loopback: Ray
    reads ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` once at import, and another module may have
    imported Ray already, so its constant is set for the module's duration as well."""
    import ray._private.ray_constants as rc

    from gym_runtime.placement.cluster import connect

    with pytest.MonkeyPatch.context() as mp:
        for k, v in cluster.env.items():
            if k.startswith("RAY_"):
                mp.setenv(k, v)
        mp.setattr(rc, "ENABLE_RAY_CLUSTER", False)
        rc_ = connect(cluster.address, "test cluster")
        try:
            yield rc_
        finally:
            with contextlib.suppress(Exception):
                rc_.shutdown()
