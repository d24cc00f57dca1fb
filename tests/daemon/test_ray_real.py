"""Case C26 with real Ray (dev dependency) and ``gym-runtime up`` as a subprocess.

Read from the case folder: ``env_cases.txt`` (1 dashboard URL, 2 stale address, 3 a cluster
started with ``ray start --head --block`` and no address file + ``auto``, 4 ``local``). One outside
cluster is shared by the tests that need it (a Ray start is ~8 s here); it is started with its own
``--temp-dir``, so Ray's default address file never names it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from gym_runtime.ray.head import LOOPBACK_ENV
from gym_runtime.ray.target import choose, find_running_cluster
from tests.helpers.cases import case_dir
from tests.helpers.daemon import (
    FIXTURE_APP,
    declaring_ray,
    descendants,
    kill_tree,
    read_ready_line,
    simple_env,
    up_process,
    wait_gone,
    write_fixture_package,
)

pytestmark = pytest.mark.slow


def env_case(n: int) -> str:
    """The text of ``case n:`` in env_cases.txt (continuation lines included)."""
    text = (case_dir("C26") / "env_cases.txt").read_text()
    return text.split(f"case {n}:")[1].split(f"case {n + 1}:")[0]


def gcs_pids(procs: list[psutil.Process]) -> list[int]:
    return [p.pid for p in procs if p.name().startswith("gcs_server")]


def run_up(tmp: Path, *args: str, env: dict[str, str] | None = None, pkg: Path | None = None) -> tuple[int, str, float]:
    t0 = time.monotonic()
    proc = up_process(pkg or simple_env(tmp / "pkg"), tmp, *args, env=env)
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        kill_tree(proc)
    assert out == ""
    return proc.returncode, err, time.monotonic() - t0


def test_case1_dashboard_url_rejected_before_anything_is_built(tmp_path: Path) -> None:
    url = env_case(1).split("RAY_ADDRESS=")[1].split()[0]
    code, err, _ = run_up(tmp_path, env={"RAY_ADDRESS": url})
    assert code == 1 and "GR-RAY-DASHBOARD-URL" in err
    assert f"RAY_ADDRESS={url} looks like a dashboard URL" in err and "host:6379" in err
    assert "venv" not in err  # rejected at the config stage


def test_case2_stale_address_fails_in_bounded_time_naming_its_source(tmp_path: Path) -> None:
    assert "stale address" in env_case(2)
    with socket.socket() as s:  # a loopback port nobody listens on: the cluster that no longer exists
        s.bind(("127.0.0.1", 0))
        stale = f"127.0.0.1:{s.getsockname()[1]}"
    code, err, took = run_up(tmp_path, env={"RAY_ADDRESS": stale})
    assert code == 3 and "GR-RAY-UNREACHABLE" in err and f"{stale} (from RAY_ADDRESS)" in err
    assert took < 30


def test_case3_auto_without_a_cluster_never_starts_one(tmp_path: Path) -> None:
    if find_running_cluster() is not None:
        pytest.skip("a Ray cluster already runs on this host")
    code, err, _ = run_up(tmp_path, "--ray-address", "auto")
    assert code == 1 and "GR-RAY-AUTO" in err and "never starts a second cluster" in err
    assert find_running_cluster() is None


def _node_registered(ray: Path, address: str) -> bool:
    """The cluster's raylet registered with its GCS (``ray status`` lists an active node): past the
    start-up step where a raylet on a loaded host may still die (it waits for its agents)."""
    out = subprocess.run(
        [str(ray), "status", "--address", address],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **LOOPBACK_ENV, "RAY_USAGE_STATS_ENABLED": "0"},
    )
    return out.returncode == 0 and "Active:" in out.stdout and " node_" in out.stdout.split("Active:")[1]


@pytest.fixture(scope="module")
def outside_cluster(tmp_path_factory: pytest.TempPathFactory):
    """A cluster started like case 3 (``ray start --head --block``, own temp dir, no address file),
    ready once its node registered; started again (up to 3 times) when the raylet dies on the way
    (seen on an overloaded host: the raylet gives up waiting for its metrics agent and ``--block``
    then stops the GCS too)."""
    if find_running_cluster() is not None:
        pytest.skip("a Ray cluster already runs on this host")
    tmp = Path(f"/tmp/gr-test-ray-{os.getpid()}")
    ray = Path(sys.executable).with_name("ray")
    proc = None
    try:
        for _ in range(3):
            subprocess.run(["rm", "-rf", str(tmp)], check=False)
            tmp.mkdir()
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            proc = subprocess.Popen(
                [
                    str(ray),
                    "start",
                    "--head",
                    "--block",
                    "--port",
                    str(port),
                    "--node-ip-address",
                    "127.0.0.1",
                    "--include-dashboard",
                    "false",
                    "--disable-usage-stats",
                    "--temp-dir",
                    str(tmp),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env={**os.environ, **LOOPBACK_ENV, "HOME": str(tmp), "RAY_USAGE_STATS_ENABLED": "0"},
                start_new_session=True,
            )
            deadline = time.monotonic() + 120
            while (
                proc.poll() is None
                and time.monotonic() < deadline
                and not (find_running_cluster() == f"127.0.0.1:{port}" and _node_registered(ray, f"127.0.0.1:{port}"))
            ):
                time.sleep(0.5)
            if proc.poll() is None and time.monotonic() < deadline:
                break
            _stop_cluster(proc)
        assert proc.poll() is None and find_running_cluster() == f"127.0.0.1:{port}"
        yield f"127.0.0.1:{port}", gcs_pids(descendants(proc.pid))
    finally:
        if proc is not None:
            _stop_cluster(proc)
        subprocess.run(["rm", "-rf", str(tmp)], check=False)


def _stop_cluster(proc: subprocess.Popen) -> None:
    """SIGKILL the cluster's whole process group: a test cluster holds nothing worth a graceful
    stop, and ``ray start --block`` took the whole 20 s of a SIGTERM's grace here."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


