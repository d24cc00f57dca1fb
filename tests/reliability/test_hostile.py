"""Hostile servers: a resources server that attacks its environment, at each isolation level.

The fixture (``tests/reliability/apps/hostile.py``) runs next to a well-behaved resources server
(``acme_math``) and its agent, and tries: reading another server's or the daemon's environment and
the policy API key; writing into the package, its own venv and another server's venv; reaching the
outside by a raw socket, an IP literal, DNS lookups and the proxy; reading another server's logs,
running rollouts and stopping the environment through the head server, signalling another server
or the daemon; a fork bomb, a memory bomb, filling its work dir (a small tmpfs: never the host's
disk) and spinning the CPU. A second fixture squats the port of another server before it starts.

Each attempt must be blocked or contained where :data:`EXPECTED` says so, the other servers must
keep answering, and nothing may ever reach the host-side listener that stands for the outside at
``full`` and ``partial``. Each run writes its outcomes as JSON (into ``$GYM_RUNTIME_TESTS_REPORT_DIR``
when set); ``bench/attempts_table.py`` renders them as the table of docs/reliability.md.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from sandbox import IsolationLevel, probe_isolation
from tests.helpers.daemon import FIXTURE_APP, kill_tree, read_ready_line, up_process, write_fixture_package
from tests.helpers.disks import small_disk
from tests.helpers.gym_package import python_312_plus
from tests.helpers.load import instance, run_batch

pytestmark = pytest.mark.slow
APPS = Path(__file__).parent / "apps"
LEVELS = ["full", "partial", "none"]
B, C, N = "blocked", "contained", "not blocked"
# what each level must hold (the rendered table in docs/reliability.md says the same, from a real run)
EXPECTED = {
    "read another server's environment": {"full": B, "partial": B, "none": N},
    "read the daemon's environment": {"full": B, "partial": B, "none": N},
    "read the policy API key": {"full": B, "partial": B, "none": N},
    "write into the package": {"full": B, "partial": B, "none": N},
    "write into its own venv": {"full": B, "partial": B, "none": N},
    "write into another server's venv": {"full": B, "partial": B, "none": N},
    "reach outside by a raw socket": {"full": B, "partial": B, "none": N},
    "reach outside by an IP literal": {"full": B, "partial": B, "none": N},
    "exfiltrate through DNS lookups": {"full": B, "partial": B, "none": N},
    "reach a host not on the allowlist through the proxy": {"full": B, "partial": B, "none": B},
    "read another server's logs through the head server": {"full": B, "partial": B, "none": N},
    "run rollouts through the head server": {"full": B, "partial": B, "none": N},
    "stop or change the environment through the head server": {"full": B, "partial": B, "none": B},
    "signal another server or the daemon": {"full": B, "partial": B, "none": N},
    "fork bomb": {"full": C, "partial": C, "none": C},
    "memory bomb": {"full": C, "partial": C, "none": C},
    "fill the disk of its work dir": {"full": C, "partial": C, "none": C},
    "spin the CPU": {"full": C, "partial": C, "none": C},
}


def _available(level: str) -> bool:
    return IsolationLevel(level).rank <= probe_isolation().level.rank


class Outside:
    """A listener on the host's 127.0.0.1 standing for the outside world; counts connections."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


def _report(tmp: Path, name: str, data: dict) -> None:
    out = Path(os.environ.get("GYM_RUNTIME_TESTS_REPORT_DIR") or tmp)
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(json.dumps(data, indent=2))  # attempts in the order they ran


def _package(root: Path, hostile: dict) -> Path:
    """``acme_math`` runs on another Python when there is one (a venv of its own for the hostile to
    find); the hostile and the agent share the runtime's."""
    other = python_312_plus()
    return write_fixture_package(
        root,
        {
            "acme_math": {
                "resources_servers": {"acme_math": {"domain": "math", **({"python_version": other} if other else {})}}
            },
            "acme_agent": {
                "responses_api_agents": {
                    "acme_agent": {"resources_server": {"type": "resources_servers", "name": "acme_math"}}
                }
            },
            "hostile": {
                "resources_servers": {
                    "hostile": {"domain": "other", "victim": "acme_math", "victim_agent": "acme_agent", **hostile}
                }
            },
        },
        apps={"hostile": (APPS / "hostile.py").read_text(), "acme_math": FIXTURE_APP},
        name="acme-hostile",
    )


