"""The private Ray head starts only what Gym servers use: no autoscaler monitor, no idle workers, no
Ray Client server, and no ``ray start --block`` waiting beside it (a small holder holds the cluster;
real Ray, the dev dependency); every process of it is accounted for by ``/processes``; the servers
start once it is ready."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.helpers.daemon import cmdline, kill_tree, read_ready_line, simple_env, up_process

pytestmark = pytest.mark.slow


def test_private_ray_head_runs_no_monitor_no_idle_workers_no_client_server_and_no_ray_start(tmp_path) -> None:
    proc = up_process(
        simple_env(tmp_path / "pkg", ray=True),
        tmp_path,
        "--policy-base-url",
        "http://127.0.0.1:9/v1",
        env={"GYM_RUNTIME_HOME": str(tmp_path / "home")},
    )
    try:
        info = json.loads(read_ready_line(proc, timeout=600))  # a loaded 2-core host starts Ray slowly
        assert info["ray"]["mode"] == "local"
        rows = httpx.get(info["head_server"] + "/processes", trust_env=False, timeout=10).json()["processes"]
        ray = [r for r in rows if r["role"] == "ray"]
        components = {r["component"] for r in ray}
        assert {"gcs_server", "raylet", "head holder", "log monitor"} <= components, components
        assert not {"ray start", "ray client server"} & components, components
        cmdlines = [" ".join(cmdline(r["pid"])) for r in ray]
        assert not any("autoscaler/_private/monitor.py" in c for c in cmdlines), cmdlines
        assert not any("ray.util.client.server" in c for c in cmdlines), cmdlines
        assert not any(c.startswith("ray::IDLE") for c in cmdlines), "no worker is started ahead of a task"
        # the raylet retries its object store every 50 ms (200 tries: Ray's 10 s window), not after 1 s
        raylet = next(r["pid"] for r in ray if r["component"] == "raylet")
        with open(f"/proc/{raylet}/environ", "rb") as f:
            environ = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
        assert environ[b"RAY_raylet_client_connect_timeout_milliseconds"] == b"50"
        assert environ[b"RAY_raylet_client_num_connect_attempts"] == b"200"
        # head first: the servers start once it is ready (a busy host starves a head started beside them)
        support = httpx.get(info["head_server"] + "/support_processes", trust_env=False, timeout=10).json()
        head = next(p for p in support if p["name"] == "ray_head")
        servers = httpx.get(info["head_server"] + "/server_instances", trust_env=False, timeout=10).json()
        assert servers and all(s["start_time"] >= head["start_time"] + head["ready_after_s"] for s in servers), (
            head,
            servers,
        )
    finally:
        kill_tree(proc)


@pytest.mark.parametrize("isolation", [None, "none"], ids=["best", "none"])
def test_sigkill_of_the_daemon_leaves_no_ray_process(tmp_path, isolation) -> None:
    # the holder's Ray processes are adopted, not fate-shared with it: at isolation none the orphan
    # watchdog's SIGKILL of the head's process group must reach them; elsewhere the pid namespace
    import os
    import signal
    from pathlib import Path

    from gym_runtime.ray.head import remove_stale_temp_dirs
    from tests.helpers.daemon import descendants, wait_gone

    args = ["--policy-base-url", "http://127.0.0.1:9/v1", *(["--isolation", isolation] if isolation else [])]
    proc = up_process(
        simple_env(tmp_path / "pkg", ray=True), tmp_path, *args, env={"GYM_RUNTIME_HOME": str(tmp_path / "home")}
    )
    try:
        json.loads(read_ready_line(proc, timeout=600))
        tree = descendants(proc.pid)
        assert any("gcs_server" in " ".join(cmdline(p)) for p in tree)
        temp_dir = next(a.split("=", 1)[-1] for p in tree for a in cmdline(p) if "/tmp/gr-ray-" in a)
        temp_dir = Path("/tmp") / Path(temp_dir).relative_to("/tmp").parts[0]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        assert wait_gone([p.pid for p in tree], 15.0) == []
        # nothing removed the head's temp dir; the next start does (ray_head.remove_stale_temp_dirs)
        assert temp_dir.is_dir() and temp_dir in remove_stale_temp_dirs(min_age_s=0) and not temp_dir.exists()
    finally:
        kill_tree(proc)
