"""A replica's worker process that dies on a node that lives is the server's failure, not a lost
node (docs/scale-out.md "Crash, out of memory or node loss"): its worker SIGKILLed, or killed by
Ray's memory monitor, on a real cluster on loopback. The node stays up, is not remembered as lost,
the replica is not counted as moved, and a restart places it again and it answers.

The memory monitor is real: worker ``m`` runs its raylet with ``RAY_memory_usage_threshold`` set
a few GiB above the host's memory in use when the cluster starts, and the test process then
touches enough memory to pass it by 1 GiB (measured then: other processes of the host come and go);
Ray kills the only worker leased on that node, the replica's.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gym_runtime.supervise.member import OOM, WORKER_DIED
from tests.helpers.daemon import simple_env
from tests.helpers.ray_cluster import LocalRayCluster
from tests.placement.conftest import WORKERS
from tests.placement.test_replicas import Replica, job_for

pytestmark = pytest.mark.slow

MARGIN = 3 << 30  # the threshold above the host's memory in use at the start
OVER = 1 << 30  # how far the test's memory takes the host past the threshold


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalRayCluster]:
    """The placement tests' cluster plus worker ``m`` (resource ``node_m``) whose raylet's memory
    monitor kills at the host's memory in use now + :data:`MARGIN`."""
    vm = psutil.virtual_memory()
    if vm.available < MARGIN + OVER + (2 << 30):
        pytest.skip(
            f"the memory monitor test needs {(MARGIN + OVER + (2 << 30)) >> 30} GiB free, the host has {vm.available >> 30}"
        )
    threshold = (vm.total - vm.available + MARGIN) / vm.total
    env = {"RAY_memory_usage_threshold": f"{threshold:.4f}", "RAY_memory_monitor_refresh_ms": "100"}
    c = LocalRayCluster()
    c.oom_threshold = int(threshold * vm.total)  # type: ignore[attr-defined]
    try:
        c.start({**WORKERS, "m": {"num_cpus": 2, "resources": {"node_m": 1}, "env_vars": env}})
        yield c
    finally:
        c.stop()
    left = c.leftovers()
    assert not left, f"Ray processes left after the cluster stopped: {[p.pid for p in left]}"


def test_a_sigkilled_worker_is_a_crash_on_its_live_node_not_its_loss(cluster, driver, tmp_path: Path) -> None:
    pkg = simple_env(tmp_path / "pkg")

    async def scenario() -> None:
        rep = Replica(driver, job_for(pkg), {"num_cpus": 0.5, "label_selector": {"gr-pool": "a"}})
        await rep.start(driver.node_ip)
        try:
            proc = rep.spawn()
            await rep.answers()
            node = rep.launcher.node_id
            assert node == cluster.node_ids["a"]
            worker = (await rep.launcher.actor.where.remote())["pid"]
            os.kill(worker, signal.SIGKILL)
            await asyncio.wait_for(proc.wait(), 30)
            info = proc.exit_info()
            assert info.reason == WORKER_DIED, info
            assert (
                f"its worker process (pid {worker}) died on node 127.0.0.1 ({node[:8]}), which is alive" in info.detail
            )
            assert "SYSTEM_ERROR" in info.detail
            assert node not in driver.lost and rep.launcher.moves == 0 and rep.launcher.loss is None
            again = rep.spawn()  # the supervisor's restart: a new actor, its node still a candidate
            assert (await rep.answers(120)) == {"status": "ok"}
            assert again.where["node_id"] == cluster.node_ids["a"]
        finally:
            await rep.close()

    asyncio.run(scenario())


def test_a_worker_killed_by_the_kernels_oom_killer_is_oom_naming_its_cgroups_limit(
    cluster, driver, tmp_path: Path
) -> None:
    """The replica's worker moved into a memory cgroup of 128 MiB (the sandbox's own cgroup slot,
    sandbox/limits.py), then made to allocate 512 MiB (Ray's ``__ray_call__`` runs a function in the
    actor's process): the kernel kills it; Ray reports a SIGKILLed worker, the node's kernel log
    says whose kill it was."""
    from sandbox.limits import CgroupSlot, ResourceLimits, cgroup_mode, join_cgroups

    if cgroup_mode() == "none" or not os.access("/dev/kmsg", os.R_OK):
        pytest.skip("needs a writable memory cgroup and a readable /dev/kmsg")
    pkg = simple_env(tmp_path / "pkg")

    async def scenario() -> None:
        rep = Replica(driver, job_for(pkg), {"num_cpus": 0.5, "label_selector": {"gr-pool": "a"}})
        await rep.start(driver.node_ip)
        slot = CgroupSlot("replica-worker", ResourceLimits(memory_mb=128))
        try:
            proc = rep.spawn()
            await rep.answers()
            node = rep.launcher.node_id
            worker = (await rep.launcher.actor.where.remote())["pid"]
            join_cgroups(slot.procs_files, pid=worker)
            rep.launcher.actor.__ray_call__.remote(lambda self: len(bytearray(b"1") * (512 << 20)))
            await asyncio.wait_for(proc.wait(), 60)
            info = proc.exit_info()
            assert info.reason == OOM, info
            assert info.detail.startswith(
                f"its worker process (pid {worker}) was killed by the kernel's OOM killer on node 127.0.0.1 "
                f"({node[:8]}): its cgroup's memory limit 128MiB"
            ), info.detail
            assert f"Killed process {worker} (" in info.detail
            assert node not in driver.lost and rep.launcher.moves == 0
            print(f"kernel OOM kill: {info.detail}")
        finally:
            await rep.close()
            slot.remove()

    asyncio.run(scenario())


@pytest.mark.timeout(600)  # a cluster's start, a touch of some GiB and a new placement on a loaded host
def test_a_worker_killed_by_rays_memory_monitor_is_oom_naming_the_limit(cluster, driver, tmp_path: Path) -> None:
    pkg = simple_env(tmp_path / "pkg")

    async def scenario() -> None:
        rep = Replica(driver, job_for(pkg), {"num_cpus": 0.5, "resources": {"node_m": 0.1}})
        await rep.start(driver.node_ip)
        hog = None
        try:
            proc = rep.spawn()
            await rep.answers(180)
            node = rep.launcher.node_id
            assert node == cluster.node_ids["m"]
            vm = psutil.virtual_memory()
            t0 = time.monotonic()
            hog = bytearray(b"\1") * max(cluster.oom_threshold - (vm.total - vm.available) + OVER, OVER)  # resident
            await asyncio.wait_for(proc.wait(), 60)
            seen = time.monotonic() - t0
            del hog
            hog = None
            info = proc.exit_info()
            assert info.reason == OOM, info
            assert f"its worker was killed by Ray's memory monitor on node 127.0.0.1 ({node[:8]})" in info.detail
            assert "the node's memory was" in info.detail and "exceeded threshold" in info.detail, info.detail
            assert "its placement.memory: none declared" in info.detail
            assert node not in driver.lost and rep.launcher.moves == 0 and rep.launcher.loss is None
            print(f"memory monitor kill seen {seen:.1f}s after the hog: {info.detail}")
            rep.spawn()  # the supervisor's restart, on the same node (only it has node_m)
            assert (await rep.answers(180)) == {"status": "ok"}
            assert rep.launcher.node_id == cluster.node_ids["m"]
        finally:
            del hog
            await rep.close()

    asyncio.run(scenario())
