"""Every process of a running environment is accounted for by role and size (``/processes``,
``gym-runtime status``, ``gym-runtime doctor``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import psutil

from tests.helpers.daemon import SIMPLE_SERVERS, descendants, kill_tree, read_ready_line, simple_env, up_process


def test_every_process_has_a_role_and_a_size(tmp_path) -> None:
    proc = up_process(
        simple_env(tmp_path / "pkg"),
        tmp_path,
        "--policy-base-url",
        "http://127.0.0.1:9/v1",
        env={"GYM_RUNTIME_HOME": str(tmp_path / "home")},
    )
    try:
        info = json.loads(read_ready_line(proc))
        body = httpx.get(info["head_server"] + "/processes", trust_env=False, timeout=10).json()
        rows = body["processes"]
        tree = {proc.pid, *(p.pid for p in descendants(proc.pid))}
        listed = {r["pid"] for r in rows}
        assert tree <= listed | {p for p in tree if not psutil.pid_exists(p)}, tree - listed
        assert all(r["role"] != "other" for r in rows), rows
        assert [r["pid"] for r in rows if r["role"] == "daemon"] == [proc.pid]
        servers = {r["member"] for r in rows if r["role"] == "server"}
        assert servers == SIMPLE_SERVERS
        assert all(r["rss_mb"] > 0 for r in rows)
        if info["isolation"] != "none":
            assert any(r["component"] == "netns holder" for r in rows if r["role"] == "sandbox")
        assert body["by_role"]["server"]["processes"] == sum(r["role"] == "server" for r in rows)

        out = subprocess.run(
            [sys.executable, "-m", "gym_runtime.cli.main", "status", "--head", info["head_server"]],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert "processes:" in out.stdout
        assert "acme_math" in out.stdout.split("processes:")[1]
        doctor = subprocess.run(
            [sys.executable, "-m", "gym_runtime.cli.main", "doctor", "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "GYM_RUNTIME_HOME": str(tmp_path / "home")},
        )
        daemon = json.loads(doctor.stdout)["daemon"]
        assert daemon["pid"] == proc.pid and daemon["processes"]["server"]["processes"] == len(servers)
    finally:
        kill_tree(proc)
