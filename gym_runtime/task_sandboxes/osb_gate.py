"""The gate between servers' ``opensandbox`` provider and the operator's OpenSandbox server
(docs/runtime.md, "Task sandboxes on an OpenSandbox server").

NeMo Gym 0.7.0's ``opensandbox`` provider talks to an OpenSandbox lifecycle server with the
``opensandbox`` SDK (``nemo_gym/sandbox/providers/opensandbox/provider.py``). Under gym-runtime its
``connection`` is this gate's: ``domain`` the gate as the server reaches it, ``api_key`` a token of
that server alone, ``use_server_proxy: true`` (:func:`gym_runtime.task_sandboxes.offer.scope_view`).
The gate holds the only credential to the operator's server (``OPENSANDBOX_API_KEY``, sent as
``OPEN-SANDBOX-API-KEY`` by the gate's own client, never to a server, a log or a command line), and
passes on what a server may do with its own task sandboxes, in opensandbox-server 1.1.1's wire
format (``/v1``):

* ``POST /v1/sandboxes``: a create, checked (:mod:`.osb_requests`): the image must be approved
  (:mod:`.approval`; else 403 ``GR-SANDBOX-TASK-IMAGE-DENIED``); no ``volumes``, ``snapshotId``,
  ``templateId`` or ``credentialProxy``, no extensions but the image pull policy and
  renew-on-access (400 ``GR-SANDBOX-TASK-SPEC``); at most ``GYM_RUNTIME_SANDBOX_MAX`` live (429).
  A create the server fails with a 500 of its own is tried again (three tries in all).
  The gate adds the labels of the run and the server, puts the operator's ``networkPolicy`` in
  place of the server's, and gives a sandbox without ``timeout`` the run's renewed TTL;
* ``GET /v1/sandboxes``: the server's own sandboxes of this run only;
* ``GET|DELETE /v1/sandboxes/{id}`` and everything below it: the server's own sandboxes only
  (403 ``GR-SANDBOX-TASK-AUTH``), paths without ``.`` or ``..`` segments: ``endpoints/{port}``
  (always the proxied endpoint, through the gate), ``proxy/{port}/...`` (execd and the sandbox's
  ports, streamed both ways), ``POST`` ``renew-expiration`` / ``pause`` / ``resume``, ``PATCH
  metadata`` (not the ``gym-runtime-*`` labels), ``GET networkpolicy``;
* anything else (snapshots, pools, templates, changing a network policy, WebSocket): 403
  ``GR-SANDBOX-TASK-SPEC``.

Errors are OpenSandbox's shape, ``{"code", "message"}``, the message starting with the code, so
the SDK's exception (and Gym's) carries it. A sandbox ends when its server closes it, when the
process that made it ends, and when the daemon stops (every sandbox of the run with the task
label is deleted); a daemon killed leaves them to their TTL and to the next start on the same
state directory, which deletes them first (:meth:`OpenSandboxGate.start`).

The module is long because the gate is one security boundary: every route it passes on and every
check applied to it are read together.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from gym_runtime.serving import LoopbackListener
from gym_runtime.task_sandboxes.approval import SETTING, ApprovedImages
from gym_runtime.task_sandboxes.osb_requests import (
    HOP,
    KEY_HEADER,
    PASSED,
    TASK_LABEL,
    GateError,
    checked_create,
    forwarded,
    json_object,
    labelled,
    list_query,
    plain,
    plain_path,
    read_body,
)
from gym_runtime.task_sandboxes.owners import ProcessEnds
from sandbox.opensandbox.failures import CREATE_TRIES, server_error_code

log = logging.getLogger("gym_runtime.task_sandboxes")
logging.getLogger("opensandbox").setLevel(logging.CRITICAL)  # its failures reach the user as GR-OSB-* blocks
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
_HOST = re.compile(r"^[A-Za-z0-9.\-\[\]:]{1,255}$")


@dataclass
class Owned:
    """A task sandbox made through the gate: ``owner`` (server instance), ``image``, the server
    process that made it (``incarnation``) and whether the gate renews its TTL (``renew``)."""

    id: str
    owner: str
    image: str
    incarnation: Any = None
    renew: bool = False


class OpenSandboxGate:
    """``OpenSandboxGate(conn, labels, policy, members, say, max_per_server)``; ``await start()``
    (binds ``127.0.0.1``; ``host``/``port``), ``token(server)``, ``await stop()``.

    ``conn``: :class:`sandbox.opensandbox.connection.OpenSandboxConnection`; ``labels``: the run's
    :class:`sandbox.opensandbox.spec.RunLabels`; ``policy``: the environment's
    :class:`sandbox.EgressPolicy` (its policy endpoints are dropped, as for every task sandbox);
    ``members``: the supervisor's members by instance name (a member's ``proc`` ending ends the
    sandboxes it made)."""

    def __init__(
        self,
        conn: Any,
        labels: Any,
        policy: Any,
        members: Mapping[str, Any] | None = None,
        say: Callable[[str], None] = lambda m: None,
        max_per_server: int = 256,
    ) -> None:
        from sandbox.opensandbox.spec import network_policy

        self.conn, self.labels, self.say, self.max_per_server = conn, labels, say, max_per_server
        self.approved: ApprovedImages = conn.task_images or ApprovedImages()
        self.members = members if members is not None else {}
        self.policy_wire = (
            network_policy(dataclasses.replace(policy, endpoints=())) if conn.egress == "enforced" else None
        )
        self.boxes: dict[str, Owned] = {}
        self.ended: dict[str, tuple[str, str]] = {}  # id -> (owner, why): answered 404 afterwards
        self.created = 0
        self.denied = 0
        self._tokens: dict[str, str] = {}
        self._by_owner: dict[str, str] = {}
        self._ends = ProcessEnds()
        self._closed = False
        headers = {"OPEN-SANDBOX-API-KEY": conn.api_key} if conn.api_key else {}
        self._client = httpx.AsyncClient(
            base_url=conn.url,
            headers=headers,
            trust_env=False,
            timeout=httpx.Timeout(None, connect=30.0),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        )
        app = Starlette(
            routes=[
                Route("/v1/sandboxes", self._collection, methods=["GET", "POST"]),
                Route("/v1/sandboxes/{sid}", self._one, methods=METHODS),
                Route("/v1/sandboxes/{sid}/{rest:path}", self._sub, methods=METHODS),
                Route("/{path:path}", self._other, methods=METHODS),
            ]
        )
        self._listener = LoopbackListener(app, server_header=False, date_header=False)
        self.host, self.port = self._listener.host, self._listener.port
        self._renew: asyncio.Task | None = None

    # ------------------------------------------------------------------ life
    async def start(self) -> list[str]:
        """Delete the task sandboxes a dead daemon of this state slot left, then serve. Returns
        the ids deleted; raises ``GR-OSB-*`` when the server cannot be reached."""
        from sandbox.opensandbox.service import SandboxService, leftovers

        service = SandboxService(self.conn)
        try:
            infos = await service.list_ids(self.labels.owner_filter(), "listing task sandboxes a stopped daemon left")
            left = set(leftovers(infos, self.labels))
            ids = [i.id for i in infos if i.id in left and TASK_LABEL in (i.metadata or {})]
            if ids:
                await service.kill(ids, "deleting task sandboxes a stopped daemon left")
        except BaseException:
            await self._listener.stop()
            await self._client.aclose()
            raise
        finally:
            await service.close()
        await self._listener.start()
        self._renew = asyncio.get_running_loop().create_task(self._renew_loop())
        return ids

    async def stop(self) -> int:
        """Delete every task sandbox of the run, stop serving (idempotent); returns how many were deleted."""
        from sandbox.opensandbox.service import SandboxService
        from sandbox.opensandbox.spec import LABEL_RUN

        self._closed = True
        if self._renew is not None:
            self._renew.cancel()
        self._ends.cancel()
        service = SandboxService(self.conn)
        deleted: list[str] = []
        try:
            ids = set(self.boxes)
            with contextlib.suppress(Exception):  # what the gate knows is deleted below in any case
                infos = await service.list_ids({LABEL_RUN: self.labels.run}, "listing this run's task sandboxes")
                ids |= {i.id for i in infos if TASK_LABEL in (i.metadata or {})}
            if ids:
                try:
                    deleted = await service.kill(sorted(ids), "deleting this run's task sandboxes")
                except Exception as e:  # the server keeps them until their TTL; said, not raised
                    self.say(
                        f"task sandboxes on the OpenSandbox server: deleting failed ({getattr(e, 'message', e)}); "
                        "they end at their TTL"
                    )
        finally:
            await service.close()
        for sid in list(self.boxes):
            self._forget(sid, "the daemon stopped")
        await self._listener.stop()
        await self._client.aclose()
        return len(deleted)

    # ------------------------------------------------------------------ identity
    def token(self, owner: str) -> str:
        """The secret that identifies server instance ``owner`` to the gate (its ``api_key``)."""
        if owner not in self._by_owner:
            tok = "gr-" + secrets.token_urlsafe(24)
            self._by_owner[owner], self._tokens[tok] = tok, owner
        return self._by_owner[owner]

    def _owner(self, request: Request) -> str:
        owner = self._tokens.get(request.headers.get(KEY_HEADER, ""))
        if owner is None:
            raise GateError(
                "GR-SANDBOX-TASK-AUTH",
                "the request carries no task-sandbox token of a server of this environment",
                403,
                hint="only the environment's servers reach the OpenSandbox server "
                "through gym-runtime; each gets its token in its own config (connection.api_key)",
            )
        return owner

    def _mine(self, sid: str, owner: str) -> Owned:
        rec = self.boxes.get(sid)
        if rec is not None and rec.owner == owner:
            return rec
        if sid in self.ended and self.ended[sid][0] == owner:
            raise GateError(
                "GR-SANDBOX-TASK-UNKNOWN",
                f"task sandbox {sid!r} of server {owner!r} not found: it was deleted ({self.ended[sid][1]})",
                404,
            )
        raise GateError(
            "GR-SANDBOX-TASK-AUTH",
            f"sandbox {sid!r} was not made by server {owner!r} through this daemon, so it cannot reach it",
            403,
            hint="a server reaches only the task sandboxes it made itself",
        )

    # ------------------------------------------------------------------ routes
    async def _collection(self, request: Request) -> Response:
        try:
            owner = self._owner(request)
            if request.method == "POST":
                return await self._create(request, owner)
            return await self._list(request, owner)
        except GateError as e:
            return e.response()

    async def _one(self, request: Request) -> Response:
        sid = request.path_params["sid"]
        try:
            owner = self._owner(request)
            self._mine(sid, owner)
            if request.method not in ("GET", "DELETE"):
                raise GateError("GR-SANDBOX-TASK-SPEC", f"{request.method} of a sandbox is not passed on", 403)
            answer = await self._send(request.method, f"/v1/sandboxes/{sid}")
            if request.method == "DELETE" and answer.status_code in (200, 204, 404):
                self._forget(sid, f"deleted by server {owner!r}")
            return plain(answer)
        except GateError as e:
            return e.response()

    async def _sub(self, request: Request) -> Response:
        sid, rest = request.path_params["sid"], request.path_params["rest"]
        head = rest.split("/", 1)[0]
        try:
            owner = self._owner(request)
            self._mine(sid, owner)
            plain_path(rest, owner)
            if head == "proxy":
                return await self._proxy(request, f"/v1/sandboxes/{sid}/{rest}")
            if head == "endpoints" and request.method == "GET":
                return await self._endpoint(request, sid, rest)
            if request.method not in PASSED.get(head, ()):
                raise GateError(
                    "GR-SANDBOX-TASK-SPEC",
                    f"{request.method} /v1/sandboxes/{{id}}/{head} is not passed "
                    f"on to the OpenSandbox server (server {owner!r})",
                    403,
                    hint="gym-runtime passes on create, list, status, delete, endpoints, the proxy, "
                    "renewal, pause, resume and metadata; egress is the operator's setting",
                )
            body = await read_body(request)
            if head == "metadata":
                patch = json_object(body, owner)
                if any(str(k).startswith("gym-runtime-") for k in patch):
                    raise GateError(
                        "GR-SANDBOX-TASK-SPEC",
                        f"server {owner!r} may not change the gym-runtime-* labels of its sandbox",
                        400,
                    )
            answer = await self._send(
                request.method, f"/v1/sandboxes/{sid}/{rest}", content=body, headers=forwarded(request)
            )
            return plain(answer)
        except GateError as e:
            return e.response()

    async def _other(self, request: Request) -> Response:
        return GateError(
            "GR-SANDBOX-TASK-SPEC",
            f"{request.method} {request.url.path} is not passed on to the OpenSandbox server",
            403 if request.url.path.startswith("/v1/") else 404,
        ).response()

    # ------------------------------------------------------------------ what each does
    async def _create(self, request: Request, owner: str) -> Response:
        spec = json_object(await read_body(request), owner)
        try:
            image = checked_create(spec, owner, self.approved, self.conn.url)
        except GateError as e:
            if e.code == "GR-SANDBOX-TASK-IMAGE-DENIED":
                self.denied += 1
                self.say(
                    f"task sandbox DENY server={owner} image={spec.get('image', {}).get('uri')!r}: not approved "
                    f"by {SETTING} ({self.approved.describe()})"
                )
            raise
        if self._closed:
            raise GateError("GR-SANDBOX-TASK-FAILED", "the daemon is stopping", 503)
        live = sum(1 for r in self.boxes.values() if r.owner == owner)
        if live >= self.max_per_server:
            raise GateError(
                "GR-SANDBOX-TASK-LIMIT",
                f"server {owner!r} already has {live} live task sandboxes "
                f"(GYM_RUNTIME_SANDBOX_MAX={self.max_per_server})",
                429,
                hint="close sandboxes that are done, or raise GYM_RUNTIME_SANDBOX_MAX",
            )
        renew = labelled(spec, self.labels, owner, self.policy_wire)
        answer = await self._create_upstream(spec, owner)
        if answer.status_code < 300:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                sid = str(answer.json()["id"])
                member = self.members.get(owner)
                rec = Owned(sid, owner, image, getattr(member, "proc", None), renew)
                self.boxes[sid] = rec
                self.created += 1
                self._ends.follow(rec.incarnation, functools.partial(self._owner_ended, rec))
                log.info("task sandbox %s of server %s on %s: image %s", sid, owner, self.conn.url, image)
        return plain(answer)

    async def _create_upstream(self, spec: dict[str, Any], owner: str) -> httpx.Response:
        """The server's answer to create ``spec``, tried again (at most :data:`CREATE_TRIES` in all)
        while it answers 500 with an error of its own: opensandbox-server 1.1.1 removes the
        container of a create that failed half-way, e.g. copying execd in failed under load
        (``DOCKER::SANDBOX_EXECD_DISTRIBUTION_FAILED``), so nothing is left to count twice."""
        for attempt in range(1, CREATE_TRIES):
            answer = await self._send("POST", "/v1/sandboxes", json=spec)
            code = server_error_code(answer)
            if answer.status_code != 500 or not code:
                return answer
            log.info(
                "task sandbox of server %s: the OpenSandbox server failed the create (%s), trying again (%d of %d)",
                owner,
                code,
                attempt + 1,
                CREATE_TRIES,
            )
        return await self._send("POST", "/v1/sandboxes", json=spec)

    async def _list(self, request: Request, owner: str) -> Response:
        return plain(
            await self._send("GET", "/v1/sandboxes", params=list_query(request.query_params, self.labels, owner))
        )

    async def _endpoint(self, request: Request, sid: str, rest: str) -> Response:
        parts = rest.split("/")
        if len(parts) != 2 or not parts[1].isdigit():
            raise GateError("GR-SANDBOX-TASK-SPEC", f"no endpoint {rest!r}", 404)
        answer = await self._send("GET", f"/v1/sandboxes/{sid}/{rest}", params={"use_server_proxy": "true"})
        if answer.status_code != 200:
            return plain(answer)
        try:
            body = answer.json()
        except ValueError:
            return plain(answer)
        host = request.headers.get("host", "")
        if not _HOST.match(host):
            host = f"{self.host}:{self.port}"
        body["endpoint"] = f"{host}/v1/sandboxes/{sid}/proxy/{parts[1]}"
        return JSONResponse(body)

    async def _proxy(self, request: Request, path: str) -> Response:
        url = path + (f"?{request.url.query}" if request.url.query else "")
        headers = forwarded(request)
        has_body = "content-length" in request.headers or "transfer-encoding" in request.headers
        if "content-length" in request.headers:
            headers["content-length"] = request.headers["content-length"]
        try:
            upstream = await self._client.send(
                self._client.build_request(
                    request.method, url, headers=headers, content=request.stream() if has_body else None
                ),
                stream=True,
            )
        except httpx.HTTPError as e:
            raise self._unreachable(e) from None
        response = StreamingResponse(
            upstream.aiter_raw(), status_code=upstream.status_code, background=BackgroundTask(upstream.aclose)
        )
        response.raw_headers = [
            (k.encode("latin-1"), v.encode("latin-1"))
            for k, v in upstream.headers.multi_items()
            if k.lower() not in HOP
        ]
        return response

    async def _send(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            return await self._client.request(method, path, **kw)
        except httpx.HTTPError as e:
            raise self._unreachable(e) from None

    def _unreachable(self, e: Exception) -> GateError:
        return GateError(
            "GR-OSB-UNREACHABLE", f"the OpenSandbox server {self.conn.url} did not answer: {type(e).__name__}", 502
        )

    # ------------------------------------------------------------------ lifetime
    def _forget(self, sid: str, why: str) -> None:
        rec = self.boxes.pop(sid, None)
        if rec is not None:
            self.ended[sid] = (rec.owner, why)
            log.info("task sandbox %s of server %s ended: %s", sid, rec.owner, why)

    async def _owner_ended(self, rec: Owned, proc: Any) -> None:
        """Delete the sandboxes ``proc`` (a process of the server ``rec.owner``) made, once it ended."""
        ids = [r.id for r in self.boxes.values() if r.owner == rec.owner and r.incarnation is proc]
        if ids and not self._closed:
            await self._delete(ids, "the server's process ended")
            self.say(
                f"task sandboxes: {len(ids)} of server {rec.owner} on the OpenSandbox server deleted "
                "(the server's process ended)"
            )

    async def _delete(self, ids: list[str], why: str) -> None:
        for sid in ids:
            with contextlib.suppress(GateError):
                answer = await self._send("DELETE", f"/v1/sandboxes/{sid}")
                if answer.status_code in (200, 204, 404):
                    self._forget(sid, why)

    async def _renew_loop(self) -> None:
        from sandbox.opensandbox.spec import RENEW_EVERY_S, TTL_S

        while True:
            await asyncio.sleep(RENEW_EVERY_S)
            until = (datetime.now(UTC) + timedelta(seconds=TTL_S)).isoformat()
            for rec in [r for r in self.boxes.values() if r.renew]:
                with contextlib.suppress(GateError):
                    answer = await self._send(
                        "POST", f"/v1/sandboxes/{rec.id}/renew-expiration", json={"expiresAt": until}
                    )
                    if answer.status_code == 404:
                        self._forget(rec.id, "gone from the OpenSandbox server")
