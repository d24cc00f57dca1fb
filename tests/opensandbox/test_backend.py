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

pytestmark = [pytest.mark.opensandbox, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "native-quickstart"
DATASET = ROOT / "examples" / "native-quickstart.jsonl"


def _gateway(server) -> str:
    """The podman bridge's gateway: the address sandboxes reach this host at."""
    for name in ("podman", "bridge"):
        r = server.docker("GET", f"/networks/{name}")
        if r.status_code == 200:
            for cfg in (r.json().get("IPAM") or {}).get("Config") or []:
                if cfg.get("Gateway"):
                    return cfg["Gateway"]
    return "10.88.0.1"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("osb-home")  # one venv root for both backends (under /tmp: allowed host paths)


def _env(server, home: Path, backend: str = "opensandbox") -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENSANDBOX_", "GYM_RUNTIME_"))}
    return {**base, "GYM_RUNTIME_HOME": str(home), "GYM_RUNTIME_SANDBOX_BACKEND": backend,
            "OPENSANDBOX_DOMAIN": server.domain, "OPENSANDBOX_API_KEY": server.api_key,
            "GYM_RUNTIME_OPENSANDBOX_IMAGE": server.image, "GYM_RUNTIME_OPENSANDBOX_DAEMON_HOST": _gateway(server),
            "GYM_RUNTIME_OPENSANDBOX_EGRESS": "unenforced",
            # venvs on Debian's own Python, which the sandbox image holds at the same path (/usr is never mounted)
            "GYM_RUNTIME_PYTHON": "/usr/bin/python3.11"}


def _dry_run(env: dict[str, str], out: Path, work: Path) -> tuple[dict, subprocess.CompletedProcess]:
    r = subprocess.run([sys.executable, "-m", "gym_runtime.cli.main", "dry-run", str(EXAMPLE), "--dataset",
                        str(DATASET), "--samples", "2", "--out", str(out), "--work-dir", str(work), "--json"],
                       capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stderr[-4000:]
    rewards: dict = {}
    for line in out.read_text().splitlines():
        row = json.loads(line)
        rewards.setdefault(row.get("row", row.get("task_idx")), []).append(row.get("reward"))
    return {k: sorted(v) for k, v in rewards.items()}, r


def test_quickstart_rewards_equal_the_local_backend(opensandbox_server, home: Path, tmp_path: Path) -> None:
    server = opensandbox_server
    local, _ = _dry_run(_env(server, home, "local"), tmp_path / "local.jsonl", tmp_path / "local")
    t0 = time.monotonic()
    remote, r = _dry_run(_env(server, home), tmp_path / "osb.jsonl", tmp_path / "osb")
    took = time.monotonic() - t0
    print(f"dry-run under opensandbox: {took:.1f} s; rows {len(remote)}")
    assert remote == local and len(local) >= 3
    assert "EGRESS NOT ENFORCED" in r.stderr and server.api_key not in r.stderr + r.stdout
    assert server.sandboxes() == []  # dry-run stops the environment: every sandbox of the run deleted


def _up(server, home: Path, tmp: Path) -> tuple[subprocess.Popen, dict]:
    proc = up_process(EXAMPLE, tmp, env=_env(server, home))
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
    from opensandbox.models.execd import RunCommandOpts
    from opensandbox.sandbox import Sandbox

    server = opensandbox_server
    proc, ready = _up(server, home, tmp_path)
    try:
        target = next(s for s in _instances(ready) if s["process_name"] == "arithmetic")
        assert target["isolation"] == "opensandbox" and target["url"].startswith("http://")
        box_id = target["sandbox"]

        async def kill_inside() -> None:
            box = await Sandbox.connect(box_id, connection_config=server.connection_config())
            try:
                await box.commands.run(["python3", "-c", "import os,signal\nfor p in os.listdir('/proc'):\n"
                                        " if p.isdigit():\n  c=open(f'/proc/{p}/cmdline','rb').read()\n"
                                        "  if b'app.py' in c and b'forwarder' not in c: os.kill(int(p),9)"],
                                       opts=RunCommandOpts(background=True))
            finally:
                await box.close()

        import asyncio

        killed = time.time()
        asyncio.run(kill_inside())
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
