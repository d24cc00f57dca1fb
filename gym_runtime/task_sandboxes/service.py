"""The daemon's task-sandbox service: boxes by owner, their lifetime, access (docs/runtime.md, "Task sandboxes").

A *box* (:class:`sandbox.taskbox.TaskBox`) belongs to the server instance that asked for it (the
*owner*, known by the token only that server's environment holds, :meth:`TaskSandboxService.token`).
Another server reaches it only with its *lease*, an unguessable capability the owner hands on
(NeMo Gym 0.7.0 ``nemo_gym/sandbox/access.py``: a resources server lends its sandbox to an agent
through ``SandboxAccess``). A box ends, with every process in it, when

* its owner closes it, or its ``ttl_s`` passes;
* the owner's process ends (a crash, a stop, a restart: the next process starts with none), seen
  at once through the process handle's exit watch (:meth:`sandbox.SandboxedProcess.wait`);
* the daemon stops (:meth:`TaskSandboxService.close`), or is SIGKILLed (each box's keeper and
  joiner die with the daemon's spawn thread, ``PR_SET_PDEATHSIG``, and the box's pid namespace
  with its keeper).

Each live box is counted on its owner's member (``info["sandboxes"]``: ``/server_instances`` and
``gym-runtime status``). Errors are :class:`TaskSandboxError` with a ``GR-SANDBOX-TASK-*`` code and
the HTTP status the API answers (docs/errors.md).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gym_runtime.task_sandboxes.owners import ProcessEnds
from gym_runtime.task_sandboxes.settings import TaskSandboxSettings
from gym_runtime.task_sandboxes.spec import TaskSandboxError, _bad, box_request

log = logging.getLogger("gym_runtime.task_sandboxes")
WATCH_EVERY_S = 1.0


@dataclass
class BoxRecord:
    """A live box: ``id``, ``owner`` (server instance), ``lease``, the :class:`TaskBox`, the
    request's ``ports``, ``shell`` (bash where the root has it, else sh), ``image`` and where it came
    from, ``created`` (wall seconds) and ``expires`` (wall seconds or None)."""

    id: str
    owner: str
    lease: str
    box: Any
    shell: str
    image: str | None
    source: str
    ports: tuple[int, ...] = ()
    created: float = field(default_factory=time.time)
    expires: float | None = None
    incarnation: Any = None
    endpoints: dict[int, str] = field(default_factory=dict)
    _ttl: asyncio.TimerHandle | None = None
    _forwards: list[Any] = field(default_factory=list)

    def describe(self) -> dict[str, Any]:
        b = self.box
        return {
            "sandbox_id": self.id,
            "owner": self.owner,
            "image": self.image,
            "root": self.source,
            "workdir": b.workdir,
            "status": "running" if b.alive else "stopped",
            "limits": dataclasses.asdict(b.limits),
            "enforced": b.enforced,
            "ports": list(self.ports),
            "created": self.created,
            "expires": self.expires,
            "denials": b.denial_count,
        }


class TaskSandboxService:
    """Boxes of one environment. ``members``: instance name -> the supervisor's member (its
    ``proc`` is the process whose end ends its boxes, its ``info`` receives the count); ``policy``:
    the environment's :class:`sandbox.EgressPolicy` (its policy endpoints are dropped for boxes)."""

    def __init__(
        self,
        settings: TaskSandboxSettings,
        policy: Any,
        work_dir: Path,
        members: Mapping[str, Any] | None = None,
        say: Callable[[str], None] = lambda m: None,
    ) -> None:
        from sandbox import probe_isolation
        from sandbox.images import ImageStore
        from sandbox.taskbox import box_support

        self.settings = settings
        self.policy = dataclasses.replace(policy, endpoints=())
        self.work_dir = Path(work_dir)
        self.members = members if members is not None else {}
        self.say = say
        self.support = box_support(probe_isolation())
        self.store = ImageStore(settings.image_dirs, settings.unpack_dir, settings.image_map)
        self.boxes: dict[str, BoxRecord] = {}
        self._tokens: dict[str, str] = {}
        self._by_owner: dict[str, str] = {}
        self._spawner = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="task-sandbox-spawn")
        self._factory: Any = None  # sandbox.taskbox.JoinerFactory, started with the first box
        self._factory_lock = asyncio.Lock()
        self._ends = ProcessEnds()
        self._closing: set[asyncio.Future] = set()  # box closes under way (close_all waits for them)
        self._watch: asyncio.Task | None = None
        self._closed = False
        self.created = 0
        # dial -> (host, port) servers reach; the bring-up sets the environment sandbox's (placement
        # local); without it the endpoints listen on this host's loopback
        self.expose: Callable[[Callable], Any] | None = None

    @property
    def level(self) -> str:
        """``full``, ``partial`` (the host's ``/proc`` is visible in boxes) or ``unavailable``."""
        if isinstance(self.support, str):
            return "unavailable"
        return "full" if self.support[1] == "mount" else "partial"

    # ---------------------------------------------------------------- identity
    def token(self, owner: str) -> str:
        """The secret that identifies server instance ``owner`` (the same for all its processes)."""
        if owner not in self._by_owner:
            tok = secrets.token_urlsafe(24)
            self._by_owner[owner], self._tokens[tok] = tok, owner
        return self._by_owner[owner]

    def owner_of(self, token: str | None) -> str:
        """The server a token belongs to; raises ``GR-SANDBOX-TASK-AUTH`` (403)."""
        owner = self._tokens.get(token or "")
        if owner is None:
            raise TaskSandboxError(
                "GR-SANDBOX-TASK-AUTH",
                "the request carries no task-sandbox token of a server of this environment",
                403,
                hint="only the environment's servers reach task sandboxes; the provider "
                "reads GYM_RUNTIME_SANDBOX_TOKEN from the server's environment",
            )
        return owner

    def record(self, box_id: str, owner: str, lease: str | None = None) -> BoxRecord:
        """The box ``box_id`` as ``owner`` may use it (its own, or lent by ``lease``); raises
        ``GR-SANDBOX-TASK-UNKNOWN`` (404) or ``GR-SANDBOX-TASK-AUTH`` (403)."""
        rec = self.boxes.get(box_id)
        if rec is None:
            raise TaskSandboxError(
                "GR-SANDBOX-TASK-UNKNOWN",
                f"task sandbox {box_id!r} does not exist (it was "
                "closed, its ttl_s passed, or the server that made it stopped)",
                404,
            )
        if rec.owner != owner and not (lease and secrets.compare_digest(lease, rec.lease)):
            raise TaskSandboxError(
                "GR-SANDBOX-TASK-AUTH",
                f"task sandbox {box_id!r} belongs to server {rec.owner!r}; "
                f"server {owner!r} may use it only with the lease its owner hands on",
                403,
                hint="the owner serializes the sandbox (AsyncSandbox.serialize) and passes "
                "the descriptor, whose lease grants access",
            )
        return rec

    def counts(self) -> dict[str, int]:
        """Live boxes per owner."""
        out: dict[str, int] = {}
        for rec in self.boxes.values():
            out[rec.owner] = out.get(rec.owner, 0) + 1
        return out

    # ---------------------------------------------------------------- create / close
    async def create(self, owner: str, spec: Mapping[str, Any]) -> BoxRecord:
        """Make a box for ``owner`` from a ``SandboxSpec``-shaped mapping (``image``, ``ttl_s``,
        ``workdir``, ``env``, ``resources``, ``ports``; NeMo Gym 0.7.0
        ``nemo_gym/sandbox/providers/base.py``). Raises :class:`TaskSandboxError`."""
        if self._closed:
            raise TaskSandboxError("GR-SANDBOX-TASK-FAILED", "the daemon is stopping", 503)
        if isinstance(self.support, str):
            raise TaskSandboxError(
                "GR-SANDBOX-TASK-UNAVAILABLE",
                f"this host cannot make task sandboxes: {self.support}",
                503,
                hint="run where unprivileged user namespaces and "
                "bubblewrap work (`gym-runtime doctor` says what this host gives)",
            )
        live = self.counts().get(owner, 0)
        if live >= self.settings.max_per_server:
            raise TaskSandboxError(
                "GR-SANDBOX-TASK-LIMIT",
                f"server {owner!r} already has {live} live task "
                f"sandboxes (GYM_RUNTIME_SANDBOX_MAX={self.settings.max_per_server})",
                429,
                hint="close sandboxes that are done, or raise GYM_RUNTIME_SANDBOX_MAX",
            )
        req = box_request(spec, self.settings, owner)
        root = self._root(req.image, owner)
        from sandbox.taskbox import BoxError, TaskBox

        box_id = f"gr-{secrets.token_hex(6)}"
        member = self.members.get(owner)
        bwrap, proc_mode = self.support
        try:
            async with self._factory_lock:
                if self._factory is None or self._factory.proc.poll() is not None:
                    from sandbox.taskbox import JoinerFactory

                    self._factory = await JoinerFactory.start(self._spawner)
            box = await TaskBox.start(
                f"{owner}/{box_id}",
                root,
                self.work_dir / box_id,
                req.limits,
                self.policy,
                self._spawner,
                bwrap,
                proc_mode,
                req.workdir,
                req.env,
                factory=self._factory,
            )
        except (TimeoutError, BoxError, OSError) as e:  # nothing of it is left (TaskBox.start)
            raise TaskSandboxError(
                "GR-SANDBOX-TASK-FAILED",
                f"task sandbox for server {owner!r} (image "
                f"{req.image or 'host root'}) did not start: {e or type(e).__name__}",
                500,
            ) from None
        rec = BoxRecord(
            box_id,
            owner,
            secrets.token_urlsafe(24),
            box,
            _shell(root),
            req.image,
            root.source,
            req.ports,
            incarnation=getattr(member, "proc", None),
        )
        self.boxes[box_id] = rec
        self.created += 1
        if req.ttl_s:
            rec.expires = rec.created + req.ttl_s
            rec._ttl = asyncio.get_running_loop().call_later(
                req.ttl_s, lambda: self._ends.spawn(self.close(box_id, f"its ttl_s ({req.ttl_s:g} s) passed"))
            )
        self._ends.follow(rec.incarnation, lambda proc: self.close_owner(rec.owner, "the server's process ended", proc))
        self._count(owner)
        if self._watch is None and any(k not in box.enforced for k in ("memory", "pids")):
            self._watch = asyncio.get_running_loop().create_task(self._watch_limits())
        log.info("task sandbox %s for server %s: %s, limits %s", box_id, owner, root.source, req.limits)
        return rec

    def _root(self, image: str | None, owner: str):
        from sandbox.images import ImageError, ImageNotFound

        try:
            return self.store.resolve(image)
        except ImageNotFound as e:
            raise TaskSandboxError(
                "GR-SANDBOX-TASK-IMAGE",
                f"server {owner!r} asked for image {image!r}, which "
                f"this host does not provide; looked at: {'; '.join(e.looked)}",
                404,
                hint="put the image's root filesystem, OCI layout or archive there, or map it "
                "(GYM_RUNTIME_SANDBOX_IMAGE_MAP, e.g. 'REF=host' for the host's read-only "
                'root); docs/runtime.md, "Task sandboxes"',
            ) from None
        except ImageError as e:
            raise TaskSandboxError("GR-SANDBOX-TASK-IMAGE", f"image {image!r}: {e}", 400) from None

    async def endpoint(self, rec: BoxRecord, port: int) -> str:
        """A URL the servers reach for service ``port`` the box declared (``SandboxSpec.ports``): a
        forward into the box (NeMo Gym 0.7.0 ``SupportsSandboxEndpoint``). Raises GR-SANDBOX-TASK-SPEC."""
        if port not in rec.ports:
            raise _bad(
                rec.owner,
                f"an endpoint for port {port}, which sandbox {rec.id} did not declare "
                f"(SandboxSpec.ports: {list(rec.ports)})",
            )
        if port not in rec.endpoints:

            async def dial():
                return await rec.box.dial(port)

            if self.expose is not None:
                host, hport = await self.expose(dial)
            else:
                import socket as _socket

                from sandbox.proxy import serve_forward

                sock = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM, _socket.IPPROTO_TCP)
                sock.bind(("127.0.0.1", 0))
                sock.listen(128)
                sock.setblocking(False)
                rec._forwards.append(await serve_forward(sock, dial))
                host, hport = sock.getsockname()[:2]
            rec.endpoints[port] = f"http://{host}:{hport}"
        return rec.endpoints[port]

    async def close(self, box_id: str, why: str = "closed by its owner") -> None:
        """End one box (idempotent)."""
        rec = self.boxes.pop(box_id, None)
        if rec is None:
            return
        self._count(rec.owner)
        if rec._ttl is not None:
            rec._ttl.cancel()
        for fwd in rec._forwards:
            fwd.close()
        closing = asyncio.ensure_future(rec.box.close())  # a caller cancelled mid-close leaves it running
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)
        await asyncio.shield(closing)
        log.info("task sandbox %s of server %s ended: %s", box_id, rec.owner, why)

    async def close_owner(self, owner: str, why: str, incarnation: Any = None) -> int:
        """End every box of ``owner`` (of one process of it, when ``incarnation`` is given)."""
        ids = [
            i
            for i, r in self.boxes.items()
            if r.owner == owner and (incarnation is None or r.incarnation is incarnation)
        ]
        await asyncio.gather(*(self.close(i, why) for i in ids))
        if ids:
            self.say(f"task sandboxes: {len(ids)} of server {owner} ended ({why})")
        return len(ids)

    async def close_all(self) -> None:
        """End every box and the spawn thread (the daemon's stop); later creates fail."""
        self._closed = True
        if self._watch is not None:
            self._watch.cancel()
        await asyncio.gather(*(self.close(i, "the daemon stopped") for i in list(self.boxes)))
        # boxes whose server ended just before the stop are still closing in their watcher: let them end
        await asyncio.gather(*list(self._closing), return_exceptions=True)
        self._ends.cancel()
        if self._factory is not None:
            self._factory.close()
        self._spawner.shutdown(wait=False)

    # ---------------------------------------------------------------- lifetime
    def _count(self, owner: str) -> None:
        member = self.members.get(owner)
        if member is not None and isinstance(getattr(member, "info", None), dict):
            member.info["sandboxes"] = self.counts().get(owner, 0)

    async def _watch_limits(self) -> None:
        """Limits the kernel does not enforce here (no writable cgroups): a box over one is closed."""
        while True:
            await asyncio.sleep(WATCH_EVERY_S)
            for box_id, rec in list(self.boxes.items()):
                why = await asyncio.to_thread(rec.box.over_limit)
                if why:
                    self.say(f"task sandbox {box_id} of server {rec.owner} killed: {why}")
                    await self.close(box_id, f"over its limit: {why}")


def _shell(root: Any) -> str:
    """bash where the box's root has it (conda's ``source`` and most task scripts need it), else sh."""
    base = Path("/") if root.kind == "host" else root.path
    for cand in ("bin/bash", "usr/bin/bash"):
        if (base / cand).exists():
            return "/" + cand
    return "/bin/sh"