def test_case3_auto_joins_the_running_cluster(outside_cluster, tmp_path: Path) -> None:
    address, outside_gcs = outside_cluster
    assert outside_gcs and "ray start --head --block" in env_case(3)
    t = choose(None, None, {"RAY_ADDRESS": "auto"}, [])
    assert (t.mode, t.address) == ("join", address)
    proc = up_process(simple_env(tmp_path / "pkg"), tmp_path, env={"RAY_ADDRESS": "auto"})
    try:
        info = json.loads(read_ready_line(proc))
        assert info["ray"]["mode"] == "join" and info["ray"]["address"] == address
        assert info["ray"]["source"] == "RAY_ADDRESS=auto (found running cluster)"
        assert gcs_pids(descendants(proc.pid)) == []  # no second cluster
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(20) == 0
        assert f"ray: joining the cluster at {address} (from RAY_ADDRESS=auto" in proc.stderr.read()
        assert all(psutil.pid_exists(p) for p in outside_gcs)  # not ours: never stopped
    finally:
        kill_tree(proc)


def test_case4_local_starts_one_private_cluster_and_stops_only_it(outside_cluster, tmp_path: Path) -> None:
    _, outside_gcs = outside_cluster
    assert "ray.address: local" in env_case(4)
    ignored = socket.create_server(("127.0.0.1", 0))  # RAY_ADDRESS names it; nothing may dial it
    ignored.setblocking(False)
    proc = up_process(
        simple_env(tmp_path / "pkg"),
        tmp_path,
        "--ray-address",
        "local",
        env={"RAY_ADDRESS": "127.0.0.1:%d" % ignored.getsockname()[1]},
    )  # the flag wins
    try:
        info = json.loads(read_ready_line(proc, timeout=120))
        assert info["ray"]["mode"] == "local" and info["ray"]["source"] == "--ray-address=local"
        tree = descendants(proc.pid)
        ours = gcs_pids(tree)
        assert len(ours) == 1 and not set(ours) & set(outside_gcs)
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(20) == 0
        assert wait_gone([p.pid for p in tree], 5.0) == []
        assert all(psutil.pid_exists(p) for p in outside_gcs)
        err = proc.stderr.read()
        assert "ray: starting a private local instance (--ray-address=local)" in err
        assert "egress DENY" not in err  # Ray's usage-stats module asks no cloud metadata service (ray/head.py)
        with pytest.raises(BlockingIOError):
            ignored.accept()  # no connection was ever made to the ignored address
    finally:
        kill_tree(proc)
        ignored.close()


