"""Server replicas on the nodes of a real Ray cluster, driven like the daemon drives them
(docs/scale-out.md): placement by declared resources, the package used in place or shipped, the
venv built by the node, a crash and a node's loss seen by the driver, errors naming the node."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from gym_runtime.config import build_config
from gym_runtime.errors import StartError
from gym_runtime.package import load_package
from gym_runtime.placement.addresses import ReplicaAddress
from gym_runtime.placement.liveness import ACTOR_GROUPS, ray_call, while_alive
from gym_runtime.placement.package import package_digest
from gym_runtime.placement.remote import PackageShipper, ReplicaLauncher
from gym_runtime.placement.replica import HEAD, ReplicaJob, free_inside_ports
from gym_runtime.placement.spares import MAX_PER_NODE, Spares, per_node
from gym_runtime.settings import load_settings
from tests.helpers.daemon import SIMPLE_SERVERS, simple_env, wait_gone
from tests.placement.conftest import restore

pytestmark = pytest.mark.slow


def job_for(pkg: Path, instance: str = "acme_math", **kw) -> ReplicaJob:
    from sandbox import EgressPolicy

    merged = build_config(load_package(pkg))
    names = [*merged.instances, HEAD]
    inside = dict(zip(names, free_inside_ports(len(names), set()), strict=True))
    s = load_settings()
    fields = {
        "instance": instance,
        "replica": 0,
        "name": instance,
        "run_id": f"t{os.getpid()}-{time.monotonic_ns()}",
        "package_root": str(pkg),
        "package_digest": package_digest(pkg),
        "data": merged.data,
        "secrets": merged.secrets,
        "inside": inside,
        "stable": dict.fromkeys(names, ("127.0.0.1", 1)),
        "ray_address": None,
        "policy": EgressPolicy.from_environ({}, policy_endpoints=[]),
        "settings": {"pin_mode": s.pin_mode, "pins": s.pins, "python": s.python},
    }
    fields.update(kw)
    return ReplicaJob(**fields)


class Replica:
    """A launcher with its stable address and a log pipe, as the daemon would hold them."""

    def __init__(self, driver, job: ReplicaJob, options: dict, shipper_root: Path | None = None, progress=None) -> None:
        self.address = ReplicaAddress(job.name)
        self.launcher = ReplicaLauncher(
            driver, job, options, self.address, PackageShipper(str(shipper_root or job.package_root)), progress
        )
        self.proc = None
        self.r = None

    async def start(self, host: str) -> None:
        await self.address.start(host)

    def spawn(self):
        self.r, w = os.pipe()
        os.set_blocking(self.r, False)
        self.proc = self.launcher.spawn(SimpleNamespace(stdout_fd=w))
        os.close(w)
        return self.proc

    @property
    def url(self) -> str:
        return f"http://{self.address.address[0]}:{self.address.address[1]}"

    async def answers(self, deadline_s: float = 60) -> dict:
        """The replica's answer at its stable address; past ``deadline_s``, the assertion names the
        node and shows the replica's log."""
        until = time.monotonic() + deadline_s
        async with httpx.AsyncClient(trust_env=False) as c:
            while True:
                try:
                    return (await c.get(self.url + "/", timeout=2)).json()
                except httpx.HTTPError as e:
                    assert time.monotonic() < until, (
                        f"{self.url} did not answer within {deadline_s}s ({e!r}); replica on node "
                        f"{self.launcher.node_id}, exit {self.proc and self.proc.exit_info()}; its log:\n{self.log()}"
                    )
                    await asyncio.sleep(0.1)

    def log(self) -> str:
        out = b""
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(self.r, 65536):
                out += chunk
        return out.decode(errors="replace")

    async def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            await self.proc.stop(1.0)
        await self.launcher.close()
        self.address.close()
        if self.r is not None:
            os.close(self.r)


