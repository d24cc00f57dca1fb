"""OpenSandbox failures as gym-runtime errors: one block each, naming the sandbox, the server,
what happened and the fix (docs/runtime.md, "Sandbox backends": the table of ``GR-OSB-*`` codes).

:func:`translate` maps an exception of the ``opensandbox`` SDK (1.1.1: ``SandboxApiException``
carries the HTTP status and the server's own error code, e.g. ``VOLUME::HOST_PATH_NOT_ALLOWED``;
``SandboxConnectionException`` / ``SandboxTimeoutException`` a transport failure) to
:class:`~gym_runtime.errors.SandboxServiceError` (exit 3) or
:class:`~gym_runtime.errors.SandboxServiceSettingsError` (exit 1). The server's codes are those
of opensandbox-server 1.1.1 (``opensandbox_server/services/constants.py``).
"""

from __future__ import annotations

from typing import Any

from gym_runtime.errors import GymRuntimeError, SandboxServiceError, SandboxServiceSettingsError

from .connection import OpenSandboxConnection

MOUNT_CODES = ("VOLUME::HOST_PATH_NOT_ALLOWED", "VOLUME::INVALID_HOST_PATH")
IMAGE_CODES = ("DOCKER::SANDBOX_IMAGE_PULL_FAILED",)
QUOTA_CODES = ("KUBERNETES::QUOTA_EXCEEDED",)
CREATE_TRIES = 3  # a server error on create (e.g. the runtime failing to copy execd in under load) is tried again


def server_error_code(answer: Any) -> str:
    """The OpenSandbox server's own error code in HTTP response ``answer`` (its body
    ``{"code", "message"}``), or ``""`` where the body is not such an error."""
    try:
        body = answer.json()
    except ValueError:
        return ""
    code = body.get("code") if isinstance(body, dict) else None
    return code if isinstance(code, str) else ""


def _server_words(exc: BaseException) -> str:
    err = getattr(exc, "error", None)
    words = getattr(err, "message", None) or str(exc)
    code = getattr(err, "code", None)
    return f"[{code}] {words}" if code and code not in words else words


def unreachable(conn: OpenSandboxConnection, what: str, cause: str) -> SandboxServiceError:
    """``GR-OSB-UNREACHABLE``: no answer from the server while doing ``what``."""
    return SandboxServiceError(
        f"the OpenSandbox server {conn.url} did not answer while {what}",
        code="GR-OSB-UNREACHABLE",
        cause=cause,
        hint="start it or point OPENSANDBOX_DOMAIN (host:port) and OPENSANDBOX_PROTOCOL at "
        "it; `gym-runtime doctor` asks it for its version",
    )


def translate(
    exc: BaseException, conn: OpenSandboxConnection, what: str, sandbox: str | None = None
) -> GymRuntimeError:
    """The error for ``exc`` raised while doing ``what`` (e.g. ``"creating the sandbox of server
    'x'"``); ``sandbox``: its id once known. Never includes the API key (the SDK's messages do
    not hold headers)."""
    from opensandbox.exceptions import SandboxApiException, SandboxConnectionException, SandboxTimeoutException

    where = f" (sandbox {sandbox})" if sandbox else ""
    if isinstance(exc, SandboxApiException) and exc.status_code is not None:
        status, code = exc.status_code, getattr(exc.error, "code", "") or ""
        words = _server_words(exc)
        if status == 401 or (status == 403 and code not in QUOTA_CODES):
            return SandboxServiceSettingsError(
                f"the OpenSandbox server {conn.url} refused the API key while {what}",
                code="GR-OSB-AUTH",
                cause=words,
                hint="set OPENSANDBOX_API_KEY to the server's [server] api_key",
            )
        if code in IMAGE_CODES:
            return SandboxServiceSettingsError(
                f"the OpenSandbox server {conn.url} has no image {conn.image!r} while {what}{where}",
                code="GR-OSB-IMAGE",
                cause=words,
                hint="set GYM_RUNTIME_OPENSANDBOX_IMAGE to an image its runtime has "
                "(a Debian-based image with the servers' Python libraries; the "
                "runtime images qualify), or load it there first",
            )
        if status == 400 and "egress" in words and "networkPolicy" in words:
            return SandboxServiceError(
                f"the OpenSandbox server {conn.url} cannot enforce a networkPolicy while {what}",
                code="GR-OSB-EGRESS",
                cause=words,
                hint='configure its egress sidecar ([egress] image, mode "dns+nft"); '
                "only where egress needs no enforcing, set GYM_RUNTIME_OPENSANDBOX_EGRESS="
                "unenforced",
            )
        if code in MOUNT_CODES:
            return SandboxServiceError(
                f"the OpenSandbox server {conn.url} refused a mount while {what}{where}",
                code="GR-OSB-MOUNT",
                cause=words,
                hint="the server bind-mounts only under its [storage] allowed_host_paths: add "
                "the venv and package directories (GYM_RUNTIME_HOME, GYM_RUNTIME_VENV_DIR, the "
                "package) to that list, or run from a directory under it; where sandboxes do not share "
                "this host's disk, use a shared volume instead (GYM_RUNTIME_OPENSANDBOX_VOLUME)",
            )
        if status in (403, 429) or code in QUOTA_CODES:
            return SandboxServiceError(
                f"the OpenSandbox server {conn.url} refused a sandbox for want of capacity while {what}",
                code="GR-OSB-QUOTA",
                cause=words,
                hint="free sandboxes on it (its quota or pool is full) or raise its quota, then start again",
            )
        if status == 404:
            return SandboxServiceError(
                f"the sandbox{where} is gone from the OpenSandbox server {conn.url} while {what}",
                code="GR-OSB-SANDBOX-GONE",
                cause=words,
                hint="something deleted it from outside (or its TTL ran out while the daemon was stopped); start again",
            )
        return SandboxServiceError(
            f"the OpenSandbox server {conn.url} failed while {what}{where} (HTTP {status})",
            code="GR-OSB-SERVER",
            cause=words,
            hint="its own log says more; start again once it is healthy",
        )
    if isinstance(exc, (SandboxConnectionException, SandboxTimeoutException, OSError, TimeoutError)):
        return unreachable(conn, what, _server_words(exc))
    return SandboxServiceError(
        f"the OpenSandbox server {conn.url} failed while {what}{where}",
        code="GR-OSB-SERVER",
        cause=_server_words(exc),
        hint="its own log says more; start again once it is healthy",
    )
