"""The task-sandbox service's HTTP API, which the ``gym_runtime`` provider in each server venv speaks.

Every request carries ``Authorization: Bearer <token>`` (the server's own, from its environment)
and, for a sandbox lent by another server, ``X-Sandbox-Lease: <lease>``. Answers are JSON; an
error is ``{"error": {"code", "message", "hint"?}}`` with the status of its
:class:`~gym_runtime.task_sandboxes.service.TaskSandboxError`.

==========================================  ===============================================
``POST /v1/sandboxes``                      body: a ``SandboxSpec`` mapping -> 201 the sandbox
                                            (``sandbox_id``, ``lease``, ``workdir``, ``limits``, ...)
``GET /v1/sandboxes/{id}``                  the sandbox (``status``: ``running`` / ``stopped``)
``POST /v1/sandboxes/{id}/exec``            ``{command, cwd?, env?, timeout_s?, user?}`` -> ``{stdout,
                                            stderr, return_code, error_type}`` (NeMo Gym 0.7.0
                                            ``SandboxExecResult``: a timeout is code 125 ``timeout``, a
                                            command that could not start 125 ``sandbox``)
``PUT /v1/sandboxes/{id}/files?path=P``     the body becomes file P (parents made) -> 204
``GET /v1/sandboxes/{id}/files?path=P``     file P's bytes (404 ``GR-SANDBOX-TASK-FILE`` when absent)
``GET /v1/sandboxes/{id}/endpoints/{port}`` ``{"endpoint": URL, "headers": {}}``: a forward servers reach to
                                            a port the spec declared (``SupportsSandboxEndpoint``)
``DELETE /v1/sandboxes/{id}``               ends it -> 204 (also when already gone)
``GET /v1/health``                          ``{"level", "live", "created"}``
==========================================  ===============================================
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route

from gym_runtime.serving import LoopbackListener
from gym_runtime.task_sandboxes.service import TaskSandboxError, TaskSandboxService
from gym_runtime.task_sandboxes.spec import MAX_ENV_BYTES
from gym_runtime.web import InvalidRequest, PydanticJSONResponse, query_value, validated

DEFAULT_TIMEOUT_S = 180.0
MAX_TIMEOUT_S = 24 * 3600.0
MAX_UPLOAD = 4 << 30
RUNTIME_CODE = 125  # NeMo Gym's non-process exit code (its providers' SANDBOX_RUNTIME_RETURN_CODE)
MAX_COMMAND = 256 << 10  # with a box's env (spec.py) and the exec's own, one joiner request stays under 1 MiB
TEXT: TypeAdapter[str] = TypeAdapter(str)
INT: TypeAdapter[int] = TypeAdapter(int)


async def _error(_: Request, e: Exception) -> Response:
    assert isinstance(e, TaskSandboxError)
    return JSONResponse(e.to_dict(), status_code=e.status)


async def _not_served(_: Request, e: Exception) -> Response:
    """A route or method the API does not have: ``{"detail": "Not Found"}`` (or ``"Method Not
    Allowed"``, with ``Allow``)."""
    assert isinstance(e, HTTPException)
    return JSONResponse({"detail": e.detail}, status_code=e.status_code, headers=e.headers)


async def _invalid(_: Request, e: Exception) -> Response:
    """A missing ``path`` query parameter or a ``port`` that is no integer: 422 ``{"detail": [pydantic's
    errors]}``."""
    assert isinstance(e, InvalidRequest)
    return JSONResponse({"detail": e.jsonable()}, status_code=422)


def create_app(service: TaskSandboxService) -> Starlette:
    """The API over ``service`` (module doc)."""

    def caller(request: Request) -> str:
        auth = request.headers.get("authorization", "")
        return service.owner_of(auth[7:] if auth.lower().startswith("bearer ") else None)

    def box(request: Request, box_id: str) -> Any:
        return service.record(box_id, caller(request), request.headers.get("x-sandbox-lease"))

    async def health(request: Request) -> Response:
        caller(request)
        return PydanticJSONResponse({"level": service.level, "live": len(service.boxes), "created": service.created})

    async def create(request: Request) -> Response:
        owner = caller(request)
        spec = await _json(request)
        rec = await service.create(owner, spec)
        return PydanticJSONResponse({**rec.describe(), "lease": rec.lease}, status_code=201)

    async def status(request: Request) -> Response:
        return PydanticJSONResponse(box(request, request.path_params["box_id"]).describe())

    async def run(request: Request) -> Response:
        box_id = request.path_params["box_id"]
        rec = box(request, box_id)
        body = await _json(request)
        command = body.get("command")
        if not isinstance(command, str) or len(command) > MAX_COMMAND:
            raise TaskSandboxError(
                "GR-SANDBOX-TASK-SPEC",
                f"exec needs a string `command` of at most {MAX_COMMAND} characters (upload a longer script as a file)",
                400,
            )
        if body.get("user") not in (None, "root", 0, "0"):
            raise TaskSandboxError(
                "GR-SANDBOX-TASK-SPEC",
                f"task sandboxes run commands as root only (one uid is mapped into a box), not as {body['user']!r}",
                400,
            )
        env = body.get("env") or {}
        if (
            not isinstance(env, dict)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
            or sum(len(k) + len(v) for k, v in env.items()) > MAX_ENV_BYTES
        ):
            raise TaskSandboxError(
                "GR-SANDBOX-TASK-SPEC",
                f"exec `env` must map names to strings, at most {MAX_ENV_BYTES} bytes in all",
                400,
            )
        timeout = body.get("timeout_s")
        timeout = DEFAULT_TIMEOUT_S if timeout is None else min(max(float(timeout), 0.001), MAX_TIMEOUT_S)
        from sandbox.joiner import RequestTooLarge
        from sandbox.taskbox import BoxError

        try:
            out = await rec.box.exec([rec.shell, "-c", command], env, body.get("cwd"), timeout)
        except RequestTooLarge as e:
            raise TaskSandboxError("GR-SANDBOX-TASK-SPEC", f"exec in task sandbox {box_id!r}: {e}", 413) from None
        except BoxError as e:
            raise TaskSandboxError("GR-SANDBOX-TASK-UNKNOWN", f"task sandbox {box_id!r} ended: {e}", 404) from None
        stdout, stderr = out.stdout.decode(errors="replace"), out.stderr.decode(errors="replace")
        if out.truncated:
            stderr += "\n[gym-runtime: output over 16 MiB was dropped]"
        if out.timed_out:
            return PydanticJSONResponse(
                {
                    "stdout": stdout,
                    "stderr": (stderr + f"\ncommand timed out after {timeout:g}s").lstrip("\n"),
                    "return_code": RUNTIME_CODE,
                    "error_type": "timeout",
                }
            )
        if out.returncode is None:
            return PydanticJSONResponse(
                {"stdout": None, "stderr": out.error, "return_code": RUNTIME_CODE, "error_type": "sandbox"}
            )
        return PydanticJSONResponse(
            {"stdout": stdout, "stderr": stderr, "return_code": out.returncode, "error_type": None}
        )

    async def upload(request: Request) -> Response:
        box_id, path = request.path_params["box_id"], query_value(request, "path", TEXT)
        rec = box(request, box_id)
        with _temp(service.work_dir) as tmp:
            size = 0
            with open(tmp, "wb") as f:
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > MAX_UPLOAD:
                        raise TaskSandboxError("GR-SANDBOX-TASK-SPEC", f"upload to {path!r} is over 4 GiB", 413)
                    f.write(chunk)
            await _file_op(rec.box.put(tmp, path), box_id, path)
        return Response(status_code=204)

    async def download(request: Request) -> Response:
        box_id, path = request.path_params["box_id"], query_value(request, "path", TEXT)
        rec = box(request, box_id)
        fd, name = tempfile.mkstemp(prefix=".download-", dir=service.work_dir)
        os.close(fd)
        tmp = Path(name)
        try:
            await _file_op(rec.box.get(path, tmp), box_id, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return FileResponse(tmp, media_type="application/octet-stream", background=BackgroundTask(tmp.unlink))

    async def endpoint(request: Request) -> Response:
        port = validated(INT, request.path_params["port"], "path", "port")
        rec = box(request, request.path_params["box_id"])
        return PydanticJSONResponse({"endpoint": await service.endpoint(rec, port), "headers": {}})

    async def close(request: Request) -> Response:
        box_id = request.path_params["box_id"]
        try:
            rec = box(request, box_id)
        except TaskSandboxError as e:
            if e.status == 404:
                return Response(status_code=204)
            raise
        await service.close(rec.id, f"closed by server {caller(request)}")
        return Response(status_code=204)

    routes = [
        Route("/v1/health", health),
        Route("/v1/sandboxes", create, methods=["POST"]),
        Route("/v1/sandboxes/{box_id}", status),
        Route("/v1/sandboxes/{box_id}/exec", run, methods=["POST"]),
        Route("/v1/sandboxes/{box_id}/files", upload, methods=["PUT"]),
        Route("/v1/sandboxes/{box_id}/files", download),
        Route("/v1/sandboxes/{box_id}/endpoints/{port}", endpoint),
        Route("/v1/sandboxes/{box_id}", close, methods=["DELETE"]),
    ]
    for route in routes:  # a route answers its own methods only: HEAD is 405 like any other
        assert route.methods is not None
        route.methods.discard("HEAD")
    return Starlette(
        routes=routes,
        exception_handlers={TaskSandboxError: _error, HTTPException: _not_served, InvalidRequest: _invalid},
    )


async def _json(request: Request) -> dict:
    try:
        body = await request.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise TaskSandboxError("GR-SANDBOX-TASK-SPEC", "the request body must be a JSON object", 400)
    return body


async def _file_op(coro, box_id: str, path: str) -> None:
    from sandbox.taskbox import BoxError

    try:
        await coro
    except BoxError as e:
        raise TaskSandboxError("GR-SANDBOX-TASK-FILE", f"task sandbox {box_id!r}, file {path!r}: {e}", 404) from None


@contextlib.contextmanager
def _temp(base: Path) -> Iterator[Path]:
    base.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=".upload-", dir=base)
    os.close(fd)
    try:
        yield Path(name)
    finally:
        Path(name).unlink(missing_ok=True)


class TaskSandboxServer(LoopbackListener):
    """Serves :func:`create_app` on the daemon's loop, on a socket bound to loopback (``url``)."""

    def __init__(self, service: TaskSandboxService, host: str = "127.0.0.1", sock: Any = None) -> None:
        self.service = service
        super().__init__(create_app(service), host, sock=sock, timeout_graceful_shutdown=1)

    async def stop(self, wait_s: float = 3.0) -> None:
        """Close every box, then the listener (idempotent; ``wait_s``: :meth:`LoopServer.stop`'s)."""
        await self.service.close_all()
        await super().stop(wait_s)
