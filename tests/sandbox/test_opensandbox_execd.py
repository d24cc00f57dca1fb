"""An execd that refuses the runtime's command API (sandbox/opensandbox/execd.py): which SDK
failures count as a refusal, execd's own words, the OpenSandbox server's version as it tells it
(a real loopback server answering ``/version`` or ``/health``, or nothing) and the one
``GR-OSB-EXECD`` block. The refusal against a real OpenSandbox server is
tests/opensandbox/test_execd_refusal.py."""

from __future__ import annotations

import asyncio
import socket

import pytest
from opensandbox.exceptions import SandboxApiException, SandboxConnectionException
from opensandbox.exceptions.sandbox import SandboxError
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from gym_runtime.errors import EXIT_RUNTIME
from gym_runtime.serving import LoopbackListener
from sandbox.opensandbox.connection import OpenSandboxConnection
from sandbox.opensandbox.execd import execd_words, refusal, refused
from sandbox.opensandbox.service import SandboxService


def _api(status: int, **kw) -> SandboxApiException:
    return SandboxApiException(f"Failed to run command failed: HTTP {status}", status_code=status, **kw)


def test_a_4xx_or_501_of_execd_is_a_refusal_in_its_own_words() -> None:
    token = _api(401, error=SandboxError("UNAUTHORIZED", "missing X-EXECD-ACCESS-TOKEN header"))
    assert refused(token) and execd_words(token) == "[UNAUTHORIZED] missing X-EXECD-ACCESS-TOKEN header"
    gone = _api(404, response_body=b"404 page not found\n")  # Go's mux: no JSON body
    assert refused(gone) and execd_words(gone) == "404 page not found"
    assert (
        refused(_api(405)) and refused(_api(501)) and execd_words(_api(405)) == "Failed to run command failed: HTTP 405"
    )
    assert not refused(_api(500)) and not refused(_api(503))
    assert not refused(SandboxConnectionException("connection refused"))
    assert len(execd_words(_api(400, response_body=b"x" * 5000))) == 300


def _told(routes: list[Route]) -> str | None:
    async def main() -> str | None:
        listener = LoopbackListener(Starlette(routes=routes))
        await listener.start()
        try:
            return await SandboxService(OpenSandboxConnection(f"127.0.0.1:{listener.port}")).told_version()
        finally:
            await listener.stop()

    return asyncio.run(main())


def test_the_server_version_is_what_it_tells_else_none() -> None:
    version = Route("/version", lambda r: JSONResponse({"version": "1.3.0"}))
    health = Route("/health", lambda r: JSONResponse({"status": "healthy"}))
    assert _told([version, health]) == "1.3.0"
    assert _told([Route("/health", lambda r: JSONResponse({"status": "healthy", "version": "1.2.1"}))]) == "1.2.1"
    assert _told([health]) is None  # opensandbox-server without /version: unknown
    assert _told([Route("/version", lambda r: JSONResponse(["1.3"]))]) is None
    with socket.socket() as s:  # nobody listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert asyncio.run(SandboxService(OpenSandboxConnection(f"127.0.0.1:{port}")).told_version()) is None


@pytest.mark.parametrize("version, told", [("1.1.1", "(version 1.1.1)"), (None, "(version unknown")])
def test_a_refusal_is_one_block_naming_sandbox_server_version_route_and_fix(version: str | None, told: str) -> None:
    service = SandboxService(OpenSandboxConnection("127.0.0.1:8090", api_key="k3y"))
    err = refusal(service, "a7ac0050", "policy_model", version, "POST /command", 401, "[UNAUTHORIZED] missing token")
    assert (err.code, err.exit_code) == ("GR-OSB-EXECD", EXIT_RUNTIME)
    text = err.render()
    assert text.count("error[") == 1 and "k3y" not in text
    assert err.message.startswith(
        "execd in sandbox a7ac0050 (server 'policy_model') on the OpenSandbox server http://127.0.0.1:8090 "
    )
    assert told in err.message and err.message.endswith("refused POST /command: HTTP 401")
    assert err.cause == "execd said: [UNAUTHORIZED] missing token"
    assert "opensandbox 1.1.x" in err.hint and "execd_image" in err.hint and "--sandbox-backend local" in err.hint
