"""A create the OpenSandbox server fails with a 500 of its own is tried again by the gate
(docs/runtime.md, "Task sandboxes on an OpenSandbox server"): opensandbox-server 1.1.1 answers
``DOCKER::SANDBOX_EXECD_DISTRIBUTION_FAILED`` when podman's archive pipe breaks while it copies
execd into a new container (seen under load), and removes that container itself. The stand-in
below is the operator's server answering on loopback as 1.1.1 does; the real server's own test is
``tests/opensandbox/test_task_sandbox_gate.py``."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from gym_runtime.task_sandboxes.approval import ApprovedImages
from gym_runtime.task_sandboxes.osb_gate import OpenSandboxGate
from sandbox import EgressPolicy
from sandbox.opensandbox.connection import OpenSandboxConnection
from sandbox.opensandbox.failures import CREATE_TRIES
from sandbox.opensandbox.spec import RunLabels

EXECD_FAILED = {
    "code": "DOCKER::SANDBOX_EXECD_DISTRIBUTION_FAILED",
    "message": 'Failed to copy execd into sandbox: 500 Server Error: Internal Server Error ("passing bulk '
    'input to subprocess: write |1: broken pipe")',
}


class StandIn:
    """Answers the first ``fail`` creates with ``answer`` (status, body), then makes sandbox ``sb-N``."""

    def __init__(self, fail: int, answer: tuple[int, dict]) -> None:
        self.creates: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a) -> None:
                pass

            def _reply(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                outer.creates.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
                n = len(outer.creates)
                if n <= fail:
                    self._reply(*answer)
                else:
                    self._reply(202, {"id": f"sb-{n}", "status": {"state": "Pending"}})

            def do_GET(self) -> None:
                self._reply(
                    200,
                    {
                        "items": [],
                        "pagination": {
                            "page": 1,
                            "pageSize": 100,
                            "totalItems": 0,
                            "totalPages": 0,
                            "hasNextPage": False,
                        },
                    },
                )

            def do_DELETE(self) -> None:
                self.send_response(204)
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.domain = f"127.0.0.1:{self.httpd.server_address[1]}"


def _create(stand_in: StandIn, tmp_path: Path) -> tuple[int, dict]:
    conn = OpenSandboxConnection(
        domain=stand_in.domain,
        api_key="operator-key",
        egress="unenforced",
        task_images=ApprovedImages.parse("registry.example/"),
    )

    async def scenario() -> tuple[int, dict]:
        gate = OpenSandboxGate(conn, RunLabels.new(tmp_path / "slot", "retry-test"), EgressPolicy())
        await gate.start()
        try:
            async with httpx.AsyncClient(trust_env=False) as http:
                r = await http.post(
                    f"http://{gate.host}:{gate.port}/v1/sandboxes",
                    headers={"OPEN-SANDBOX-API-KEY": gate.token("swe")},
                    json={
                        "image": {"uri": "registry.example/swe:1"},
                        "entrypoint": ["sleep", "1"],
                        "resourceLimits": {"cpu": "1"},
                    },
                )
            return r.status_code, r.json()
        finally:
            await gate.stop()

    try:
        return asyncio.run(scenario())
    finally:
        stand_in.httpd.shutdown()


def test_a_create_failed_by_the_server_is_tried_again(tmp_path: Path) -> None:
    stand_in = StandIn(fail=1, answer=(500, EXECD_FAILED))
    status, body = _create(stand_in, tmp_path)
    assert (status, body["id"]) == (202, "sb-2")
    assert len(stand_in.creates) == 2
    assert stand_in.creates[0] == stand_in.creates[1]  # the same labelled request, not a second edit of it


def test_a_server_failing_every_try_gives_its_own_error_back(tmp_path: Path) -> None:
    stand_in = StandIn(fail=99, answer=(500, EXECD_FAILED))
    status, body = _create(stand_in, tmp_path)
    assert (status, body["code"]) == (500, EXECD_FAILED["code"])
    assert len(stand_in.creates) == CREATE_TRIES


@pytest.mark.parametrize(
    "answer",
    [
        (400, {"code": "SANDBOX::INVALID_PARAMETER", "message": "bad entrypoint"}),
        (500, {"detail": "not the server's own error shape"}),
    ],
)
def test_other_refusals_are_not_tried_again(tmp_path: Path, answer: tuple[int, dict]) -> None:
    stand_in = StandIn(fail=1, answer=answer)
    status, _ = _create(stand_in, tmp_path)
    assert status == answer[0]
    assert len(stand_in.creates) == 1
