"""The order of a stop (docs/architecture.md §7, "Shutdown"): the head server keeps answering while
the servers stop, and closes only after them, beside the stub model, which is killed at once (real
daemon, loopback, embedded stub model)."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import httpx

from tests.helpers.daemon import FIXTURE_APP, kill_tree, read_ready_line, running, up_process, write_fixture_package

# a server that takes 1.5 s to stop after SIGTERM, as a Gym server's uvicorn and Ray driver do
SLOW_STOP_APP = (
    "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *a: (time.sleep(1.5), sys.exit(0)))\n" + FIXTURE_APP
)


def test_the_head_server_answers_while_servers_stop_and_the_stub_is_gone_after(tmp_path: Path) -> None:
    cfg = {"domain": "math", "policy_url": "${policy_base_url}"}  # uses the policy: the stub is embedded
    pkg = write_fixture_package(
        tmp_path / "pkg",
        {"acme_slow": {"resources_servers": {"acme_slow": cfg}}},
        apps={"acme_slow": SLOW_STOP_APP},
        name="acme-slow-stop",
    )
    proc = up_process(pkg, tmp_path, env={"GYM_RUNTIME_HOME": str(tmp_path / "home")})
    try:
        info = json.loads(read_ready_line(proc))
        head = info["head_server"]
        rows = httpx.get(head + "/processes", trust_env=False, timeout=10).json()["processes"]
        stub = [r["pid"] for r in rows if r["role"] == "model"]
        assert stub, rows
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        answers: list[tuple[float, str]] = []
        while proc.poll() is None and time.monotonic() - t0 < 30:
            try:
                r = httpx.get(head + "/health", trust_env=False, timeout=2)
                answers.append((time.monotonic() - t0, r.json().get("status")))
            except httpx.HTTPError:
                answers.append((time.monotonic() - t0, "closed"))
            time.sleep(0.05)
        assert proc.wait(30) == 0, proc.stderr.read()
        stopping = [t for t, status in answers if status == "stopping"]
        assert stopping and max(stopping) >= 1.0, answers  # still answering while the server took 1.5 s
        first_closed = min((t for t, status in answers if status == "closed"), default=None)
        assert first_closed is None or first_closed > max(stopping), answers
        assert not any(running(p) for p in stub)
        err = proc.stderr.read()
        assert "Traceback" not in err and "unclean stop" not in err, err
    finally:
        kill_tree(proc)
