"""The real OpenSandbox server the ``opensandbox`` tests run against, driven by the ``opensandbox`` SDK.

One real ``opensandbox-server`` on podman's Docker API per session (``opensandbox_server``,
``tests/helpers/opensandbox/fixture.py``); sandboxes from the local Debian 12 image; the in-sandbox
agent is the execd test stand-in (docs/runtime.md, "What the tests cover, and what they do not"). Each test labels its sandboxes with its own
``run`` metadata and checks that the server lists none of them, and podman holds none, afterwards.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from opensandbox import Sandbox
from opensandbox.models.execd import RunCommandOpts
from opensandbox.models.filesystem import WriteEntry
from opensandbox.models.sandboxes import Host, Volume

from tests.helpers.opensandbox.create import create_tried
from tests.helpers.opensandbox.server import OpenSandboxServer

pytestmark = [pytest.mark.opensandbox, pytest.mark.timeout(900)]
DEADLINE_S = 120.0  # for a condition inside a sandbox; generous on a loaded 2-core host
# a server in the sandbox: prints a line a request, answers its path; stdlib only
HTTP_SERVER = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("hello " + self.path).encode()
        print("served", self.path, flush=True)
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
print("listening", flush=True)
http.server.HTTPServer(("127.0.0.1", 9000), H).serve_forever()
"""


async def create(server: OpenSandboxServer, run: str, **kw) -> Sandbox:
    return await create_tried(
        lambda: Sandbox.create(
            server.image,
            connection_config=server.connection_config(request_timeout=timedelta(seconds=60)),
            metadata={"run": run},
            timeout=timedelta(minutes=10),
            ready_timeout=timedelta(seconds=DEADLINE_S),
            **kw,
        )
    )