def test_replica_runs_on_the_node_its_resources_name_and_answers_at_its_stable_address(
    cluster, driver, tmp_path: Path
) -> None:
    pkg = simple_env(tmp_path / "pkg")

    async def scenario() -> None:
        rep = Replica(driver, job_for(pkg), {"num_cpus": 0.5, "resources": {"node_b": 0.1}})
        await rep.start(driver.node_ip)
        try:
            facts = await rep.launcher.place()
            assert rep.launcher.node_id == cluster.node_ids["b"]
            assert facts["package"] == "in place" and facts["isolation"] in ("full", "partial", "none")
            assert Path(facts["venv"]).is_dir() and facts["package_root"] == str(pkg)
            proc = rep.spawn()
            assert (await rep.answers()) == {"status": "ok"}
            where = proc.where
            assert where["node_id"] == cluster.node_ids["b"] and where["replica"] == 0
            assert proc.poll() is None and proc.pid is None and isinstance(proc.remote_pid, int)
            await asyncio.sleep(0.6)
            assert "fixture acme_math listening on 127.0.0.1" in rep.log()
            info = await proc.stop(2.0)
            assert info.reason == "terminated" and proc.poll() is not None
            with pytest.raises(httpx.HTTPError):  # no replica behind the address any more
                httpx.get(rep.url + "/", trust_env=False, timeout=2)
        finally:
            await rep.close()

    asyncio.run(scenario())


def test_a_crash_on_a_worker_is_seen_and_the_replica_restarts_on_its_node(cluster, driver, tmp_path: Path) -> None:
    pkg = simple_env(tmp_path / "pkg")

    async def scenario() -> None:
        rep = Replica(driver, job_for(pkg), {"num_cpus": 0.5, "label_selector": {"gr-pool": "a"}})
        await rep.start(driver.node_ip)
        try:
            proc = rep.spawn()
            await rep.answers()
            assert rep.launcher.node_id == cluster.node_ids["a"]
            os.kill(proc.remote_pid, signal.SIGKILL)
            t0 = time.monotonic()
            await asyncio.wait_for(proc.wait(), 10)
            seen = time.monotonic() - t0
            info = proc.exit_info()
            assert info.reason == "signal" and info.returncode not in (0, None), info
            assert seen < 10
            again = rep.spawn()  # what the supervisor does after its backoff: same node, same actor
            await rep.answers()
            assert again.where["node_id"] == cluster.node_ids["a"] and again.remote_pid != proc.remote_pid
        finally:
            await rep.close()

    asyncio.run(scenario())


def test_a_lost_node_is_seen_and_the_replica_is_placed_again_behind_the_same_address(
    cluster, driver, tmp_path: Path
) -> None:
    """The move goes to the warm spare of the node Ray chose, its resources held by a placement
    group that is given back when the replica closes (gym_runtime/placement/spares.py)."""
    from ray.util.placement_group import placement_group_table

    pkg = simple_env(tmp_path / "pkg")

    async def scenario() -> None:
        said: list[str] = []
        # 1.5 CPUs: only a worker (2 CPUs) fits, never the head (1 CPU)
        rep = Replica(driver, job_for(pkg), {"num_cpus": 1.5}, progress=said.append)
        spares = rep.launcher.spares = Spares(driver)
        await rep.start(driver.node_ip)
        group = None
        try:
            proc = rep.spawn()
            await rep.answers()
            spares.fill()
            first = rep.launcher.node_id
            name = next(n for n, i in cluster.node_ids.items() if i == first)
            other = cluster.node_ids["b" if name == "a" else "a"]
            while not spares.ready.get(other):  # the spare of the node it can move to is warm
                await asyncio.sleep(0.2)
            spare = spares.ready[other][0]
            t0 = time.monotonic()
            cluster.kill_raylet(name)
            await asyncio.wait_for(proc.wait(), 30)
            seen = time.monotonic() - t0
            info = proc.exit_info()
            assert info.reason == "node-lost" and first[:8] in info.detail, info
            assert seen < 30 and first in driver.lost
            rep.spawn()
            assert (await rep.answers(120)) == {"status": "ok"}  # the same stable address
            assert rep.launcher.node_id == other and rep.launcher.actor._actor_id == spare._actor_id
            assert any("placed on node" in line and "(spare " in line for line in said), said
            group = rep.launcher.group
            assert placement_group_table(group)["bundles"] == {0: {"CPU": 1.5}}
            assert placement_group_table(group)["bundles_to_node_id"] == {0: other}
        finally:
            await rep.close()
            spares.close()
            restore(cluster, "a")
            restore(cluster, "b")
        assert placement_group_table(group)["state"] == "REMOVED" and not spares.ready

    asyncio.run(scenario())


