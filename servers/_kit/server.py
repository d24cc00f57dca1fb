"""The skeleton every built-in server shares: context, FastAPI app, sessions, errors, uvicorn.

- ``GET /`` answers ``{"status": "ok"}`` (readiness: any HTTP answer, docs/architecture.md §7).
- Session: a cookie ``gym_session_<instance>`` holding a random id, set when absent and readable
  as ``request.state.session_id`` (Gym keeps one per caller in a signed cookie; agents carry all
  cookies along, so any name works across implementations).
- JSON answers are :class:`TextJSONResponse`: strings that are no text are made text (``_kit/text.py``).
- Errors: an :class:`~_kit.peers.UpstreamError` becomes ``{"error": {"type": <its kind>, ...}}``
  naming the upstream, with HTTP 502, or the upstream's own 400/413/422 when it refused what the
  row sent (:attr:`~_kit.peers.UpstreamError.answer_status`); a :class:`RowError` (a row this
  server cannot run: its own fields) becomes HTTP 422 ``invalid_request``; any other uncaught
  exception becomes HTTP 500 ``{"error": {...}}`` naming this server.
- :func:`main` turns a :class:`~_kit.config.StartupError` into one line on stderr and exit code 1.
- A request whose client disconnects before its answer is complete is cancelled
  (:class:`~_kit.disconnect.CancelOnDisconnect`).
- NeMo Gym 0.7's rollout prefix ``/ng-rollout/<id>[/training-token-capture]/`` is stripped before
  routing (:mod:`_kit.rollout_path`; ``request.state.rollout_id``, ``request.state.token_capture``).
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from omegaconf import DictConfig
from pydantic import BaseModel, ValidationError

from _kit.config import StartupError, find_instance, instance_name, load_global_config, peer_address, resolved
from _kit.disconnect import CancelOnDisconnect
from _kit.peers import UpstreamError
from _kit.rollout_path import RolloutPathMiddleware
from _kit.text import repaired

ConfigT = TypeVar("ConfigT", bound=BaseModel)


class TextJSONResponse(JSONResponse):
    """Every JSON answer of a built-in server: its strings made text first (``_kit/text.py``), so a
    lone surrogate that got this far is U+FFFD, not a ``UnicodeEncodeError`` and an HTTP 500."""

    def render(self, content: Any) -> bytes:
        return super().render(repaired(content)[0])


@dataclass
class ServerContext:
    """Who this process is: instance ``name``, ``server_type``, ``impl`` and its resolved ``config``."""

    name: str
    server_type: str
    impl: str
    config: dict[str, Any]
    global_config: DictConfig

    def parse(self, model: type[ConfigT]) -> ConfigT:
        """Validate ``config`` with ``model``; a failure is a :class:`StartupError` listing each key."""
        try:
            return model.model_validate(self.config)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}" for err in exc.errors()
            )
            raise StartupError(
                f"invalid config for '{self.name}' ({self.server_type}/{self.impl}): {problems}"
            ) from exc

    def peer(self, ref: Any, server_type: str) -> str:
        """Base URL of the instance a reference ``{type, name}`` points to (checked against ``server_type``)."""
        name = ref.get("name") if isinstance(ref, dict) else getattr(ref, "name", None)
        kind = ref.get("type") if isinstance(ref, dict) else getattr(ref, "type", None)
        if kind != server_type or not name:
            raise StartupError(f"'{self.name}': expected a reference {{type: {server_type}, name: ...}}, got {ref!r}")
        try:
            return peer_address(self.global_config, name, server_type)
        except StartupError as exc:
            raise StartupError(f"'{self.name}' references {server_type} '{name}': {exc}") from exc


def load_context(server_type: str) -> ServerContext:
    """Read this process's identity and config from the environment (docs/architecture.md §7)."""
    global_config = load_global_config()
    name = instance_name()
    kind, impl, _ = find_instance(global_config, name)
    if kind != server_type:
        raise StartupError(f"'{name}' is configured as {kind}, but this entrypoint serves {server_type}")
    return ServerContext(name, kind, impl, resolved(global_config, name), global_config)


class RowError(Exception):
    """A row this server cannot run for what the row itself holds (a missing or malformed field, an
    environment it names that this server does not have): answered 422 ``invalid_request``, the
    row's data, which a trainer does not retry as infrastructure (docs/rollouts.md, "Failure classes")."""


def error_body(kind: str, message: str, **extra: Any) -> dict:
    """The JSON error shape of the built-in servers: ``{"error": {"type", "message", ...}}``."""
    return {"error": {"type": kind, "message": message, **extra}}


def build_app(ctx: ServerContext, title: str, sessions: bool = True) -> FastAPI:
    """A FastAPI app with liveness, the session cookie (unless ``sessions`` is False: a relay sets
    no cookie of its own) and the error mapping installed."""
    app = FastAPI(title=f"{title} ({ctx.name})", default_response_class=TextJSONResponse)
    cookie = f"gym_session_{ctx.name}"

    @app.middleware("http")
    async def session(request: Request, call_next):
        session_id = request.cookies.get(cookie) or uuid.uuid4().hex
        request.state.session_id = session_id
        try:
            response = await call_next(request)
        except RowError as exc:
            response = TextJSONResponse(status_code=422, content=error_body("invalid_request", f"{ctx.name}: {exc}"))
        except UpstreamError as exc:
            response = TextJSONResponse(
                status_code=exc.answer_status, content=error_body(exc.kind, str(exc), **exc.details())
            )
        except Exception as exc:  # noqa: BLE001 - every failure must answer, naming this server
            message = f"{ctx.name} ({ctx.server_type}/{ctx.impl}) failed: {type(exc).__name__}: {exc}"
            print(message, file=sys.stderr, flush=True)
            response = TextJSONResponse(status_code=500, content=error_body("server_error", message, server=ctx.name))
        if sessions and request.cookies.get(cookie) != session_id:
            response.set_cookie(cookie, session_id, httponly=True)
        return response

    @app.get("/")
    async def liveness() -> dict:
        return {"status": "ok"}

    return app


def serve(app: FastAPI, ctx: ServerContext) -> None:
    """Run ``app`` with uvicorn on this instance's ``host``/``port`` (Gym's uvicorn settings)."""
    port = ctx.config.get("port")
    if port is None:
        raise StartupError(f"'{ctx.name}' has no port assigned")
    uvicorn.run(
        RolloutPathMiddleware(CancelOnDisconnect(app)),
        host=ctx.config.get("host") or "127.0.0.1",
        port=int(port),
        log_level="warning",
        timeout_graceful_shutdown=0.5,
        timeout_keep_alive=30,
    )


def run_server(server_type: str, create_app: Callable[[ServerContext], FastAPI]) -> None:
    """A server's ``__main__``: load this instance's config (Gym's process contract), build the app
    with ``create_app(ctx)`` and serve it. A :class:`StartupError` prints ``error: [<instance>]
    <message>`` to stderr and exits 1, without a traceback."""
    try:
        ctx = load_context(server_type)
        serve(create_app(ctx), ctx)
    except StartupError as exc:
        name = _safe_name()
        print(f"error: [{name}] {exc}", file=sys.stderr, flush=True)
        sys.exit(1)


def _safe_name() -> str:
    try:
        return instance_name()
    except StartupError:
        return "unnamed server"