async def until(probe, what: str):
    """``await probe()`` until it returns something truthy; fails after :data:`DEADLINE_S`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while loop.time() < deadline:
        if value := await probe():
            return value
        await asyncio.sleep(0.05)
    pytest.fail(f"{what}: not within {DEADLINE_S:.0f} s")


def assert_nothing_left(server: OpenSandboxServer, run: str) -> None:
    assert server.sandboxes(run=run) == []
    assert [c for c in server.containers() if c["Labels"].get("run") == run] == []


def test_commands_logs_proxy_interrupt_volume_and_tmp(opensandbox_server: OpenSandboxServer, tmp_path: Path) -> None:
    server, run = opensandbox_server, uuid.uuid4().hex
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "data.txt").write_text("from the host\n")

    async def scenario() -> None:
        box = await create(
            server,
            run,
            env={"GREETING": "hi"},
            volumes=[Volume(name="tree", host=Host(path=str(tree)), mount_path=str(tree), read_only=True)],
        )
        try:
            assert [b["id"] for b in server.sandboxes(run=run)] == [box.id]
            # foreground: stdout, stderr, the exit code; the host tree read-only at the same path
            done = await box.commands.run(
                f"cat {tree}/data.txt; echo $GREETING $EXTRA; echo oops >&2",
                opts=RunCommandOpts(envs={"EXTRA": "there"}),
            )
            assert done.exit_code == 0
            assert "".join(m.text for m in done.logs.stdout) == "from the host\nhi there\n"
            assert "".join(m.text for m in done.logs.stderr) == "oops\n"
            refused = await box.commands.run(f"echo x > {tree}/data.txt")
            assert refused.exit_code != 0 and "Read-only file system" in "".join(m.text for m in refused.logs.stderr)
            # the sandbox's own writable /tmp: written inside, absent on the host
            marker = f"/tmp/osb-{run}"
            assert (await box.commands.run(f"echo inside > {marker} && cat {marker}")).exit_code == 0
            assert not Path(marker).exists()
            assert (await box.commands.run("exit 7")).exit_code == 7

            # background: an HTTP server; its logs by byte cursor; reached through the execd proxy
            started = await box.commands.run(f"python3 -c '{HTTP_SERVER}'", opts=RunCommandOpts(background=True))
            first = await until(lambda: _logs_with(box, started.id, 0, "listening"), "the server's first line")
            assert first.content == "listening\n" and first.cursor == len(b"listening\n")
            endpoint = await box.get_endpoint(9000)
            assert endpoint.endpoint.endswith("/proxy/9000")
            async with httpx.AsyncClient(timeout=30) as http:
                answer = await http.get(f"{server.protocol}://{endpoint.endpoint}/verify?x=1", headers=endpoint.headers)
            assert (answer.status_code, answer.text) == (200, "hello /verify?x=1")
            # from the cursor on: the print (stdout), then http.server's access line (stderr), combined
            more = await until(lambda: _logs_with(box, started.id, first.cursor, '1" 200 -'), "the request's log lines")
            lines = more.content.splitlines()
            assert lines[0] == "served /verify?x=1" and lines[1].endswith('"GET /verify?x=1 HTTP/1.1" 200 -'), lines
            assert more.cursor == first.cursor + len(more.content.encode())
            assert (await box.commands.get_command_status(started.id)).running is True

            # interrupt: the process group is stopped, the status says so
            await box.commands.interrupt(started.id)
            status = await until(lambda: _finished(box, started.id), "the interrupted server's status")
            assert status.running is False and status.exit_code != 0

            # a file written through the SDK and read back
            await box.files.write_files([WriteEntry(path="/tmp/sub/f.bin", data=b"\x00\x01bytes", mode=600)])
            assert await box.files.read_bytes("/tmp/sub/f.bin") == b"\x00\x01bytes"
            stat = await box.commands.run("stat -c %a /tmp/sub/f.bin")
            assert "".join(m.text for m in stat.logs.stdout) == "600\n"
        finally:
            await box.kill()
            await box.close()

    asyncio.run(scenario())
    assert_nothing_left(server, run)


async def _logs_with(box: Sandbox, command_id: str, cursor: int, text: str):
    logs = await box.commands.get_background_command_logs(command_id, cursor)
    return logs if text in logs.content else None


async def _finished(box: Sandbox, command_id: str):
    status = await box.commands.get_command_status(command_id)
    return status if status.running is False else None


def test_killed_and_removed_from_outside(opensandbox_server: OpenSandboxServer) -> None:
    server, run = opensandbox_server, uuid.uuid4().hex

    async def scenario() -> None:
        killed, removed = await create(server, run), await create(server, run)
        try:
            server.kill_sandbox(killed.id)
            status = await until(
                lambda: _status(server, killed.id, lambda s: s["state"] != "Running"), "killed's state"
            )
            assert (status["state"], status["reason"]) == ("Failed", "CONTAINER_EXITED_ERROR"), status
            assert "137" in status["message"]
            # podman's answer to killing a stopped container is not Docker's "is not running", which
            # opensandbox-server 1.1.1 tolerates: its delete fails; removed from outside it is gone
            answer = server.api("DELETE", f"/sandboxes/{killed.id}")
            assert (answer.status_code, answer.json()["code"]) == (500, "DOCKER::SANDBOX_DELETE_FAILED"), answer.text
            server.remove_sandbox(killed.id)
            server.remove_sandbox(removed.id)
            for box in (killed, removed):
                assert server.api("GET", f"/sandboxes/{box.id}").status_code == 404
                assert server.api("DELETE", f"/sandboxes/{box.id}").status_code == 404
        finally:
            await killed.close()
            await removed.close()

    asyncio.run(scenario())
    assert_nothing_left(server, run)


def test_sandboxes_outlive_a_server_restart(opensandbox_server: OpenSandboxServer) -> None:
    server, run = opensandbox_server, uuid.uuid4().hex

    async def scenario() -> None:
        box = await create(server, run)
        try:
            server.restart()  # the sandbox lives on in podman; the restarted server finds it by its labels
            assert [b["id"] for b in server.sandboxes(run=run)] == [box.id]
            done = await box.commands.run("echo still here")
            assert "".join(m.text for m in done.logs.stdout) == "still here\n"
        finally:
            await box.kill()
            await box.close()

    asyncio.run(scenario())
    assert len(server.start_seconds) >= 2
    assert_nothing_left(server, run)


async def _status(server: OpenSandboxServer, sandbox_id: str, wanted) -> dict | None:
    status = server.api("GET", f"/sandboxes/{sandbox_id}").raise_for_status().json()["status"]
    return status if wanted(status) else None


def test_wrong_key_and_outside_mount_are_refused(opensandbox_server: OpenSandboxServer) -> None:
    server = opensandbox_server
    answer = server.api("GET", "/sandboxes", headers={"OPEN-SANDBOX-API-KEY": "wrong"})
    assert answer.status_code == 401
    body = {
        "image": {"uri": server.image},
        "entrypoint": ["tail", "-f", "/dev/null"],
        "timeout": 60,
        "resourceLimits": {"cpu": "1", "memory": "256Mi"},
        "metadata": {"run": "refused"},
        "volumes": [{"name": "etc", "host": {"path": "/etc"}, "mountPath": "/host-etc", "readOnly": True}],
    }
    answer = server.api("POST", "/sandboxes", json=body)
    assert answer.status_code == 400, answer.text
    assert "allowed" in answer.text.lower()
    assert_nothing_left(server, "refused")
