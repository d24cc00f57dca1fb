"""SIGTERM during a long ``POST /rollouts/run``: the client gets a complete answer with the rows
already finished and the JSON error ``GR-ROLLOUT-SHUTDOWN`` for the rest, and the daemon prints no
traceback (real daemon, loopback)."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import httpx

from tests.helpers.daemon import kill_tree, read_ready_line, simple_env, up_process, wait_log_lines


def test_sigterm_during_a_batch_ends_it_with_a_json_error(tmp_path: Path) -> None:
    proc = up_process(simple_env(tmp_path / "pkg"), tmp_path, env={"GYM_RUNTIME_HOME": str(tmp_path / "home")})
    answer: dict = {}
    try:
        info = json.loads(read_ready_line(proc))
        ref = {"type": "responses_api_agents", "name": "acme_agent"}
        rows = [{"agent_ref": ref, "sleep": 0 if i < 2 else 60, "i": i} for i in range(5)]

        def post() -> None:
            try:
                r = httpx.post(
                    info["head_server"] + "/rollouts/run", json={"examples": rows}, timeout=60, trust_env=False
                )
                answer.update(status=r.status_code, text=r.text)
            except httpx.HTTPError as e:  # a truncated body lands here
                answer.update(error=repr(e))

        client = threading.Thread(target=post)
        client.start()
        wait_log_lines(info["head_server"], "acme_agent", "fixture: answered row", 2)  # rows 0 and 1 done
        os.kill(proc.pid, signal.SIGTERM)
        client.join(30)
        assert not client.is_alive()
        assert proc.wait(30) == 0
    finally:
        kill_tree(proc)
    err = proc.stderr.read()
    assert "error" not in answer, answer
    assert answer["status"] == 200
    body = json.loads(answer["text"])
    assert body["error"]["code"] == "GR-ROLLOUT-SHUTDOWN" and "2 of 5 row(s) finished" in body["error"]["message"]
    results = body["results"]
    assert [r.get("reward") for r in results[:2]] == [1.0, 1.0] and [r["row"]["i"] for r in results[:2]] == [0, 1]
    assert [r["error"]["code"] for r in results[2:]] == ["GR-ROLLOUT-SHUTDOWN"] * 3
    assert "Traceback" not in err and "Exception in ASGI application" not in err, err
