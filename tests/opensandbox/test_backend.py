"""The opensandbox sandbox backend against a real OpenSandbox server (``opensandbox_server``:
opensandbox-server on podman's Docker API, the project's execd stand-in; docs/runtime.md,
"Sandbox backends"): the bundled example's dry-run rewards equal the local backend's, ``stop``
and a SIGKILLed daemon's restart leave no sandbox of the first run, a server killed inside its
sandbox is seen and restarted, a sandbox deleted from outside is replaced, the key is never shown.
No egress sidecar can run here: the runs use ``GYM_RUNTIME_OPENSANDBOX_EGRESS=unenforced``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from sandbox.opensandbox.process import SERVICE_GRACE_S
from tests.helpers.daemon import read_ready_line, up_process
from tests.helpers.opensandbox.runs import DATASET, EXAMPLE, daemon_env, kill_server_inside

pytestmark = [pytest.mark.opensandbox, pytest.mark.slow]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("osb-home")  # one venv root for both backends (under /tmp: allowed host paths)


def _dry_run(env: dict[str, str], out: Path, work: Path) -> tuple[dict, subprocess.CompletedProcess]:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "gym_runtime.cli.main",
            "dry-run",
            str(EXAMPLE),
            "--dataset",
            str(DATASET),
            "--samples",
            "2",
            "--out",
            str(out),
            "--work-dir",
            str(work),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    rewards: dict = {}
    for line in out.read_text().splitlines():
        row = json.loads(line)
        rewards.setdefault(row.get("row", row.get("task_idx")), []).append(row.get("reward"))
    return {k: sorted(v) for k, v in rewards.items()}, r


def test_quickstart_rewards_equal_the_local_backend(opensandbox_server, home: Path, tmp_path: Path) -> None:
    server = opensandbox_server
    local, _ = _dry_run(daemon_env(server, home, "local"), tmp_path / "local.jsonl", tmp_path / "local")
    t0 = time.monotonic()
    remote, r = _dry_run(daemon_env(server, home), tmp_path / "osb.jsonl", tmp_path / "osb")
    took = time.monotonic() - t0
    print(f"dry-run under opensandbox: {took:.1f} s; rows {len(remote)}")
    assert remote == local and len(local) >= 3
    assert "EGRESS NOT ENFORCED" in r.stderr and server.api_key not in r.stderr + r.stdout
    assert server.sandboxes() == []  # dry-run stops the environment: every sandbox of the run deleted


def _up(server, home: Path, tmp: Path) -> tuple[subprocess.Popen, dict]:
    proc = up_process(EXAMPLE, tmp, env=daemon_env(server, home))
    ready = json.loads(read_ready_line(proc, timeout=600))
    return proc, ready


def _instances(ready: dict) -> list[dict]:
    return httpx.get(ready["head_server"] + "/server_instances", timeout=10).json()


def _run_labels(server) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for box in server.sandboxes():
        meta = box.get("metadata") or {}
        if "gym-runtime-run" in meta:
            out.setdefault(meta["gym-runtime-run"], []).append(box["id"])
    return out


def test_stop_and_a_killed_daemon_leave_no_sandbox(opensandbox_server, home: Path, tmp_path: Path) -> None:
    server = opensandbox_server
    proc, ready = _up(server, home, tmp_path)
    assert ready["isolation"] == "opensandbox"
    runs = _run_labels(server)
    assert len(runs) == 1 and len(next(iter(runs.values()))) == len(ready["servers"])  # one per server instance
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(120) == 0
    assert _run_labels(server) == {}  # stop deleted every sandbox of the run

    proc, ready = _up(server, home, tmp_path)
    first = set(_run_labels(server))
    os.killpg(proc.pid, signal.SIGKILL)  # the daemon and everything in its session; the sandboxes stay
    proc.wait(30)
    assert set(_run_labels(server)) == first
    proc, ready = _up(server, home, tmp_path)  # same state directory: reaps by the owner label first
    runs = _run_labels(server)
    assert not (set(runs) & first), runs
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(120)
    err_so_far = proc.stderr.read()
    assert code == 0, err_so_far[-3000:]
    assert f"deleted {len(ready['servers'])} sandbox(es) a stopped daemon of this state directory left" in err_so_far
    assert _run_labels(server) == {} and server.api_key not in err_so_far


def test_a_server_killed_inside_its_sandbox_is_restarted(opensandbox_server, home: Path, tmp_path: Path) -> None:
    server = opensandbox_server
    proc, ready = _up(server, home, tmp_path)
    try:
        target = next(s for s in _instances(ready) if s["process_name"] == "arithmetic")
        assert target["isolation"] == "opensandbox" and target["url"].startswith("http://")
        box_id = target["sandbox"]
        killed = kill_server_inside(server, box_id)  # the kill's time inside the sandbox
        seen = None
        while time.time() - killed < 30:
            me = next(s for s in _instances(ready) if s["process_name"] == "arithmetic")
            if me.get("last_exit"):
                seen = me["last_exit"]["at"] - killed
            # the restart count moves before the state leaves "ready": the new sandbox's id says the restart is done
            if me["restarts"] == 1 and me["state"] == "ready" and me["sandbox"] not in (None, box_id):
                break
            time.sleep(0.1)
        else:
            raise AssertionError(f"not restarted: {me}")
        print(f"exit seen {seen:.2f} s after the kill")
        # seen by the command's status poll, not by the service-lost path (which waits SERVICE_GRACE_S);
        # how soon is a figure (printed above), not a test: CI's 2 cores took 3 s once
        assert seen is not None and seen < SERVICE_GRACE_S / 2
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
    assert _run_labels(server) == {}
