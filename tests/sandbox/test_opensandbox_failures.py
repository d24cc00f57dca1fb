"""OpenSandbox failures as one ``GR-OSB-*`` block each (sandbox/opensandbox/failures.py), built
from the SDK's own exceptions as opensandbox 1.1.1 raises them; the unreachable server is a real
loopback port nobody listens on."""

from __future__ import annotations

import asyncio
import socket

import pytest
from opensandbox.exceptions import SandboxApiException, SandboxConnectionException, SandboxRateLimitException
from opensandbox.exceptions.sandbox import SandboxError

from gym_runtime.errors import EXIT_INVALID, EXIT_RUNTIME
from sandbox.opensandbox.connection import OpenSandboxConnection
from sandbox.opensandbox.failures import translate
from sandbox.opensandbox.service import SandboxService

KEY = "s3cret-key-value"
CONN = OpenSandboxConnection("127.0.0.1:8090", api_key=KEY, image="localhost/gym-server:1")


def _api(status: int, code: str, message: str) -> SandboxApiException:
    return SandboxApiException(
        f"API error: HTTP {status}: {message}", status_code=status, error=SandboxError(code, message)
    )


@pytest.mark.parametrize(
    "exc, code, exit_code",
    [
        (_api(401, "GENERAL::UNKNOWN_ERROR", "Invalid API key"), "GR-OSB-AUTH", EXIT_INVALID),
        (
            _api(500, "DOCKER::SANDBOX_IMAGE_PULL_FAILED", "Failed to pull image localhost/gym-server:1"),
            "GR-OSB-IMAGE",
            EXIT_INVALID,
        ),
        (
            _api(400, "VOLUME::HOST_PATH_NOT_ALLOWED", "Host path '/home/x' is not under any allowed prefix"),
            "GR-OSB-MOUNT",
            EXIT_RUNTIME,
        ),
        (_api(403, "KUBERNETES::QUOTA_EXCEEDED", "exceeded quota: sandboxes"), "GR-OSB-QUOTA", EXIT_RUNTIME),
        (SandboxRateLimitException("API error: HTTP 429", status_code=429), "GR-OSB-QUOTA", EXIT_RUNTIME),
        (_api(404, "DOCKER::SANDBOX_NOT_FOUND", "Sandbox abc not found"), "GR-OSB-SANDBOX-GONE", EXIT_RUNTIME),
        (_api(500, "SANDBOX::INTERNAL_ERROR", "boom"), "GR-OSB-SERVER", EXIT_RUNTIME),
        (
            SandboxConnectionException("Network connectivity error: All connection attempts failed"),
            "GR-OSB-UNREACHABLE",
            EXIT_RUNTIME,
        ),
    ],
)
def test_each_failure_is_one_block_with_its_code(exc: Exception, code: str, exit_code: int) -> None:
    err = translate(exc, CONN, "creating the sandbox of server 'arithmetic'", sandbox="abc")
    assert (err.code, err.exit_code) == (code, exit_code)
    text = err.render()
    assert "http://127.0.0.1:8090" in text and err.hint and KEY not in text
    assert text.count("error[") == 1


def test_the_server_words_stay_in_the_cause() -> None:
    err = translate(
        _api(400, "VOLUME::HOST_PATH_NOT_ALLOWED", "Host path '/home/x' is not under any allowed prefix"),
        CONN,
        "creating the sandbox of server 'arithmetic'",
        sandbox="abc",
    )
    assert "sandbox abc" in err.message and "/home/x" in err.cause and "allowed_host_paths" in err.hint


def test_an_unreachable_server_is_named_without_its_key() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conn = OpenSandboxConnection(f"127.0.0.1:{port}", api_key=KEY)

    async def go() -> None:
        svc = SandboxService(conn)
        try:
            with pytest.raises(Exception) as version:
                await svc.version()
            with pytest.raises(Exception) as listing:
                await svc.list_ids({"a": "b"}, "listing this run's sandboxes")
        finally:
            await svc.close()
        for e in (version.value, listing.value):
            assert e.code == "GR-OSB-UNREACHABLE" and f"127.0.0.1:{port}" in e.message and KEY not in e.render()

    asyncio.run(go())


def test_the_key_is_not_in_the_connection_repr() -> None:
    assert KEY not in repr(CONN) and KEY not in str(CONN.describe())


def test_a_server_without_an_egress_sidecar_is_named() -> None:
    err = translate(
        _api(400, "SANDBOX::INVALID_PARAMETER", "egress.image must be configured when networkPolicy is provided."),
        CONN,
        "creating the sandbox of server 'arithmetic'",
    )
    assert err.code == "GR-OSB-EGRESS" and "GYM_RUNTIME_OPENSANDBOX_EGRESS=unenforced" in err.hint
