"""``Sandbox.create`` as the tests call it directly: a server error is tried again, as the daemon does.

Podman's Docker API, under the suite's load on two cores, now and then fails to copy the in-sandbox
agent into a new container (HTTP 500, ``DOCKER::SANDBOX_EXECD_DISTRIBUTION_FAILED``, "passing bulk
input to subprocess: write |1: broken pipe"); the SDK deletes such a half-made sandbox. The daemon
tries a create again on a server error (sandbox/opensandbox/creates.py; the task-sandbox gate
:data:`sandbox.opensandbox.failures.CREATE_TRIES` tries), so a test that creates through the SDK
itself does too: :func:`create_tried` awaits ``make()`` up
to that many times while it raises ``SandboxApiException`` with a 5xx status, and re-raises the last.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from opensandbox.exceptions import SandboxApiException

from sandbox.opensandbox.failures import CREATE_TRIES


async def create_tried(make: Callable[[], Awaitable[Any]]) -> Any:
    """The sandbox ``make()`` returns; a 5xx ``SandboxApiException`` is tried again
    (:data:`CREATE_TRIES` tries in all); any other exception, or the last try's, propagates."""
    for _ in range(CREATE_TRIES - 1):
        try:
            return await make()
        except SandboxApiException as e:
            if (e.status_code or 0) < 500:
                raise
    return await make()
