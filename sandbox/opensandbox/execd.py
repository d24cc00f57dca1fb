"""The command API of execd, the agent in every sandbox, as this runtime needs it, checked once per
run (docs/runtime.md, "Sandbox backends").

The runtime starts and watches servers through execd's command API as opensandbox 1.1.x has it
(the SDK 1.1.1's calls): ``POST /command`` (a background command), ``GET /command/status/{id}``,
``GET /command/{id}/logs``. An execd of another version may refuse them: OpenSandbox 1.3 makes
execd the sandbox's PID 1, asks for an ``X-EXECD-ACCESS-TOKEN`` (HMAC) on Kubernetes and removed
routes. :func:`check` runs one background command in the run's first sandbox and reads its status
and log before any server starts, so such an execd stops the start with one ``GR-OSB-EXECD``
block (exit 3) naming the sandbox, the OpenSandbox server's version, the route refused, its
status and execd's own words, instead of every server failing its start.
"""

from __future__ import annotations

from typing import Any

from gym_runtime.errors import SandboxServiceError

from .failures import translate
from .service import SandboxService

SUPPORTED = "1.1.x"  # the opensandbox releases whose execd command API the runtime speaks
PROBE = ["/bin/sh", "-c", ":"]  # the sandbox image has /bin/sh (docs/runtime.md)
WORDS_MAX = 300


def refused(exc: BaseException) -> bool:
    """Whether ``exc`` (an SDK exception) is execd refusing a request: an HTTP 4xx or 501 answer."""
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and (400 <= status < 500 or status == 501)


def execd_words(exc: BaseException) -> str:
    """What execd said (its error body ``{"code", "message"}`` as ``[code] message``, else the raw
    body, else the SDK's message), at most :data:`WORDS_MAX` characters."""
    err = getattr(exc, "error", None)
    message, code = getattr(err, "message", None), getattr(err, "code", None)
    if message:
        words = f"[{code}] {message}" if code else message
    else:
        body = getattr(exc, "response_body", None) or b""
        words = body.decode("utf-8", "replace").strip() or str(exc)
    return words[:WORDS_MAX]


def refusal(
    service: SandboxService, sandbox: str, server: str, version: str | None, route: str, status: int, words: str
) -> SandboxServiceError:
    """``GR-OSB-EXECD``: execd in ``sandbox`` (made for server instance ``server``) answered
    ``route`` with HTTP ``status`` and ``words``; ``version``: what the OpenSandbox server says
    it is (None: it does not say)."""
    url = service.conn.url
    told = f"version {version}" if version else "version unknown (it answers neither /version nor /health with one)"
    return SandboxServiceError(
        f"execd in sandbox {sandbox} (server {server!r}) on the OpenSandbox server {url} ({told}) "
        f"refused {route}: HTTP {status}",
        code="GR-OSB-EXECD",
        cause=f"execd said: {words}",
        hint=f"its execd speaks another command API than opensandbox {SUPPORTED}'s, the one gym-runtime "
        f"speaks: run an OpenSandbox server of the {SUPPORTED} line (its execd image, [runtime] execd_image, "
        "of the same release; OpenSandbox 1.3 changed execd: PID 1, X-EXECD-ACCESS-TOKEN, removed "
        "routes), or use --sandbox-backend local",
    )


async def check(service: SandboxService, box: Any, server: str) -> None:
    """Run :data:`PROBE` in the background in ``box`` (the SDK's ``Sandbox``, made for server
    instance ``server``) and read its status and log. Raises ``GR-OSB-EXECD`` (:func:`refusal`)
    when execd refuses a route or its answer carries no command id, other ``GR-OSB-*`` errors
    (:func:`~.failures.translate`) for any other failure."""
    from opensandbox.models.execd import RunCommandOpts

    route = "POST /command"
    try:
        run = await box.commands.run(PROBE, opts=RunCommandOpts(background=True, working_directory="/"))
        if not run.id:
            raise await _refusal(service, box, server, route, 200, "its answer held no command id")
        route = f"GET /command/status/{run.id}"
        await box.commands.get_command_status(run.id)
        route = f"GET /command/{run.id}/logs"
        await box.commands.get_background_command_logs(run.id, 0)
    except SandboxServiceError:
        raise
    except Exception as e:
        if refused(e):
            status = int(getattr(e, "status_code", 0))
            raise await _refusal(service, box, server, route, status, execd_words(e)) from None
        raise translate(e, service.conn, f"checking execd's command API ({route})", box.id) from None


async def _refusal(
    service: SandboxService, box: Any, server: str, route: str, status: int, words: str
) -> SandboxServiceError:
    return refusal(service, box.id, server, await service.told_version(), route, status, words)
