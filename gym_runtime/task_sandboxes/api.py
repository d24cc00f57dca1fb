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

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from starlette.background import BackgroundTask

from gym_runtime.serving import LoopbackListener
from gym_runtime.task_sandboxes.service import TaskSandboxError, TaskSandboxService
from gym_runtime.task_sandboxes.spec import MAX_ENV_BYTES

DEFAULT_TIMEOUT_S = 180.0
MAX_TIMEOUT_S = 24 * 3600.0
MAX_UPLOAD = 4 << 30
RUNTIME_CODE = 125  # NeMo Gym's non-process exit code (its providers' SANDBOX_RUNTIME_RETURN_CODE)
MAX_COMMAND = 256 << 10  # with a box's env (spec.py) and the exec's own, one joiner request stays under 1 MiB


def create_app(service: TaskSandboxService) -> FastAPI:
    """The API over ``service`` (module doc)."""
    app = FastAPI(title="gym-runtime task sandboxes", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(TaskSandboxError)
    async def _error(_: Request, e: TaskSandboxError) -> JSONResponse:
        return JSONResponse(e.to_dict(), status_code=e.status)

    def caller(request: Request) -> str:
        auth = request.headers.get("authorization", "")
        return service.owner_of(auth[7:] if auth.lower().startswith("bearer ") else None)

    def box(request: Request, box_id: str) -> Any:
        return service.record(box_id, caller(request), request.headers.get("x-sandbox-lease"))

    @app.get("/v1/health")
    async def health(request: Request) -> dict:
        caller(request)
        return {"level": service.level, "live": len(service.boxes), "created": service.created}

    @app.post("/v1/sandboxes", status_code=201)
    async def create(request: Request) -> dict:
        owner = caller(request)
        spec = await _json(request)
        rec = await service.create(owner, spec)
        return {**rec.describe(), "lease": rec.lease}

    @app.get("/v1/sandboxes/{box_id}")
    async def status(request: Request, box_id: str) -> dict:
        return box(request, box_id).describe()

    @app.post("/v1/sandboxes/{box_id}/exec")
    async def run(request: Request, box_id: str) -> dict:
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
            return {
                "stdout": stdout,
                "stderr": (stderr + f"\ncommand timed out after {timeout:g}s").lstrip("\n"),
                "return_code": RUNTIME_CODE,
                "error_type": "timeout",
            }
        if out.returncode is None:
            return {"stdout": None, "stderr": out.error, "return_code": RUNTIME_CODE, "error_type": "sandbox"}
        return {"stdout": stdout, "stderr": stderr, "return_code": out.returncode, "error_type": None}

    @app.put("/v1/sandboxes/{box_id}/files", status_code=204)
    async def upload(request: Request, box_id: str, path: str) -> Response:
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

    @app.get("/v1/sandboxes/{box_id}/files")
    async def download(request: Request, box_id: str, path: str) -> Response:
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

    @app.get("/v1/sandboxes/{box_id}/endpoints/{port}")
    async def endpoint(request: Request, box_id: str, port: int) -> dict:
        return {"endpoint": await service.endpoint(box(request, box_id), port), "headers": {}}

    @app.delete("/v1/sandboxes/{box_id}", status_code=204)
    async def close(request: Request, box_id: str) -> Response:
        try:
            rec = box(request, box_id)
        except TaskSandboxError as e:
            if e.status == 404:
                return Response(status_code=204)
            raise
        await service.close(rec.id, f"closed by server {caller(request)}")
        return Response(status_code=204)

    return app


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