def on_the_head(driver):
    """Ray's strategy pinning an actor to the driver's node: one asking no resources may otherwise
    be sent to a node an earlier test killed, which Ray still holds alive for 10-20 s (scale-out.md)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(driver.node_id, soft=False)


def test_a_replica_whose_event_loop_is_held_is_not_taken_for_a_lost_node(cluster, driver) -> None:
    """A step that holds the actor's event loop for seconds (a server's spawn on a busy node) once
    made the heartbeat miss twice: every replica starting then was declared lost with its node, and
    with every node lost nothing could be placed again. The ping has a concurrency group of its own."""
    import ray

    class Busy:
        async def hold(self, seconds: float) -> str:
            time.sleep(seconds)  # blocks the actor's event loop, as a synchronous spawn does
            return "held"

        async def ping(self) -> bool:
            return True

    actor = (
        ray.remote(concurrency_groups=ACTOR_GROUPS)(Busy)
        .options(num_cpus=0, scheduling_strategy=on_the_head(driver))
        .remote()
    )
    try:
        assert ray.get(actor.ping.remote(), timeout=120)  # its worker runs, as a placed replica's does
        assert asyncio.run(while_alive(actor, ray_call(actor.hold.remote(6)))) == "held"
    finally:
        ray.kill(actor)


def test_a_replica_too_busy_to_answer_its_pings_is_not_taken_for_a_lost_node(cluster, driver) -> None:
    """Pings that get no answer in time (a replica on a machine whose cores other work takes: with
    the load average at 15-30 one starting was declared lost with its node, and that node left out
    of every placement) are no verdict while the worker's machine still answers at its address; a
    worker that is gone does not."""
    import ray

    from gym_runtime.placement.liveness import HEARTBEAT_MISSES, HEARTBEAT_S, HEARTBEAT_TIMEOUT_S, worker_answers

    class Slow:
        async def hold(self, seconds: float) -> str:
            await asyncio.sleep(seconds)
            return "held"

        async def ping(self) -> bool:
            time.sleep(HEARTBEAT_TIMEOUT_S + 0.5)  # holds the ping's own thread: every ping misses
            return True

    actor = (
        ray.remote(concurrency_groups=ACTOR_GROUPS)(Slow)
        .options(num_cpus=0, scheduling_strategy=on_the_head(driver))
        .remote()
    )
    try:
        assert ray.get(actor.hold.remote(0), timeout=120) == "held"  # its worker runs
        hold_s = 2 * HEARTBEAT_MISSES * (HEARTBEAT_S + HEARTBEAT_TIMEOUT_S)  # twice the misses a verdict needs
        assert asyncio.run(while_alive(actor, ray_call(actor.hold.remote(hold_s)))) == "held"
    finally:
        ray.kill(actor)
    deadline = time.monotonic() + 60
    while worker_answers(actor):
        assert time.monotonic() < deadline, "a killed actor's worker still answers"
        time.sleep(0.2)


def test_a_node_lost_before_its_replica_ran_there_is_left_out_and_the_replica_placed_again(
    cluster, driver, tmp_path: Path
) -> None:
    """Ray can give a replica a node that is already lost: its GCS sends a replica asking no
    resources to a node it picks among those it still holds alive (their loss is declared some
    seconds later), and the actor dies then, before it ever ran. The placement asks again instead of
    failing (the daemon used to take that for a second loss of the replica's node and, a second
    time in one start, for a start-up crash repeating itself: its environment failed and stopped)."""
    pkg = simple_env(tmp_path / "pkg")

    async def scenario() -> None:
        said: list[str] = []
        again = asyncio.Event()

        def progress(line: str) -> None:
            said.append(line)
            if "placing it again" in line:
                again.set()

        # no resources, as the runtime's relays ask: only worker b has the label
        rep = Replica(driver, job_for(pkg), {"num_cpus": 0, "label_selector": {"gr-pool": "b"}}, progress=progress)
        await rep.start(driver.node_ip)
        lost = cluster.node_ids["b"]
        try:
            cluster.kill_raylet("b")
            placing = asyncio.ensure_future(rep.launcher.place())  # Ray still holds b alive: it goes there
            await asyncio.wait({placing, asyncio.ensure_future(again.wait())}, return_when=asyncio.FIRST_COMPLETED)
            assert again.is_set(), placing.result()  # the placement neither failed nor ended on the lost node
            # the node Ray gave it is left out: this worker b, or one lost by an earlier test that Ray still held alive
            assert driver.lost
            await asyncio.to_thread(restore, cluster, "b")  # a new node b: the only one it can take
            facts = await placing
            assert rep.launcher.node_id == cluster.node_ids["b"] != lost and facts["node_id"] == rep.launcher.node_id
            assert any(
                f"({gone[:8]})" in line for line in said if "placing it again" in line for gone in driver.lost
            ), said
            rep.spawn()
            assert (await rep.answers(120)) == {"status": "ok"}
        finally:
            await rep.close()
            restore(cluster, "a")
            restore(cluster, "b")

    asyncio.run(scenario())


def test_package_is_shipped_and_verified_when_its_path_is_not_on_the_node(cluster, driver, tmp_path: Path) -> None:
    pkg = simple_env(tmp_path / "pkg")
    missing = tmp_path / "not-on-any-node"

    async def scenario() -> None:
        rep = Replica(driver, job_for(pkg, package_root=str(missing)), {"num_cpus": 0.5}, shipper_root=pkg)
        await rep.start(driver.node_ip)
        try:
            facts = await rep.launcher.place()
            assert facts["package"] == "shipped"
            shipped = Path(facts["package_root"])
            assert shipped.name == package_digest(pkg) and package_digest(shipped) == package_digest(pkg)
            rep.spawn()
            assert (await rep.answers()) == {"status": "ok"}
        finally:
            await rep.close()

    asyncio.run(scenario())


def test_a_node_without_the_servers_python_fails_naming_server_and_node(cluster, driver, tmp_path: Path) -> None:
    pkg = simple_env(tmp_path / "pkg")

    async def scenario() -> None:
        rep = Replica(driver, job_for(pkg, python="3.99"), {"num_cpus": 0.5, "resources": {"node_a": 0.1}})
        await rep.start(driver.node_ip)
        try:
            with pytest.raises(StartError) as e:
                await rep.launcher.place()
            assert e.value.code == "GR-BUILD-PYTHON"
            assert "server 'acme_math' on node 127.0.0.1 (" + cluster.node_ids["a"][:8] + ")" in e.value.message
            assert "3.99" in e.value.message and rep.launcher.actor is None
        finally:
            await rep.close()

    asyncio.run(scenario())


def test_nothing_of_a_replica_survives_its_close(cluster, driver, tmp_path: Path) -> None:
    pkg = simple_env(tmp_path / "pkg")

    async def scenario() -> int:
        rep = Replica(driver, job_for(pkg), {"num_cpus": 0.5})
        await rep.start(driver.node_ip)
        proc = rep.spawn()
        await rep.answers()
        pid = proc.remote_pid
        await rep.close()
        return pid

    pid = asyncio.run(scenario())
    assert wait_gone([pid], 20, zombies_count=False) == []


def test_spares_are_sized_for_the_loss_of_the_busiest_node() -> None:
    """Each live node keeps as many spares as the loss of the node hosting most replicas moves to
    each other node, so no moved replica waits for a new worker: three replicas on one node of
    three, two on each other node (with one a node, the third replica moved after a loss on a busy
    machine started a new worker: 3.5 s of a 9.5 s recovery)."""
    assert per_node(["n1", "n1", "n1", "n2", None], 3) == 2
    assert per_node(["n1", "n2"], 3) == 1 and per_node([], 3) == 1 and per_node(["n1"] * 3, 1) == 3
    assert per_node(["n1"] * 40, 3) == MAX_PER_NODE


WARM_THEN_BUILD = """
import sys
from pathlib import Path
from gym_runtime.placement.replica import ServerReplica
from gym_runtime.placement.spares import warm
from tests.placement.test_replicas import job_for
warm()
job = job_for(Path(sys.argv[1]))
loaded = set(sys.modules)
replica = ServerReplica.__new__(ServerReplica)  # its placement steps, without Ray
replica.node_id, replica.node_ip, replica._phase = "n", "127.0.0.1", lambda *a: None
replica._take(job)
replica._build(Path(sys.argv[1]))
print(sorted(m for m in set(sys.modules) - loaded if m.startswith(("gym_runtime", "sandbox"))))
"""


def test_a_warm_spare_has_imported_what_the_venv_check_of_a_replica_imports(tmp_path: Path) -> None:
    """``gym_runtime.venvs`` loads its parts on first use: a spare that imported only the package
    left 43 modules (0.08 CPU-seconds) to the first venv check of the replica it adopted."""
    import subprocess
    import sys

    pkg = simple_env(tmp_path / "pkg")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", WARM_THEN_BUILD, str(pkg)], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_spares_stand_on_every_live_node_and_none_survives_the_close(cluster, driver, monkeypatch) -> None:
    """:func:`per_node` spares on every live node (three replicas on one node: two each), a used
    one replaced by :meth:`Spares.keep`; after :meth:`Spares.close` no spare's actor is left alive
    in Ray's actor table and no spare's worker process runs, a spare still starting at the close
    included."""
    import ray
    from ray._private import state

    from gym_runtime.placement import spares as spares_module

    monkeypatch.setattr(spares_module, "REFILL_S", 0.5)  # keep's turn (10 s in a run)

    def alive_replicas() -> set[str]:
        table = state.actors()
        return {i for i, a in table.items() if a["ActorClassName"] == "ServerReplica" and a["State"] != "DEAD"}

    before = alive_replicas()

    async def scenario() -> list[int]:
        live = {n["NodeID"] for n in ray.nodes() if n["Alive"]} - driver.lost
        busiest = next(iter(live))
        spares = Spares(driver, lambda: [busiest] * 3)
        spares.keep()
        while {n: len(a) for n, a in spares.ready.items()} != dict.fromkeys(live, 2):
            await asyncio.sleep(0.2)
        pids = [(await ray_call(a.where.remote(), 60))["pid"] for n in live for a in spares.ready[n]]
        used = spares.ready[busiest].pop()  # as a spare that adopted a replica
        ray.kill(used)  # as the replica's close does
        while not spares._starting[busiest]:  # keep starts a new spare on that node
            await asyncio.sleep(0.05)
        spares.close()  # the other spares ready, one starting
        await asyncio.sleep(0)
        assert not spares.ready
        return pids

    pids = asyncio.run(scenario())
    assert len(pids) == 6 and wait_gone(pids, 60, zombies_count=False) == []
    deadline = time.monotonic() + 60
    while (left := alive_replicas() - before) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left


def test_the_python_api_places_on_ray_and_leaves_a_driver_it_did_not_start_connected(
    cluster, driver, tmp_path: Path
) -> None:
    import ray

    from gym_runtime import Runtime
    from gym_runtime.supervise.options import SuperviseOptions

    pkg = simple_env(tmp_path / "pkg")
    with Runtime(
        pkg,
        placement="ray",
        ray_address=cluster.address,
        work_dir=tmp_path / "run",
        options=SuperviseOptions(shutdown_grace_s=2),
    ) as rt:
        assert rt.ready_info["placement"] == "ray" and set(rt.servers) == SIMPLE_SERVERS
        row = {"agent_ref": {"type": "responses_api_agents", "name": "acme_agent"}}
        out = httpx.post(rt.head_url + "/rollouts/run", json={"examples": [row]}, trust_env=False, timeout=60)
        assert out.json()["results"][0]["reward"] == 1.0
    assert ray.is_initialized()  # this process was a Ray driver before: it stays one
