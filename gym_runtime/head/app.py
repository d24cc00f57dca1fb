"""The head server (Starlette, served inside the daemon's event loop): Gym's head endpoints plus ours.

Endpoints (docs/architecture.md §7; Gym's originals: NeMo Gym 0.4.0 ``nemo_gym/server_utils.py`` ``HeadServer``):

=================================  ========================================================================
``GET /``                          ``{"status": "ok"}`` (liveness)
``GET /global_config_dict_yaml``   JSON *string* holding the merged YAML as seen from the host (every
                                   instance's reachable host/port, ``head_server``), secrets masked;
                                   503 ``GR-HEAD-STARTING`` until the servers have their addresses
``GET /server_instances``          the Gym server instances with Gym's keys (``process_name``,
                                   ``server_type``, ``name`` = implementation, ``dir_path``, ``entrypoint``,
                                   ``host``, ``port``, ``url``, ``pid``, ``config_path``, ``start_time``,
                                   ``status``, ``uptime_seconds``) and ours (``state``, ``restarts``...):
                                   :mod:`gym_runtime.head.instances`; during start-up also the servers
                                   still building their venv (``state``: the build's state)
``GET /support_processes``         processes that are not Gym servers (stub model, Ray head)
``GET /health``                    200 ``{"status": "ready"}`` (``"ok"`` under NeMo Gym 0.7) or 503
                                   ``{"status": "starting"|"failed", ...}``
``GET /readyz``, ``/healthz``      the same as ``/health``, where the Gym release line's head has them
                                   (0.7: ``nemo_gym/server_utils.py`` ``HeadServer``)
``GET /livez``                     ``{"status": "ok"}`` whenever the head serves (0.7 line)
``GET /servers/{name}/logs``       ``?tail=N`` (default 100): ``{"name", "log_file", "lines"}``; 404
                                   ``GR-HEAD-UNKNOWN-SERVER`` for a name that is no instance
``GET /processes``                 every process of the environment by role and size:
                                   ``{"processes": [rows], "by_role": {role: totals}}``
                                   (:mod:`gym_runtime.supervise.processes`)
``POST /rollouts/run``             ``{"examples": [rows], "concurrency"?}`` -> ``{"results": [...],
                                   "latency_s": [...], "replica": [...], "summary": {...}}`` (see below)
``GET /docs``, ``/openapi.json``   OpenAPI UI and document (:mod:`gym_runtime.head.openapi`)
=================================  ========================================================================

Servers reach the head server on a listener of their own (``servers_ports``): it answers Gym's
read-only routes (:data:`SERVERS_ROUTES`), which Gym's servers and clients use, and refuses the
others with 403 ``{"error": {"code": "GR-HEAD-SERVERS-ROUTE"}}``: a server may not read another
server's logs nor run rollouts (docs/reliability.md, "Hostile servers"). At isolation ``none``
servers share the host's loopback, so this is cooperative only.

Every error answer is our envelope ``{"error": {"code", "message", "hint"?}}``, never a bare
``{"detail"}``: ``/rollouts/run`` answers a body that is not ``{"examples": [rows]}`` with 400
``GR-ROLLOUT-BAD-REQUEST``, other bad query parameters get 422 ``GR-HEAD-BAD-REQUEST``. It sends each
row to its ``agent_ref`` agent's ``/run`` (at most ``concurrency`` rows at once: the body's, 1 to
:data:`MAX_CONCURRENCY`, else the daemon's ``--max-concurrent-rollouts``; results in row order, per-row
``{"error": {"code", "message", "status"}}`` (:mod:`gym_runtime.rollouts.failure_class`), each row's wall time in ``latency_s`` and the agent replica
that served it in ``replica``, a batch deadline: the body's ``deadline_s``, else the daemon's
``--rollout-deadline``; ``summary``: :func:`batch_summary`) and,
while the batch runs, streams one space every ``heartbeat_s`` (15 s) before the JSON body so a proxy
never drops the request (leading whitespace is valid JSON). In host mode (``keyed_rows``,
``rollouts_refused``) batches are refused until the environment is ready and the answer is joined
on ``_rowidx`` (:mod:`gym_runtime.host.rows`, docs/runtime.md "Host mode"). When the daemon shuts down while a batch
runs (:func:`begin_close`), the batch is cancelled and the answer (already ``200``) ends with
``{"results": [...], "error": {"code": "GR-ROLLOUT-SHUTDOWN", "message"}}``: the rows already
finished with their results, every other row with the row error ``GR-ROLLOUT-SHUTDOWN``. When the
client disconnects, the batch is cancelled at once: every row still running is cancelled and its
connection to the agent closed (the built-in agents then cancel their own work,
``servers/_kit/server.py``).

The module is long because it is the head server's whole HTTP contract: every route, its
statuses and its errors in one app.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, Field, TypeAdapter, field_validator
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from gym_runtime.head import openapi
from gym_runtime.head.instances import split
from gym_runtime.host.rows import keyed_answer, row_keys
from gym_runtime.rollouts.dispatch import Batch, row_error, run_rows
from gym_runtime.rollouts.routing import Routing
from gym_runtime.rollouts.spread import ROLLOUTS_PER_AGENT_REPLICA, replica_counts
from gym_runtime.rollouts.verdict import AgentFacts
from gym_runtime.web import InvalidRequest, PydanticJSONResponse, json_body, query_value, validated


@dataclass(frozen=True)
class HeadBackend:
    """What the head server reads (all callables, evaluated per request, on the daemon's loop).

    ``config_yaml() -> str | None`` (masked; None while starting); ``instances() -> list[dict]`` (every member's snapshot,
    servers and support processes); ``health() -> (status, body)``; ``logs(name, n) -> dict | None``;
    ``agents() -> {instance: base url | None}``: the servers rows may go to (agents, and environment servers
    where the Gym release line has them; None: configured, no address now); ``routing() -> Routing | None``: where each row goes
    (:mod:`gym_runtime.rollouts.routing`; None: to the agent its ``agent_ref`` names); ``agent_facts() -> {agent instance: AgentFacts}``
    (resources server names for bad-reward errors); ``agent_replicas() -> {agent instance: {replica:
    node}}`` (which replicas may serve its rows, :mod:`gym_runtime.rollouts.spread`);
    ``rollout_concurrency() -> int``: rollouts in flight per batch unless the body says
    (``--max-concurrent-rollouts``); ``rollout_deadline_s``: a batch's deadline unless the body says
    (seconds); ``heartbeat_s``: seconds between the spaces a running batch writes;
    ``rollouts_refused() -> (status, error envelope) | None``: why no batch is taken now (host mode
    while the environment starts or after it failed); ``keyed_rows``: answer with the rows joined on
    ``_rowidx`` (:mod:`gym_runtime.host.rows`, host mode);
    ``processes() -> dict`` (blocking: run in a thread), None when not served;
    ``liveness_routes`` / ``readiness_routes``: the probe routes of the Gym release line's head
    server (``GymRelease.head_liveness_routes``, ``head_readiness_routes``): the first answer
    ``{"status": "ok"}``, the second what ``health()`` answers.
    """

    config_yaml: Callable[[], str | None]
    instances: Callable[[], list[dict[str, Any]]]
    health: Callable[[], tuple[int, dict[str, Any]]]
    logs: Callable[[str, int], dict[str, Any] | None]
    agents: Callable[[], Mapping[str, str | None]]
    agent_facts: Callable[[], Mapping[str, AgentFacts]] = dict
    routing: Callable[[], Routing | None] = lambda: None
    agent_replicas: Callable[[], Mapping[str, Mapping[str, str | None]]] = dict
    rollout_concurrency: Callable[[], int] = lambda: ROLLOUTS_PER_AGENT_REPLICA
    rollout_deadline_s: float | None = 3600.0
    heartbeat_s: float = 15.0
    rollouts_refused: Callable[[], tuple[int, dict[str, Any]] | None] = lambda: None
    keyed_rows: bool = False
    processes: Callable[[], dict[str, Any]] | None = None
    liveness_routes: tuple[str, ...] = ()
    readiness_routes: tuple[str, ...] = ("/health",)


MAX_CONCURRENCY = 1024
MAX_DEADLINE_S = 7 * 24 * 3600.0


class RolloutBatch(BaseModel):
    """Body of ``POST /rollouts/run``: dataset rows (docs/architecture.md §9), each with an
    ``agent_ref``; ``concurrency``: rollouts in flight for this batch (default: the daemon's);
    ``deadline_s``: seconds after which rows still running are cancelled (default: the daemon's)."""

    examples: list[dict[str, Any]]
    concurrency: int | None = Field(None, ge=1, le=MAX_CONCURRENCY)
    deadline_s: float | None = Field(None, gt=0, le=MAX_DEADLINE_S)

    @field_validator("examples")
    @classmethod
    def _sendable(cls, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """What no agent could be sent: NaN and Infinity (Python's parser accepts them, JSON has no
        spelling for them) and a lone UTF-16 surrogate such as ``"\\ud800"`` (not text)."""
        stack: list[tuple[str, Any]] = [(f"examples[{i}]", row) for i, row in enumerate(rows)]
        while stack:
            where, value = stack.pop()
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{where} is {value}, which JSON cannot carry")
            for text in [value] if isinstance(value, str) else value if isinstance(value, dict) else []:
                if isinstance(text, str) and not text.isascii():
                    try:
                        text.encode()
                    except UnicodeEncodeError:
                        raise ValueError(f"{where} holds a lone UTF-16 surrogate, which is not text") from None
            if isinstance(value, dict):
                stack += [(f"{where}.{k}", v) for k, v in value.items()]
            elif isinstance(value, list):
                stack += [(f"{where}[{i}]", v) for i, v in enumerate(value)]
        return rows


BATCH: TypeAdapter[RolloutBatch] = TypeAdapter(RolloutBatch)
TAIL: TypeAdapter[int] = TypeAdapter(Annotated[int, Field(ge=0, le=100_000)])


def bad_batch_message(exc: InvalidRequest) -> str:
    """One sentence naming the expected body and what was wrong (pydantic's locations and messages)."""
    problems = "; ".join(
        f"{'.'.join(str(p) for p in e.get('loc', ()) if p != 'body') or 'body'}: {e.get('msg')}" for e in exc.errors[:5]
    )
    return (
        'expected a JSON object {"examples": [rows]} (a list of dataset rows, each a JSON object with an '
        f"agent_ref): {problems}"
    )


def error_response(status: int, code: str, message: str, hint: str | None = None) -> JSONResponse:
    """Our error envelope ``{"error": {"code", "message", "hint"?}}`` with HTTP ``status``."""
    return JSONResponse(
        {"error": {"code": code, "message": message, **({"hint": hint} if hint else {})}}, status_code=status
    )


def shutdown_body(results: list[dict[str, Any] | None]) -> bytes:
    """The JSON body of a ``/rollouts/run`` answer cut short by the daemon's shutdown: the rows
    already finished keep their results, every other row gets the row error ``GR-ROLLOUT-SHUTDOWN``,
    and a top-level ``error`` says how many of each."""
    n, done = len(results), sum(r is not None for r in results)
    cut = row_error(
        "GR-ROLLOUT-SHUTDOWN", "the daemon shut down before this row finished; send it again to a running daemon"
    )
    message = (
        f"the daemon is shutting down: {done} of {n} row(s) finished before it (their results are "
        f"included); the other {n - done} row(s) were cancelled and end with GR-ROLLOUT-SHUTDOWN"
    )
    return json.dumps(
        {
            "results": [r if r is not None else cut for r in results],
            "error": {"code": "GR-ROLLOUT-SHUTDOWN", "message": message},
        }
    ).encode()


def strict_json(answer: dict[str, Any]) -> bytes:
    """``answer`` as JSON that every parser reads: an agent's NaN or Infinity (Python's parser takes
    them, JSON has no spelling for them) becomes null. A reward of that kind never gets here: it
    is the row error ``GR-ROLLOUT-BAD-REWARD`` (docs/rollouts.md)."""
    try:
        return json.dumps(answer, allow_nan=False).encode()
    except ValueError:
        pass
    root = [answer]
    stack: list[tuple[Any, Any]] = [(root, 0)]
    while stack:
        parent, key = stack.pop()
        value = parent[key]
        if isinstance(value, float) and not math.isfinite(value):
            parent[key] = None
        elif isinstance(value, dict):
            stack += [(value, k) for k in value]
        elif isinstance(value, list):
            stack += [(value, i) for i in range(len(value))]
    return json.dumps(root[0], allow_nan=False).encode()


def batch_summary(
    batch: Batch, concurrency: int, agent_replicas: Mapping[str, Mapping[str, str | None]]
) -> dict[str, Any]:
    """The ``summary`` of a ``/rollouts/run`` answer: ``rollouts``, ``failed``, ``wall_s`` (the
    batch's wall time), ``rollouts_per_s`` (rows / wall second), ``concurrency`` (the bound it ran
    with) and ``replicas``, the per-replica counts of :func:`gym_runtime.rollouts.spread.replica_counts`."""
    failed = ["error" in r for r in batch.results]
    n = len(batch.results)
    return {
        "rollouts": n,
        "failed": sum(failed),
        "wall_s": batch.wall_s,
        "rollouts_per_s": round(n / batch.wall_s, 3) if batch.wall_s > 0 and n else None,
        "concurrency": concurrency,
        "replicas": replica_counts(
            zip(batch.agents, batch.replicas, failed, strict=True), agent_replicas, batch.wall_s
        ),
    }


def begin_close(app: Starlette) -> None:
    """Tell running ``/rollouts/run`` batches that the daemon is shutting down (they end at once
    with :func:`shutdown_body`); :func:`open_batches` then falls to 0."""
    app.state.closing.set()


def open_batches(app: Starlette) -> int:
    """How many ``/rollouts/run`` answers are still streaming."""
    return app.state.open_batches


SERVERS_ROUTES = frozenset({"/", "/global_config_dict_yaml", "/server_instances", "/support_processes", "/health"})


class ServersListener:
    """ASGI middleware: a request that arrived on one of ``ports`` (the servers' listener) and is
    not a ``GET`` of ``routes`` (:data:`SERVERS_ROUTES` and the release line's probe routes) gets
    403 ``GR-HEAD-SERVERS-ROUTE`` (plain ASGI, so streamed answers and client disconnects pass
    through untouched)."""

    def __init__(self, app: Callable[..., Any], ports: frozenset[int], routes: frozenset[str] = SERVERS_ROUTES) -> None:
        self.app, self.ports, self.routes = app, ports, routes

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        local = scope.get("server") or (None, None)
        if (
            scope["type"] == "http"
            and local[1] in self.ports
            and (scope["method"] != "GET" or scope["path"] not in self.routes)
        ):
            refusal = JSONResponse(
                {
                    "error": {
                        "code": "GR-HEAD-SERVERS-ROUTE",
                        "message": (
                            f"{scope['method']} {scope['path']} is not served to the environment's servers: they may read "
                            f"{', '.join(sorted(self.routes))} only"
                        ),
                    }
                },
                status_code=403,
            )
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)


def create_app(backend: HeadBackend, servers_ports: set[int] | frozenset[int] = frozenset()) -> Starlette:
    """The head server's Starlette app over ``backend``; requests arriving on a port of
    ``servers_ports`` (the servers' listener) may only ``GET`` :data:`SERVERS_ROUTES`."""

    async def unreadable_body(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if request.url.path == "/rollouts/run" and exc.status_code == 400:  # e.g. a body that is not UTF-8 JSON
            return error_response(
                400,
                "GR-ROLLOUT-BAD-REQUEST",
                f'expected a JSON object {{"examples": [rows]}}: the body cannot be read as JSON ({exc.detail})',
            )
        code = {404: "GR-HEAD-NOT-FOUND", 405: "GR-HEAD-METHOD"}.get(exc.status_code, "GR-HEAD-BAD-REQUEST")
        return error_response(
            exc.status_code,
            code,
            f"{request.method} {request.url.path}: {exc.detail}",
            "GET /docs lists the head server's routes" if exc.status_code in (404, 405) else None,
        )

    async def bad_request(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, InvalidRequest)
        if request.url.path != "/rollouts/run":
            problems = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in exc.errors)
            return error_response(422, "GR-HEAD-BAD-REQUEST", f"bad request to {request.url.path}: {problems}")
        return error_response(400, "GR-ROLLOUT-BAD-REQUEST", bad_batch_message(exc))

    async def root(request: Request) -> Response:
        return PydanticJSONResponse({"status": "ok"})

    async def global_config_dict_yaml(request: Request) -> Response:
        text = backend.config_yaml()
        if text is None:
            return error_response(
                503,
                "GR-HEAD-STARTING",
                "the environment is still starting: the servers have no addresses yet",
                "poll GET /health until it answers 200 (status ready)",
            )
        return PydanticJSONResponse(text)  # a JSON string: NeMo Gym's ServerClient reads it so

    async def server_instances(request: Request) -> Response:
        return PydanticJSONResponse(split(backend.instances())[0])

    async def support_processes(request: Request) -> Response:
        return PydanticJSONResponse(split(backend.instances())[1])

    async def liveness(request: Request) -> Response:
        return PydanticJSONResponse({"status": "ok"})

    async def health(request: Request) -> Response:
        status, body = backend.health()
        return JSONResponse(body, status_code=status)

    async def server_logs(request: Request) -> Response:
        name = request.path_params["name"]
        out = backend.logs(name, query_value(request, "tail", TAIL, 100))
        if out is None:
            names = ", ".join(r["name"] for r in backend.instances()) or "(none)"
            return error_response(
                404, "GR-HEAD-UNKNOWN-SERVER", f"no server instance named {name!r}", f"instances: {names}"
            )
        return PydanticJSONResponse(out)

    async def processes(request: Request) -> Response:
        if backend.processes is None:
            return error_response(
                404, "GR-HEAD-NO-PROCESSES", "process accounting is not available in this environment"
            )
        return PydanticJSONResponse(await asyncio.to_thread(backend.processes))

    async def rollouts_run(request: Request) -> Response:
        batch = validated(BATCH, await json_body(request), "body")
        refused = backend.rollouts_refused()
        if refused is not None:
            return JSONResponse(refused[1], status_code=refused[0])
        try:
            keys = row_keys(batch.examples) if backend.keyed_rows else []
        except ValueError as e:
            return error_response(400, "GR-ROLLOUT-BAD-REQUEST", str(e), "give every row a unique _rowidx")
        finished: list[dict[str, Any] | None] = [None] * len(batch.examples)
        concurrency, replicas = batch.concurrency or backend.rollout_concurrency(), backend.agent_replicas()
        deadline_s = batch.deadline_s or backend.rollout_deadline_s
        task = asyncio.create_task(
            run_rows(
                batch.examples,
                backend.agents(),
                concurrency=concurrency,
                deadline_s=deadline_s,
                facts=backend.agent_facts(),
                results=finished,
                replicas=replicas,
                routing=backend.routing(),
            )
        )

        async def body() -> AsyncIterator[bytes]:
            closing = asyncio.create_task(app.state.closing.wait())
            app.state.open_batches += 1
            try:
                while not task.done():
                    done, _ = await asyncio.wait(
                        {task, closing}, timeout=backend.heartbeat_s, return_when=asyncio.FIRST_COMPLETED
                    )
                    if closing in done and task not in done:
                        task.cancel()
                        yield (
                            strict_json(keyed_answer(batch.examples, keys, finished, deadline_s, None, True))
                            if backend.keyed_rows
                            else shutdown_body(finished)
                        )
                        return
                    if not done:
                        yield b" "
                done_batch = task.result()
                summary = batch_summary(done_batch, concurrency, replicas)
                if backend.keyed_rows:
                    yield strict_json(keyed_answer(batch.examples, keys, finished, deadline_s, summary))
                    return
                yield strict_json(
                    {
                        "results": done_batch.results,
                        "latency_s": done_batch.latency_s,
                        "replica": done_batch.replicas,
                        "summary": summary,
                    }
                )
            finally:
                app.state.open_batches -= 1
                task.cancel()
                closing.cancel()

        return StreamingResponse(body(), media_type="application/json")

    routes = [
        Route("/", root),
        Route("/global_config_dict_yaml", global_config_dict_yaml),
        Route("/server_instances", server_instances),
        Route("/support_processes", support_processes),
        *(Route(path, liveness) for path in backend.liveness_routes),
        *(Route(path, health) for path in backend.readiness_routes),
        Route("/servers/{name}/logs", server_logs),
        Route("/processes", processes),
        Route("/rollouts/run", rollouts_run, methods=["POST"]),
    ]
    routes = [
        *routes,
        *openapi.routes(
            routes,
            "gym-runtime head server",
            __doc__ or "",
            {"/rollouts/run": BATCH},
            {"/servers/{name}/logs": {"tail": TAIL}},
        ),
    ]
    for route in routes:  # a route answers its own methods only: HEAD is 405 like any other
        assert route.methods is not None
        route.methods.discard("HEAD")
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(
                ServersListener,
                ports=frozenset(servers_ports),
                routes=SERVERS_ROUTES | {*backend.liveness_routes, *backend.readiness_routes},
            )
        ]
        if servers_ports
        else [],
        exception_handlers={HTTPException: unreadable_body, InvalidRequest: bad_request},
    )
    app.state.closing, app.state.open_batches = asyncio.Event(), 0
    return app
