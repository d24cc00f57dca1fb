"""The opensandbox backend's errors and faults against a real OpenSandbox server: a wrong key, a
missing image and a mount outside the server's allowed host paths stop ``up`` with one
``GR-OSB-*`` block and its exit code, leaving no sandbox; a sandbox killed from outside and a
restart of the server mid-run are ridden out (docs/runtime.md, "Sandbox backends")."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from tests.helpers.daemon import read_ready_line, up_process
from tests.helpers.opensandbox.runs import EXAMPLE, daemon_env
from tests.opensandbox.test_backend import _instances, _run_labels, home  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.opensandbox, pytest.mark.slow]


def _up_fails(env: dict[str, str], tmp: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gym_runtime.cli.main", "up", str(EXAMPLE), *flags],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_a_wrong_key_is_a_setting_error(opensandbox_server, home: Path, tmp_path: Path) -> None:
    env = {**daemon_env(opensandbox_server, home), "OPENSANDBOX_API_KEY": "not-the-key"}
    r = _up_fails(env, tmp_path, "--work-dir", str(tmp_path / "run"))
    assert r.returncode == 1 and "error[GR-OSB-AUTH]" in r.stderr and r.stderr.count("error[") == 1, r.stderr[-3000:]
    assert "not-the-key" not in r.stderr and opensandbox_server.api_key not in r.stderr
    assert "venv " not in r.stderr  # refused before any build (the reap is the first call)


def test_a_missing_image_is_a_setting_error_and_leaves_nothing(opensandbox_server, home: Path, tmp_path: Path) -> None:
    env = {**daemon_env(opensandbox_server, home), "GYM_RUNTIME_OPENSANDBOX_IMAGE": "localhost/no-such-image:1"}
    r = _up_fails(env, tmp_path, "--work-dir", str(tmp_path / "run"))
    assert r.returncode == 1 and "error[GR-OSB-IMAGE]" in r.stderr, r.stderr[-3000:]
    assert "localhost/no-such-image:1" in r.stderr and _run_labels(opensandbox_server) == {}


def test_a_mount_outside_the_allowed_paths_is_named(opensandbox_server, home: Path) -> None:
    outside = Path(tempfile.mkdtemp(prefix="osb-outside-", dir="/var/tmp"))  # not under the server's allowed paths
    try:
        r = _up_fails(daemon_env(opensandbox_server, home), outside, "--work-dir", str(outside / "run"))
        assert r.returncode == 3 and "error[GR-OSB-MOUNT]" in r.stderr, r.stderr[-3000:]
        assert str(outside) in r.stderr and "allowed_host_paths" in r.stderr
        assert _run_labels(opensandbox_server) == {}
    finally:
        subprocess.run(["rm", "-rf", str(outside)], check=False)


def test_a_sandbox_killed_from_outside_and_a_server_restart_are_ridden_out(
    opensandbox_server, home: Path, tmp_path: Path
) -> None:
    server = opensandbox_server
    proc = up_process(EXAMPLE, tmp_path, env=daemon_env(server, home))
    ready = json.loads(read_ready_line(proc, timeout=600))
    try:
        me = next(s for s in _instances(ready) if s["process_name"] == "code_lookup")
        killed, old = time.time(), me["sandbox"]
        inside = {s["process_name"] for s in _instances(ready) if s["sandbox"] == old}  # its venv's servers
        server.kill_sandbox(old)
        while True:  # every server of the killed sandbox starts again, in one new sandbox
            rows = [s for s in _instances(ready) if s["process_name"] in inside]
            if all(s["restarts"] == 1 and s["state"] == "ready" for s in rows):
                break
            assert time.time() - killed < 180, rows
            time.sleep(0.2)
        me = next(s for s in rows if s["process_name"] == "code_lookup")
        assert len({s["sandbox"] for s in rows}) == 1 and me["sandbox"] != old, rows
        assert all(s["last_exit"]["reason"] == "sandbox-gone" for s in rows), rows
        print(
            f"killed sandbox seen after {me['last_exit']['at'] - killed:.2f} s, ready again after "
            f"{time.time() - killed:.1f} s"
        )
        server.remove_sandbox(old)  # podman's runtime cannot delete a killed container through the server

        server.restart()  # sandboxes and their commands outlive it
        rows = _instances(ready)
        assert all(s["state"] == "ready" for s in rows) and sum(s["restarts"] for s in rows) == len(inside)
        r = httpx.post(
            ready["head_server"] + "/rollouts/run",
            timeout=300,
            json={
                "examples": [
                    {
                        "responses_create_params": {
                            "input": [{"role": "user", "content": "What is 2 * 3? End with the number."}]
                        },
                        "agent_ref": {"type": "responses_api_agents", "name": "arithmetic_agent"},
                    }
                ]
            },
        )
        assert r.status_code == 200, r.text[:500]
        result = json.loads(r.text)["results"][0]
        assert "error" not in result and result.get("reward") is not None, result
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(120)
        err = proc.stderr.read()
    assert code == 0, err[-3000:]
    assert _run_labels(server) == {} and server.api_key not in err


def test_doctor_names_the_server_its_version_and_the_isolation(opensandbox_server, home: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "gym_runtime.cli.main", "doctor"],
        env=daemon_env(opensandbox_server, home),
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line.strip() for line in r.stdout.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("backends:"))
    assert "servers run in the opensandbox backend" in lines[start]
    osb = lines[start + 2]
    assert osb.startswith(
        f"opensandbox: server http://{opensandbox_server.domain} version 1.1.1 (API key set; "
        f"image {opensandbox_server.image})"
    ), osb
    assert "one sandbox per server" in osb and opensandbox_server.api_key not in r.stdout + r.stderr
    assert lines[start + 3] == (
        "opensandbox: task sandboxes of configs' opensandbox provider blocks are made there; "
        "images approved: nothing (unset) (GYM_RUNTIME_OPENSANDBOX_TASK_IMAGES)"
    )
    out = json.loads(
        subprocess.run(
            [sys.executable, "-m", "gym_runtime.cli.main", "doctor", "--json"],
            env=daemon_env(opensandbox_server, home),
            capture_output=True,
            text=True,
            timeout=300,
        ).stdout
    )
    assert out["sandbox_backends"]["opensandbox"]["version"] == "1.1.1"
    assert "sandbox_backends" not in out["problems"]
