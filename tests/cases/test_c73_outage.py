"""Case C73 (tests/cases/data/C73/README.md; its run script is kept as ``outage_run.py``, renamed so
that pytest does not collect it): ``up`` on the bundled example under the ``opensandbox`` backend,
against a real OpenSandbox server; the server is stopped for 90 s (more than the 60 s ride-out) and
5 s into it ``code_lookup``'s sandbox container is killed, so that server needs a new sandbox while
the service cannot make one.

Owed: the daemon lives through it. While the server waits, ``/health`` answers 503 ``degraded``
with ``sandbox_service`` saying "OpenSandbox server unreachable since T"; its waits count toward no
restart budget; once the service is back the sandbox is made again and a batch scores. With a
deadline shorter than the outage (``GYM_RUNTIME_OPENSANDBOX_OUTAGE_S``) the run ends with one
``GR-OSB-UNREACHABLE`` block naming the service and the setting, not the server. A server restarted into
the sandbox its siblings are still counted in, lost with the service away, waits for the service
uncounted too (the third test, at the backend's level). The supervisor's side alone:
tests/daemon/test_service_outage_restarts.py."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import time
from pathlib import Path

import httpx
import pytest

from sandbox.opensandbox.environment import OpenSandboxEnvironment
from tests.helpers.daemon import read_ready_line, up_process
from tests.helpers.opensandbox.runs import EXAMPLE, connection, daemon_env, servers_together
from tests.opensandbox.test_backend import _instances, _run_labels
from tests.opensandbox.test_many_sandboxes import _with_env

pytestmark = [pytest.mark.opensandbox, pytest.mark.slow, pytest.mark.timeout(1500)]
OUTAGE_S = 90.0
ROW = {
    "responses_create_params": {"input": [{"role": "user", "content": "What is 2 * 3? End with the number."}]},
    "agent_ref": {"type": "responses_api_agents", "name": "arithmetic_agent"},
}


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("osb-home")  # under /tmp: an allowed host path of the test server


def _code_lookup(ready: dict) -> dict:
    return next(s for s in _instances(ready) if s["process_name"] == "code_lookup")


def _health(ready: dict) -> tuple[int, dict]:
    r = httpx.get(ready["head_server"] + "/health", timeout=10)
    return r.status_code, r.json()


def _outage_with_a_lost_sandbox(server, ready: dict, proc, outage_s: float) -> tuple[str, list]:
    """Stop the server, kill code_lookup's sandbox 5 s in, watch ``/health`` until ``outage_s``
    (or the daemon's exit); returns the killed sandbox and the health answers seen."""
    old = _code_lookup(ready)["sandbox"]
    t0 = time.monotonic()
    server.stop()
    time.sleep(5)
    server.kill_sandbox(old)  # podman's API: the OpenSandbox server is down
    seen = []
    while time.monotonic() - t0 < outage_s and proc.poll() is None:
        time.sleep(5)
        try:
            seen.append((round(time.monotonic() - t0), *_health(ready)))
        except httpx.HTTPError as e:  # a slow answer on a loaded machine is noted, not the end of the watch
            seen.append((round(time.monotonic() - t0), None, {"error": repr(e)}))
    return old, seen


def test_c73_an_outage_while_a_sandbox_dies_is_waited_out_and_the_server_made_again(
    opensandbox_server, home: Path, tmp_path: Path
) -> None:
    server = opensandbox_server
    proc = up_process(EXAMPLE, tmp_path, env=daemon_env(server, home))
    ready = json.loads(read_ready_line(proc, timeout=900))
    try:
        old, seen = _outage_with_a_lost_sandbox(server, ready, proc, OUTAGE_S)
        assert proc.poll() is None, f"the daemon ended during the outage: {seen}"
        waiting = [body for _, code, body in seen if code == 503 and "sandbox_service" in body]
        assert waiting, seen
        # the lost sandbox is the one code_lookup's venv shares with its siblings: each of them waits,
        # in the order the liveness probe found them, so the last answer names at least one
        for why in waiting[-1]["sandbox_service"].values():
            assert why.startswith("OpenSandbox server unreachable since "), why
            assert "GYM_RUNTIME_OPENSANDBOX_OUTAGE_S" in why, why
        assert set(waiting[-1]["sandbox_service"]) <= set(ready["servers"]), waiting[-1]
        assert waiting[-1]["status"] == "degraded" and waiting[-1]["phase"] == "ready"  # not the probe long done
        me = _code_lookup(ready)
        assert me["state"] in ("restarting", "starting") and me["restarts"] <= 1, me  # 1: the wedged kill

        server.start()
        back = time.monotonic()
        while not (_code_lookup(ready)["state"] == "ready" and _health(ready)[0] == 200):
            assert proc.poll() is None and time.monotonic() - back < 180, (_code_lookup(ready), _health(ready))
            time.sleep(1)
        me = _code_lookup(ready)
        assert me["sandbox"] != old and me["restarts"] <= 1, me
        print(f"ready again {time.monotonic() - back:.1f}s after the server came back; health during: {seen}")
        r = httpx.post(ready["head_server"] + "/rollouts/run", timeout=300, json={"examples": [ROW]})
        assert r.status_code == 200, r.text[:500]
        result = json.loads(r.text)["results"][0]
        assert "error" not in result and result.get("reward") is not None, result
        server.remove_sandbox(old)  # podman's runtime cannot delete a killed container through the server
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        code = proc.wait(180)
        err = proc.stderr.read()
        server.start_if_stopped()  # a failure above must not leave the session's server down
    assert code == 0, err[-3000:]
    assert "error[" not in err, err[-3000:]
    said = re.findall(r"^\[[\d:]+\] (\w+): .*OpenSandbox server unreachable since", err, re.M)
    assert said and set(said) <= set(ready["servers"]), err[-3000:]  # said once per server, on stderr
    assert _run_labels(server) == {}


def test_c73_past_the_deadline_the_run_ends_naming_the_service_not_the_server(
    opensandbox_server, home: Path, tmp_path: Path
) -> None:
    server = opensandbox_server
    env = {**daemon_env(server, home), "GYM_RUNTIME_OPENSANDBOX_OUTAGE_S": "20"}
    proc = up_process(EXAMPLE, tmp_path, env=env)
    ready = json.loads(read_ready_line(proc, timeout=900))
    old = ""
    try:
        old, seen = _outage_with_a_lost_sandbox(server, ready, proc, 240)
        code = proc.wait(120)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(180)
        server.start_if_stopped()
        if old:
            server.remove_sandbox(old)
        # the daemon ended while the service was away, so the run's other sandboxes are still there
        # (the next daemon of the slot, or their TTL, deletes them); the tests after this one count them
        server.delete_all()
    assert code == 3, err[-3000:]
    blocks = [ln for ln in err.splitlines() if "error[" in ln]
    assert len(blocks) == 1 and "error[GR-OSB-UNREACHABLE]" in blocks[0], err[-3000:]
    # the lost sandbox is the one code_lookup's venv shares with its siblings: any of them may say it
    named = re.search(
        r"server '(\w+)' could not be given a new sandbox: OpenSandbox server unreachable since", blocks[0]
    )
    assert named is not None and named.group(1) in ready["servers"], blocks[0]
    # and the block names that group: every server of the venv, the one that said it among them
    group = re.search(r"the (\d+) servers of its venv share \(([\w, ]+)\)", blocks[0])
    assert group is not None, blocks[0]
    names = group.group(2).split(", ")
    assert len(names) == int(group.group(1)) > 1 and named.group(1) in names and "code_lookup" in names, blocks[0]
    assert "gave up after 20s (GYM_RUNTIME_OPENSANDBOX_OUTAGE_S)" in blocks[0]
    assert "fix the server" not in err and "not at fault" in err


def test_c73_a_restart_into_the_shared_sandbox_lost_with_the_service_waits_uncounted(
    opensandbox_server, tmp_path: Path
) -> None:
    """Two servers share a sandbox; the service stops and the sandbox is killed; one of them ends
    (as a wedged kill ends it) and starts again while its sibling is still counted in the dead
    sandbox: that start cannot run its command there, and with the service silent it ends
    ``service-lost`` (the supervisor's uncounted wait), not ``start-failed`` (a counted restart)."""
    server = opensandbox_server
    conn = connection(server)
    seen: dict = {}

    async def body(env: OpenSandboxEnvironment) -> None:
        ports = [env.allocate_port() for _ in range(2)]
        for port in ports:
            await env.publish(port)
        specs = servers_together(2, tmp_path, ports)
        await env.prepare(specs)
        procs = [env.spawn(spec) for spec in specs]
        while any(p.command is None and p.poll() is None for p in procs):
            await asyncio.sleep(0.2)
        assert all(p.poll() is None for p in procs), [p.exit_info() for p in procs]
        assert procs[0].box.id == procs[1].box.id
        seen["box"] = procs[0].box.id
        try:
            await asyncio.to_thread(server.stop)
            await asyncio.to_thread(server.kill_sandbox, seen["box"])
            procs[0].kill_now()
            await procs[0].wait()
            again = env.spawn(specs[0])
            await asyncio.wait_for(again.wait(), 60)
            seen["again"] = again.exit_info()
            seen["sibling"] = procs[1].poll()
        finally:
            await asyncio.to_thread(server.start_if_stopped)
        procs[1].kill_now()
        await procs[1].wait()

    try:
        asyncio.run(_with_env(conn, tmp_path, body))
    finally:
        server.start_if_stopped()
        if "box" in seen:
            server.remove_sandbox(seen["box"])  # podman's runtime cannot delete a killed container through the server
    again = seen["again"]
    assert again.reason == "service-lost", again
    assert again.detail.startswith("OpenSandbox server unreachable since "), again
    assert f"in sandbox {seen['box']}" in again.detail and "GYM_RUNTIME_OPENSANDBOX_OUTAGE_S" in again.detail, again
    assert seen["sibling"] is None  # the sibling still rides the outage out (SERVICE_GRACE_S)