def test_ray_servers_isolation_level(tmp_path: Path) -> None:
    """Servers that use Ray: partial with our private head, none with an outside cluster, and a
    clear error (before any Ray start) when full isolation is required."""
    from gym_runtime.errors import IsolationError
    from gym_runtime.ray.target import RayTarget, ray_level
    from sandbox import probe_isolation

    best = probe_isolation().level.value
    local, join = RayTarget("local", None, "needed by a", ("a",)), RayTarget("join", "127.0.0.1:1", "x", ("a",))
    assert ray_level(RayTarget("none"), None, True) is None and ray_level(local, "none", False) == "none"
    if best == "none":
        pytest.skip("this host offers isolation none only")
    assert ray_level(local, None, False) == ("partial" if best == "full" else None)
    assert ray_level(join, None, False) == "none"
    with pytest.raises(IsolationError) as e:
        ray_level(join, None, True)
    assert e.value.code == "GR-SANDBOX-RAY" and "host network" in e.value.message
    pkg = simple_env(tmp_path / "pkg", ray=True)  # acme_math declares it needs Ray
    code, err, _ = run_up(tmp_path, "--require-isolation", pkg=pkg)
    if best == "full":
        assert code == 3 and "GR-SANDBOX-RAY" in err and "acme_math use Ray" in err
        assert "drop --require-isolation" in err and "ray_head" not in err


RAY_CLIENT_APP = FIXTURE_APP.replace(
    'print("fixture", name,',
    """import signal, socket
ray_addr = next(ln.split(": ", 1)[1].strip("'\\"") for ln in text.splitlines()
                if ln.startswith("ray_head_node_address: "))

def on_term(*_):  # a Ray driver's shutdown needs its head: is it still there when we are told to stop?
    host, port = ray_addr.rsplit(":", 1)
    time.sleep(1.0)  # a driver's shutdown takes a moment: a head stopped at the same time is gone by now
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
        print("at SIGTERM: ray head answered", flush=True)
    except OSError as e:
        print("at SIGTERM: ray head gone:", e, flush=True)
    os._exit(0)

signal.signal(signal.SIGTERM, on_term)
print("fixture", name,""",
)


def test_servers_stop_before_the_ray_head_they_use(tmp_path: Path) -> None:
    """Stop order: servers first, the private Ray head after them (a Ray driver hangs in its own
    shutdown when the head is gone first, and the stop then waits out the whole grace)."""
    pkg = write_fixture_package(
        tmp_path / "pkg",
        {"acme_math": {"resources_servers": {"acme_math": {"domain": "math"}}}},
        apps={"acme_math": declaring_ray(RAY_CLIENT_APP)},
    )
    proc = up_process(pkg, tmp_path, "--ray-address", "local")
    try:
        info = json.loads(read_ready_line(proc, timeout=120))
        assert info["ray"]["mode"] == "local"
        t0 = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(20) == 0
        assert time.monotonic() - t0 < 10  # a hang detector, not a speed target
        log = (tmp_path / "run" / "logs" / "acme_math.log").read_text()
        assert "at SIGTERM: ray head answered" in log, log[-2000:]
    finally:
        kill_tree(proc)


def test_the_private_ray_head_listens_on_loopback_only(tmp_path: Path) -> None:
    """At isolation none the private head shares the host network: every socket any of its
    processes listens on is a loopback one (Ray would otherwise take the host's routable address
    and listen on every interface), on ports of its own."""
    pkg = simple_env(tmp_path / "pkg", ray=True)
    proc = up_process(pkg, tmp_path, "--ray-address", "local", "--isolation", "none")
    try:
        info = json.loads(read_ready_line(proc, timeout=120))
        assert info["ray"]["mode"] == "local"
        ray_procs = [p for p in descendants(proc.pid) if p.name() in ("gcs_server", "raylet")]
        assert {p.name() for p in ray_procs} == {"gcs_server", "raylet"}
        # the holder's hook skipped the API server (ray/hold/): no dashboard head among the processes
        assert not [p for p in descendants(proc.pid) if any("dashboard/dashboard.py" in a for a in p.cmdline())]
        head = [p for p in descendants(proc.pid) if p.name() in ("gcs_server", "raylet") or "ray" in p.name()]
        listening = [
            (p.name(), c.laddr.ip, c.laddr.port)
            for p in head
            for c in p.net_connections("inet")
            if c.status == psutil.CONN_LISTEN
        ]
        assert listening and all(ip in ("127.0.0.1", "::ffff:127.0.0.1", "::1") for _, ip, _ in listening), listening
        # none of Ray's fixed default ports (GCS, Ray Client, dashboard, dashboard agent): another Ray
        # on the same host (a training job's cluster) keeps them
        assert not {port for *_, port in listening} & {6379, 10001, 8265, 52365}, listening
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        kill_tree(proc)
