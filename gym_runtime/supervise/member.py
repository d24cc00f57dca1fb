"""One supervised process as the supervisor sees it: its spec, address, log, current handle and state.

Only the supervisor's event loop changes a :class:`Member` (STYLE.md, honcho); everyone else reads
:meth:`Member.snapshot`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from gym_runtime.supervise.logs import LogSink

# Status values, in the order a healthy server goes through them.
PENDING, STARTING, READY, RESTARTING, FAILED, STOPPING, STOPPED = (
    "pending",
    "starting",
    "ready",
    "restarting",
    "failed",
    "stopping",
    "stopped",
)

# The exit reason of a server whose node was lost (placement ray: gym_runtime/placement/remote.py):
# not the server's failure, so never counted toward ``max_restarts`` (supervisor.py).
NODE_LOST = "node-lost"
# The exit reasons of a replica whose worker process ended on a node that lives (placement ray:
# gym_runtime/placement/death.py): killed for memory (by Ray's memory monitor or the kernel's OOM
# killer), or died otherwise (a SIGKILL, a segfault). The server's failure: restarted with the usual backoff.
OOM = "oom"
WORKER_DIED = "worker-died"
# The error block of a server that ends for good by :data:`OOM`: its code and the fix.
OOM_CODE = "GR-PLACE-OOM"
OOM_HINT = (
    "the node ran out of memory under the server: declare what it needs as `memory:` in its "
    "`placement:` block (e.g. `memory: 4GiB`: Ray then places the replica only on a node with that "
    "much memory unreserved), give the nodes more memory, or make the server use less "
    "(docs/scale-out.md)"
)
# The exit reason of a server that could not be given a sandbox because the sandbox service does not
# answer (backend opensandbox): not the server's failure either (service_outage.py).
SERVICE_LOST = "service-lost"
# ... and the reason once it has not answered for the backend's deadline: the server fails, naming the service.
SERVICE_GONE = "service-gone"


@dataclass
class Member:
    """A supervised process.

    ``kind``: ``server`` (a Gym server in the sandbox), ``model`` (the built-in stub model) or
    ``ray`` (a private Ray head). ``port``: where it listens inside its network; ``public``: the
    daemon-side ``(host, port)`` reaching it; ``auto_port``: the daemon chose the port (it may
    choose again after a bind race, rebind.py). ``probe_path``: readiness URL path (None = ready
    once spawned; ``"tcp"`` = a TCP connect; ``"log:TEXT"`` = TEXT printed since the last start).
    ``wave``: lower waves are spawned and ready before higher ones start. ``kill_on_stop``: KILLed at
    once on shutdown, no grace, after the servers have stopped (a private Ray head: its drain takes
    seconds, and nothing in it outlives the servers that used it; the stub model: it keeps nothing,
    and uvicorn's graceful shutdown would add 0.15 s to every stop). ``spec``: the sandbox
    ``ProcessSpec`` (fds filled per start); ``launcher``: the :class:`sandbox.Sandbox` that spawns
    it. ``info``: static facts served by the head server (server type, implementation...).
    ``load_bound_start``: its start-up can fail on a loaded host the same way twice and then succeed
    (a private Ray head: ``ray start`` gives its raylet a fixed 30 s to register with the GCS), so
    identical start-up exits are restarted up to ``max_restarts`` instead of failing at once.
    ``restarts`` counts every restart; ``node_losses`` those after its node's loss
    (:data:`NODE_LOST`), which ``max_restarts`` does not count.
    """

    name: str
    kind: str
    spec: Any
    launcher: Any
    log: LogSink
    host: str = "127.0.0.1"
    port: int | None = None
    public: tuple[str, int] | None = None
    probe_path: str | None = "/"
    wave: int = 1
    info: dict[str, Any] = field(default_factory=dict)
    proc: Any = None
    status: str = PENDING
    restarts: int = 0
    starts: int = 0  # every spawn of this run, for the log's ``start #N`` (restarts resets after an edit)
    node_losses: int = 0  # restarts after a node's loss: not counted toward max_restarts
    service_wait: str | None = None  # why it waits for the sandbox service (service_outage.py); None once ready
    started_wall: float | None = None
    spawned_at: float | None = None
    ready_s: float | None = None
    last_exit: dict[str, Any] | None = None
    error: str | None = None
    escalated: bool = False
    pgid: int | None = None
    auto_port: bool = False
    kill_on_stop: bool = False
    load_bound_start: bool = False
    rebinds: int = 0
    respawn: bool = False  # stopped on purpose to start again with a refreshed spec (rebind.py)
    startup_exit: tuple[int | None, str | None] | None = None  # (status, last log line) of the last start-up exit
    port_bound_s: float | None = None  # seconds from spawn until its port was seen listening (this start)
    probe_note: str | None = None  # the last readiness probe's outcome when it got no answer
    wedged: str | None = None  # what the liveness probe missed, until it is ready again (wedged.py)

    @property
    def url(self) -> str | None:
        """Daemon-side base URL (``http://host:port``), None before it has an address."""
        if self.public is None:
            return None
        host = f"[{self.public[0]}]" if ":" in self.public[0] else self.public[0]
        return f"http://{host}:{self.public[1]}"

    def snapshot(self) -> dict[str, Any]:
        """JSON-ready state for ``/server_instances`` and ``gym-runtime status``."""
        pid = None
        if self.proc is not None and self.proc.poll() is None:
            pid = self.proc.app_pid() or self.proc.pid
        up = time.time() - self.started_wall if (self.started_wall and self.status == READY) else None
        where = getattr(self.proc, "where", None) or {}  # a replica on a Ray node: node, replica, isolation
        return {
            "name": self.name,
            "kind": self.kind,
            **self.info,
            **where,
            "host": self.public[0] if self.public else None,
            "port": self.public[1] if self.public else None,
            "url": self.url,
            "pid": pid,
            "status": self.status,
            "restarts": self.restarts,
            "start_time": self.started_wall,
            "uptime_seconds": round(up, 3) if up is not None else None,
            "ready_after_s": round(self.ready_s, 3) if self.ready_s is not None else None,
            "last_exit": self.last_exit,
            "error": self.error,
            "wedged": self.wedged,
            "log_file": str(self.log.path),
        }


@dataclass(frozen=True)
class Event:
    """One thing that happened: ``kind`` plus the member name, the process handle it concerns
    (stale events about an earlier process are ignored) and a payload."""

    kind: str
    name: str = ""
    proc: Any = None
    data: Any = None