def _attempts(url: str, proc, timeout: float = 240) -> dict:
    """Poll the hostile server's ``/attempts`` until done (it may not answer while its own fork
    bomb holds every process slot of its pids limit)."""
    deadline = time.monotonic() + timeout
    got: dict = {}
    while not got.get("done"):
        assert time.monotonic() < deadline and proc.poll() is None, got
        try:
            got = httpx.get(url + "/attempts", trust_env=False, timeout=30).json()
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    return got


@pytest.mark.parametrize("level", LEVELS)
def test_hostile_server_attempts(tmp_path: Path, level: str) -> None:
    if not _available(level):
        pytest.skip(f"isolation {level} is not available on this host")
    outside = Outside()
    key = "sk-hostile-" + secrets.token_hex(8)
    pkg = _package(
        tmp_path / "pkg",
        {
            "outside_port": outside.port,
            "needle_reversed": "sk-hostile-"[::-1],
            "pids_cap": 600,
            "memory_cap_mb": 1024,
            "fill_cap_mb": 256,
        },
    )
    with small_disk(tmp_path / "run", 96):  # the work dir (logs, server homes): the disk the hostile fills
        proc = up_process(
            pkg,
            tmp_path,
            "--isolation",
            level,
            "--policy-base-url",
            "http://127.0.0.1:1/v1",
            "--policy-api-key-env",
            "HOSTILE_KEY",
            env={
                "HOSTILE_KEY": key,
                "GYM_RUNTIME_HOME": str(tmp_path / "home"),
                "GYM_RUNTIME_SERVER_MEMORY_MB": "256",
                "GYM_RUNTIME_SERVER_PIDS": "128",
            },
        )
        try:
            info = json.loads(read_ready_line(proc, timeout=180))
            head = info["head_server"]
            got = _attempts(info["servers"]["hostile"], proc)
            attempts = {k: v for k, v in got["attempts"].items() if not k.startswith("_")}
            _report(tmp_path, f"hostile-{level}.json", {"level": level, "attempts": attempts})
            # the others keep answering, nothing was restarted, the daemon runs on
            batch = run_batch(
                head,
                [{"agent_ref": {"type": "responses_api_agents", "name": "acme_agent"}, "i": i} for i in range(5)],
                concurrency=5,
            )
            assert [r.get("reward") for r in batch.results] == [1.0] * 5, batch.results
            assert instance(head, "acme_math")["restarts"] == 0 and proc.poll() is None
            if level != "none":
                assert outside.accepted == 0  # nothing reached the stand-in for the outside
            outcomes = {k: v["outcome"] for k, v in attempts.items()}
            expected = {k: v[level] for k, v in EXPECTED.items()}
            assert outcomes == expected, json.dumps(attempts, indent=1)
            proc.terminate()
            assert proc.wait(30) == 0
            err = proc.stderr.read()
            assert "Traceback" not in err and "Exception in callback" not in err, err[-3000:]
        finally:
            kill_tree(proc)
            outside.close()


@pytest.mark.parametrize("level", LEVELS)
def test_port_squatting_is_caught(tmp_path: Path, level: str) -> None:
    """A server binds the port assigned to another (``acme_math``, which binds 3 s after its start)
    and answers in its place. Expected: the daemon sees that the process answering on
    ``acme_math``'s port is not ``acme_math``'s and fails the start naming the squatter, instead of
    counting the squatter's answer as ``acme_math`` being ready."""
    if not _available(level):
        pytest.skip(f"isolation {level} is not available on this host")
    pkg = write_fixture_package(
        tmp_path / "pkg",
        {
            "acme_math": {"resources_servers": {"acme_math": {"domain": "math", "fixture_sleep": 3}}},
            "hostile": {"resources_servers": {"hostile": {"domain": "other", "victim": "acme_math", "squat": True}}},
        },
        apps={"hostile": (APPS / "hostile.py").read_text(), "acme_math": FIXTURE_APP},
        name="acme-squat",
    )
    proc = up_process(
        pkg, tmp_path, "--isolation", level, "--max-restarts", "1", env={"GYM_RUNTIME_HOME": str(tmp_path / "home")}
    )
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        kill_tree(proc)
    said = next((line for line in err.splitlines() if "error[" in line), err.strip()[-300:])
    _report(
        tmp_path,
        f"squat-{level}.json",
        {
            "level": level,
            "attempts": {
                "squat another server's port": {
                    "outcome": B if proc.returncode == 3 and "GR-START-PORT-SQUAT" in err else N,
                    "detail": f"exit {proc.returncode}: {said}",
                }
            },
        },
    )
    assert out == "" and proc.returncode == 3, err
    assert "error[GR-START-PORT-SQUAT]" in err and "'hostile'" in err and "'acme_math'" in err, err
