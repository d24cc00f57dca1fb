"""What a node itself brings to ``up --placement ray`` (docs/scale-out.md), on a real three-node
cluster of its own: the head, worker ``a`` (2 CPUs, resource ``node_a``) and worker ``weak`` (2 CPUs,
resource ``weak_node``) whose raylet and every process it starts run where no user namespace can
be made (``user.max_user_namespaces=0`` in its own user namespace: tests/helpers/ray_cluster.py),
so its sandboxes get isolation ``none``, as on a host whose operator set that sysctl.

The nodes' uv asks a loopback index that holds the file of ``slowpkg`` back for a while, so a
venv build that needs it is slow enough to watch its phases from the head server.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers.daemon import kill_tree, read_ready_line, up_process, write_fixture_package
from tests.helpers.index import SimpleIndex
from tests.helpers.ray_cluster import LocalRayCluster
from tests.helpers.wheels import build_wheel

pytestmark = pytest.mark.slow
WORKERS = {
    "a": {"num_cpus": 2, "resources": {"node_a": 1}},
    "weak": {"num_cpus": 2, "resources": {"weak_node": 1}, "no_user_namespaces": True},
}
HOLD_S = 12  # how long the index holds slowpkg's file back


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRayCluster]:
    tmp = tmp_path_factory.mktemp("nodes")
    build_wheel(tmp / "files", "slowpkg", "1.0")
    with SimpleIndex(tmp / "files", delay_s=HOLD_S) as idx:
        c = LocalRayCluster()
        c.env = {k: v for k, v in c.env.items() if not k.startswith(("UV_", "GYM_RUNTIME_"))}
        c.env.update(
            {
                "UV_INDEX_URL": idx.url,
                "GYM_RUNTIME_HOME": str(tmp / "nodes-home"),
                "GYM_RUNTIME_UV_CACHE_DIR": str(tmp / "uv-cache"),
            }
        )
        c.index = idx
        try:
            c.start(WORKERS)
            yield c
        finally:
            c.stop()
    left = c.leftovers()
    assert not left, f"Ray processes left after the cluster stopped: {[p.pid for p in left]}"


def package(root: Path, math_placement: dict, requirements: str = "# stdlib only\n") -> Path:
    pkg = write_fixture_package(
        root,
        {
            "acme_math": {"resources_servers": {"acme_math": {"domain": "math", "placement": math_placement}}},
            "acme_agent": {
                "responses_api_agents": {
                    "acme_agent": {
                        "resources_server": {"type": "resources_servers", "name": "acme_math"},
                        "placement": {"num_cpus": 0.25, "resources": {"node_a": 0.1}},
                    }
                }
            },
        },
    )
    (pkg / "resources_servers/acme_math/requirements.txt").write_text(requirements)
    return pkg


def daemon_env(cluster: LocalRayCluster, tmp: Path) -> dict[str, str]:
    return {**cluster.env, "GYM_RUNTIME_HOME": str(tmp / "home"), "GYM_RUNTIME_PIN_MODE": "none"}


def up_on(cluster: LocalRayCluster, pkg: Path, tmp: Path, *args: str) -> subprocess.Popen:
    return up_process(
        pkg,
        tmp,
        "--placement",
        "ray",
        "--ray-address",
        cluster.address,
        "--shutdown-grace",
        "2",
        *args,
        env=daemon_env(cluster, tmp),
    )


def replica_actors(cluster: LocalRayCluster, within_s: float) -> list[int]:
    """Pids of replica actors' workers (Ray titles them ``ray::ServerReplica...``) still alive after
    up to ``within_s`` seconds."""
    deadline = time.monotonic() + within_s
    while True:
        left = []
        for p in cluster.leftovers():
            try:
                if "ServerReplica" in " ".join(p.cmdline()):
                    left.append(p.pid)
            except Exception:
                pass
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def node_name(cluster: LocalRayCluster, name: str) -> str:
    return f"127.0.0.1 ({cluster.node_ids[name][:8]})"


def test_require_isolation_fails_on_a_node_that_cannot_give_it_naming_node_and_server(cluster, tmp_path) -> None:
    pkg = package(tmp_path / "pkg", {"num_cpus": 0.5, "resources": {"weak_node": 1}})
    proc = up_on(cluster, pkg, tmp_path, "--require-isolation")
    try:
        out, err = proc.communicate(timeout=600)
    finally:
        kill_tree(proc)
    assert proc.returncode == 3, err
    assert out == "" and "Traceback" not in err
    assert "GR-SANDBOX-ISOLATION" in err
    assert f"server 'acme_math' on node {node_name(cluster, 'weak')}" in err
    assert "full isolation required (--require-isolation) but only 'none'" in err
    assert "max_user_namespaces" in err  # the node's own reason
    assert replica_actors(cluster, 60) == []  # neither replica's actor is left on any node


def test_a_replica_on_that_node_runs_at_isolation_none_without_the_flag(cluster, tmp_path) -> None:
    pkg = package(tmp_path / "pkg", {"num_cpus": 0.5, "resources": {"weak_node": 1}})
    proc = up_on(cluster, pkg, tmp_path)
    try:
        info = json.loads(read_ready_line(proc, timeout=600))
        assert info["isolation"] == "none"  # the lowest any replica got
        rows = {
            i["process_name"]: i
            for i in httpx.get(info["head_server"] + "/server_instances", trust_env=False, timeout=10).json()
        }
        assert (rows["acme_math"]["node_id"], rows["acme_math"]["isolation"]) == (cluster.node_ids["weak"], "none")
        assert (rows["acme_agent"]["node_id"], rows["acme_agent"]["isolation"]) == (cluster.node_ids["a"], "full")
        ref = {"type": "responses_api_agents", "name": "acme_agent"}
        out = httpx.post(
            info["head_server"] + "/rollouts/run",
            json={"examples": [{"agent_ref": ref, "n": 1}]},
            trust_env=False,
            timeout=120,
        ).json()
        assert [r["reward"] for r in out["results"]] == [1.0]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(90) == 0
    finally:
        kill_tree(proc)
    assert replica_actors(cluster, 60) == []


def cli(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gym_runtime.cli.main", *argv], capture_output=True, text=True, env=env, timeout=60
    )


def test_the_nodes_build_phases_are_shown_while_replicas_are_placed(cluster, tmp_path) -> None:
    pkg = package(tmp_path / "pkg", {"num_cpus": 0.5, "resources": {"node_a": 0.5}}, requirements="slowpkg\n")
    env = daemon_env(cluster, tmp_path)
    before = len([r for r in cluster.index.requests if r.startswith("/files/")])
    proc = up_on(cluster, pkg, tmp_path)
    try:
        deadline = time.monotonic() + 300
        while len([r for r in cluster.index.requests if r.startswith("/files/")]) == before:  # stage 1 asks
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
            time.sleep(0.1)
        want = f"building venv: stage 1 on node {node_name(cluster, 'a')}"
        while True:  # the daemon polls the node's phase every 0.5 s; `status` reads /health, then
            done = cli(env, "status", "--json")  # /server_instances: a phase can change between the two
            out = json.loads(done.stdout)
            states = {s["process_name"]: s["state"] for s in out["servers"]}
            if states.get("acme_math") == want and out["health"]["servers"].get("acme_math") == want:
                break  # /health says the same (the phase lasts HOLD_S: both show it)
            assert time.monotonic() < deadline and proc.poll() is None, (states, out["health"])
            time.sleep(0.2)
        assert done.returncode == 3 and out["health"]["status"] == "starting"  # not ready yet
        text = cli(env, "status").stdout
        assert want in text
        info = json.loads(read_ready_line(proc, timeout=600))  # the index answers after HOLD_S: it completes
        rows = {
            i["process_name"]: i
            for i in httpx.get(info["head_server"] + "/server_instances", trust_env=False, timeout=10).json()
        }
        assert rows["acme_math"]["state"] == "ready" and rows["acme_math"]["node_id"] == cluster.node_ids["a"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(90) == 0
    finally:
        kill_tree(proc)
    _, err = proc.communicate()
    assert "acme_math: placed on node" in err and "venv built" in err
