"""Task sandboxes in the bring-up of ``up`` / ``dry-run`` (``gym_runtime/runtime/bringup.py`` calls these).

* :func:`choose_providers` (after the config is read and the host probed): the provider each
  config's sandbox block gets here (:mod:`.offer`), each change said in the progress lines;
* :func:`open_service` (once the environment's sandbox is open, before any server starts): the
  service and its API's loopback listener in the daemon; each server then gets the API's address
  as it sees it and its own token (:func:`server_env`); :func:`serve` serves the API there once the
  servers are spawned (a request made before waits in the listener's backlog);
* the service's stop (:meth:`~gym_runtime.task_sandboxes.api.TaskSandboxServer.stop`) is a step of
  the teardown, right after the servers;
* with an OpenSandbox server configured and an ``opensandbox`` block kept (:mod:`.offer`):
  :func:`start_gate` (placement local, before any server starts) serves the gate
  (:mod:`.osb_gate`), :func:`gate_address` makes it answer inside the servers' network, and
  :func:`gate_patch` gives each server's config view its address and that server's token; the
  gate's stop deletes the run's task sandboxes (a teardown step after the servers).
"""

from __future__ import annotations

import contextlib
import socket
from typing import Any

URL_VAR, TOKEN_VAR = "GYM_RUNTIME_SANDBOX_URL", "GYM_RUNTIME_SANDBOX_TOKEN"


def choose_providers(merged: Any, settings: Any, say, gate: bool = True) -> None:
    """Rewrite ``merged.data``'s provider blocks for this host and say why (:func:`.offer.offer`).
    ``gate``: whether the run can serve the OpenSandbox gate (placement local); without it an
    ``opensandbox`` block is treated as if no OpenSandbox server were configured."""
    from gym_runtime.task_sandboxes.offer import has_blocks, offer

    if not has_blocks(merged.data, merged.instances):  # no provider named: no probe either
        return
    from sandbox import probe_isolation
    from sandbox.taskbox import box_support

    support = box_support(probe_isolation())
    mode = settings.task_sandboxes.provider_mode if settings.task_sandboxes is not None else "auto"
    remote = settings.opensandbox.url if settings.opensandbox is not None and gate else None
    for note in offer(merged.data, merged.instances, mode, support if isinstance(support, str) else None, remote):
        say(note)


def gate_users(merged: Any) -> list[str]:
    """The server instances whose ``opensandbox`` block :func:`choose_providers` kept for the gate."""
    from gym_runtime.task_sandboxes.offer import GATE_PLACEHOLDER, OSB, provider_blocks

    users: list[str] = []
    for b in provider_blocks(merged.data, merged.instances):
        block = b.parent[b.key]
        conn = (block.get(OSB) or {}).get("connection") if b.provider == OSB else None
        if isinstance(conn, dict) and conn.get("domain") == GATE_PLACEHOLDER:
            users += [u for u in b.users if u not in users]
    return users


async def start_gate(env: Any) -> Any:
    """The gate of environment ``env`` (``Environment``: its settings, egress policy, run labels,
    supervisor members), started; raises ``GR-OSB-*`` when the OpenSandbox server cannot be reached."""
    from gym_runtime.task_sandboxes.osb_gate import OpenSandboxGate

    settings = env.settings
    limit = settings.task_sandboxes.max_per_server if settings.task_sandboxes is not None else 256
    gate = OpenSandboxGate(settings.opensandbox, env.run_labels, env.egress, env.supervisor.members, env._say, limit)
    reaped = await gate.start()
    if reaped:
        env._say(
            f"task sandboxes: deleted {len(reaped)} a stopped daemon of this state directory left on the "
            f"OpenSandbox server: {', '.join(reaped)}"
        )
    env._say(
        f"task sandboxes of {', '.join(gate_users(env.merged))} go to the OpenSandbox server "
        f"{settings.opensandbox.url}; images approved: {gate.approved.describe()}"
    )
    return gate


async def gate_address(gate: Any, sandbox: Any, fresh_port) -> str:
    """The gate's ``host:port`` as servers in ``sandbox`` reach it (a forward into their network, or
    the daemon's listener at isolation none)."""
    host, port = await sandbox.expose_host_service(fresh_port(), gate.host, gate.port)
    return f"{host}:{port}"


def gate_patch(gate: Any, address: str | None, instances: Any):
    """The change each server's config view gets (:func:`.offer.scope_view`), or None without a gate."""
    if gate is None or address is None:
        return None
    from gym_runtime.task_sandboxes.offer import scope_view

    return lambda view, name: scope_view(view, name, instances, address, gate.token(name))


class ApiListener:
    """The task-sandbox service of an environment and its API's listener, bound on loopback
    (``host``, ``port``, ``url``) before the API serves (:func:`serve`). ``stop()`` closes the
    service's boxes and the listener, as :meth:`~.api.TaskSandboxServer.stop` does."""

    def __init__(self, service: Any, sock: socket.socket) -> None:
        self.service, self.sock = service, sock
        self.host, self.port = sock.getsockname()[:2]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def stop(self, wait_s: float = 3.0) -> None:
        await self.service.close_all()
        with contextlib.suppress(OSError):
            self.sock.close()


def open_service(env: Any) -> ApiListener:
    """The service of environment ``env`` (``Environment``) and its API's listener, not serving yet."""
    from gym_runtime.sockets import listening_socket
    from gym_runtime.task_sandboxes.service import TaskSandboxService
    from gym_runtime.task_sandboxes.settings import TaskSandboxSettings

    settings = env.settings.task_sandboxes or TaskSandboxSettings()
    service = TaskSandboxService(
        settings, env.egress, env.work_dir / "task-sandboxes", env.supervisor.members, env._say
    )
    return ApiListener(service, listening_socket("127.0.0.1"))


async def serve(listener: ApiListener) -> Any:
    """Serve the API on ``listener``'s socket; returns its
    :class:`~gym_runtime.task_sandboxes.api.TaskSandboxServer` (which then owns the socket)."""
    from gym_runtime.task_sandboxes.api import TaskSandboxServer

    server = TaskSandboxServer(listener.service, sock=listener.sock)
    await server.start()
    return server


async def inside_url(server: Any, sandbox: Any, fresh_port) -> str:
    """The API's address as servers in ``sandbox`` reach it (a forward into their network at
    full/partial, the daemon's own listener at none)."""
    server.service.expose = sandbox.expose_inside  # endpoints of task sandboxes, where servers reach them
    if sandbox.level.value == "none":
        return server.url
    host, port = await sandbox.expose_host_service(fresh_port(), server.host, server.port)
    return f"http://{host}:{port}"


def server_env(server: Any, url: str | None, instance: str) -> dict[str, str]:
    """What server ``instance``'s environment gets: the API's address and its own token."""
    if server is None or url is None:
        return {}
    return {URL_VAR: url, TOKEN_VAR: server.service.token(instance)}
