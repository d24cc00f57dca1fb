"""Cases C04 (ports), C05 (stubborn server + helper, grace, second signal) and C26 (Ray target),
each read from its case folder (``tests/cases/data``)."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

import httpx
import psutil
import pytest

from gym_runtime.errors import GymRuntimeError
from gym_runtime.ray.target import choose, wait_reachable
from tests.helpers.cases import case_dir, case_package
from tests.helpers.daemon import (
    FIXTURE_APP,
    cmdline,
    descendants,
    kill_tree,
    read_ready_line,
    simple_env,
    up_process,
    wait_gone,
)

C04_DOMAINS = [f"{n}.resources_servers.{n}.domain=math" for n in ("acme_math", "acme_judge", "acme_tools")]


def test_c04_duplicate_port_names_both_instances(tmp_path: Path) -> None:
    pkg = case_package("C04", tmp_path / "pkg").root
    proc = up_process(pkg, tmp_path, *C04_DOMAINS)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and out == ""
    assert "9100" in err and "acme_judge" in err and "acme_tools" in err


def test_c04_taken_port_reported_with_owner_within_a_second(tmp_path: Path) -> None:
    pkg = case_package("C04", tmp_path / "pkg").root
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        holder.bind(("127.0.0.1", 8000))
    except OSError:
        pytest.skip("port 8000 is taken on this host by something else")
    holder.listen()
    try:
        fix = [*C04_DOMAINS, "acme_tools.resources_servers.acme_tools.port=9101"]
        t0 = time.monotonic()
        proc = up_process(pkg, tmp_path, "--isolation", "none", "--head-port", "0", *fix)
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        holder.close()
    assert proc.returncode == 3 and out == ""
    assert "acme_math: 127.0.0.1:8000 is already in use" in err
    assert f"pid {os.getpid()}" in err  # the owner, found with psutil
    assert "GR-START-PORT-IN-USE" in err
    assert took < 10  # interpreter start + config + cached venvs; the preflight itself is immediate


def test_c04_automatic_ports_avoid_assigned_ones(tmp_path: Path) -> None:
    pkg = case_package("C04", tmp_path / "pkg").root
    for d in pkg.glob("*/*/app.py"):
        d.write_text(FIXTURE_APP)
    free = socket.socket()
    free.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        free.bind(("127.0.0.1", 8000))
    except OSError:
        pytest.skip("port 8000 is taken on this host by something else")
    free.close()
    proc = up_process(
        pkg,
        tmp_path,
        "--isolation",
        "none",
        "--model-endpoint-timeout",
        "0",
        *C04_DOMAINS,
        "acme_tools.resources_servers.acme_tools.port=9101",
        "head_server.port=0",
    )
    try:
        info = json.loads(read_ready_line(proc))
        agent = int(info["servers"]["acme_agent"].rsplit(":", 1)[1])
        head = int(info["head_server"].rsplit(":", 1)[1])
        assert agent not in {11000, 8000, 9100, 9101, head}
        assert int(info["servers"]["acme_math"].rsplit(":", 1)[1]) == 8000
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(20)
        kill_tree(proc)


def _c05(tmp_path: Path):
    cp = case_package("C05", tmp_path / "pkg")
    grace = cp.runtime["options"]["shutdown_grace_s"]
    proc = up_process(
        cp.root,
        tmp_path,
        "--isolation",
        "none",
        "--shutdown-grace",
        str(grace),
        "stubborn.resources_servers.stubborn.domain=other",
    )
    read_ready_line(proc)
    tree = descendants(proc.pid)
    assert any("sleep(3600)" in " ".join(cmdline(p)) for p in tree)  # the helper child runs
    return proc, [p.pid for p in tree], grace


def test_c05_sigint_terms_waits_kills_and_reaps(tmp_path: Path) -> None:
    proc, kids, grace = _c05(tmp_path)
    try:
        t0 = time.monotonic()
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(grace + 10) == 0
        took = time.monotonic() - t0
        assert grace <= took < grace + 3
        assert wait_gone(kids, 2) == []  # server, helper, and no zombie left behind
        err = proc.stderr.read()
        assert "stubborn: ignored SIGTERM" in err and "killed" in err
        with socket.socket() as s:  # port free at once (for a server binding it as servers do)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", 9201))
    finally:
        kill_tree(proc)


def test_c05_second_sigint_skips_the_grace(tmp_path: Path) -> None:
    proc, kids, grace = _c05(tmp_path)
    try:
        t0 = time.monotonic()
        os.kill(proc.pid, signal.SIGINT)
        time.sleep(0.3)
        os.kill(proc.pid, signal.SIGINT)
        proc.wait(grace + 10)
        assert time.monotonic() - t0 < grace - 1
        assert wait_gone(kids, 2) == []
    finally:
        kill_tree(proc)


def test_c05_zombies_are_reaped(tmp_path: Path) -> None:
    proc, kids, _ = _c05(tmp_path)
    try:
        os.kill(proc.pid, signal.SIGTERM)
        proc.communicate(timeout=30)  # drains stdout/stderr: a full pipe must not stall the daemon
        zombies = [
            p
            for p in psutil.process_iter(["ppid", "status"])
            if p.info["status"] == psutil.STATUS_ZOMBIE and p.info["ppid"] == proc.pid
        ]
        assert zombies == []
    finally:
        kill_tree(proc)


# ---------------------------------------------------------------- C26: Ray target
def _env_cases() -> list[str]:
    return (case_dir("C26") / "env_cases.txt").read_text().splitlines()


def test_c26_case1_dashboard_url_rejected() -> None:
    url = _env_cases()[0].split("RAY_ADDRESS=")[1].split()[0]
    assert url.startswith("http://")
    with pytest.raises(GymRuntimeError) as e:
        choose(None, None, {"RAY_ADDRESS": url}, [])
    assert e.value.code == "GR-RAY-DASHBOARD-URL" and "GCS address" in e.value.message
    assert "RAY_ADDRESS" in e.value.message


def test_c26_case2_stale_address_fails_in_bounded_time() -> None:
    assert "stale address" in _env_cases()[1]
    with socket.socket() as s:  # a loopback port nobody listens on stands in for the dead cluster
        s.bind(("127.0.0.1", 0))
        stale = f"127.0.0.1:{s.getsockname()[1]}"
    target = choose(None, None, {"RAY_ADDRESS": stale}, [])
    assert (target.mode, target.source) == ("join", "RAY_ADDRESS")
    t0 = time.monotonic()
    with pytest.raises(GymRuntimeError) as e:
        wait_reachable(target.address, target.source, 2.0)
    assert time.monotonic() - t0 < 3
    assert e.value.code == "GR-RAY-UNREACHABLE" and stale in e.value.message and "RAY_ADDRESS" in e.value.message


def test_c26_case3_auto_never_starts_a_second_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    import gym_runtime.ray.target as rt

    monkeypatch.setattr(rt, "find_running_cluster", lambda: None)  # no cluster on this host
    with pytest.raises(GymRuntimeError) as e:
        choose("auto", None, {}, ["acme_math"])
    assert e.value.code == "GR-RAY-AUTO" and "never starts a second cluster" in e.value.hint
    monkeypatch.setattr(rt, "find_running_cluster", lambda: "127.0.0.1:6379")
    t = choose("auto", None, {}, [])
    assert (t.mode, t.address) == ("join", "127.0.0.1:6379") and "found running cluster" in t.source


def test_c26_case4_local_and_explicit_choice() -> None:
    assert choose("local", None, {"RAY_ADDRESS": "127.0.0.1:1"}, []).mode == "local"  # the flag wins
    assert choose(None, None, {}, []).mode == "none"  # nobody needs Ray: no cluster at all
    t = choose(None, None, {}, ["acme_math"])
    assert t.mode == "local" and "acme_math" in t.describe()
    t = choose(None, "127.0.0.1:6379", {"RAY_ADDRESS": "127.0.0.1:1"}, [])
    assert t.address == "127.0.0.1:6379" and t.source == "config ray_head_node_address"


def test_c04_automatic_port_taken_before_bind_gets_a_new_one(tmp_path: Path) -> None:
    """ "retried on a bind race": the port is taken between the daemon's choice and the server's bind."""
    assert "bind race" in (case_dir("C04") / "README.md").read_text()
    pkg = simple_env(tmp_path / "pkg", fixture_sleep=1.5)  # acme_math binds 1.5 s after it starts
    proc = up_process(pkg, tmp_path, "--isolation", "none")
    contract = tmp_path / "run/servers/acme_math/contract.json"
    thief = socket.socket()
    try:
        deadline = time.monotonic() + 60
        while not contract.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        lost = int(json.loads(contract.read_text())["cfg"]["port"])
        thief.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        thief.bind(("127.0.0.1", lost))
        thief.listen()
        info = json.loads(read_ready_line(proc))
        port = int(info["servers"]["acme_math"].rsplit(":", 1)[1])
        assert port != lost
        agent_cfg = json.loads((tmp_path / "run/servers/acme_agent/contract.json").read_text())["env"]
        assert f"port: {port}" in agent_cfg["NEMO_GYM_CONFIG_DICT"]  # the agent restarted with the new address
        rows = {
            s["process_name"]: s for s in httpx.get(info["head_server"] + "/server_instances", trust_env=False).json()
        }
        assert rows["acme_math"]["restarts"] == 0 and rows["acme_math"]["port"] == port  # not a crash
        # the agent was stopped on purpose and started once more: its exit is no crash, and no
        # second copy of it is started beside the first (bug: that copy held its port, GR-START-PORT-SQUAT)
        assert rows["acme_agent"]["restarts"] == 0 and rows["acme_agent"]["state"] == "ready"
        starts = [ln for ln in (tmp_path / "run/logs/acme_agent.log").read_text().splitlines() if "] start #" in ln]
        assert len(starts) == 2, starts
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(20) == 0
        err = proc.stderr.read()
        assert "acme_agent: exited" not in err and "restart 1/" not in err, err
        assert f"acme_math: 127.0.0.1:{lost} is already in use by pid {os.getpid()}" in err
        assert "taken between choice and bind" in err
    finally:
        thief.close()
        kill_tree(proc)
