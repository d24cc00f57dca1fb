"""Task sandboxes in the bring-up of ``up`` / ``dry-run`` (``gym_runtime/supervise/bringup.py`` calls these).

* :func:`choose_providers` (after the config is read and the host probed): the provider each
  config's sandbox block gets here (:mod:`.offer`), each change said in the progress lines;
* :func:`start_service` (once the environment's sandbox is open, before any server starts): the
  service and its API on a loopback listener of the daemon; each server then gets the API's
  address as it sees it and its own token (:func:`server_env`);
* the service's stop (:meth:`~gym_runtime.task_sandboxes.api.TaskSandboxServer.stop`) is a step of
  the teardown, right after the servers.
"""

from __future__ import annotations

from typing import Any

URL_VAR, TOKEN_VAR = "GYM_RUNTIME_SANDBOX_URL", "GYM_RUNTIME_SANDBOX_TOKEN"


def choose_providers(merged: Any, settings: Any, say) -> None:
    """Rewrite ``merged.data``'s provider blocks for this host and say why (:func:`.offer.offer`)."""
    from gym_runtime.task_sandboxes.offer import has_blocks, offer

    if not has_blocks(merged.data, merged.instances):  # no provider named: no probe either
        return
    from sandbox import probe_isolation
    from sandbox.taskbox import box_support

    support = box_support(probe_isolation())
    mode = settings.task_sandboxes.provider_mode if settings.task_sandboxes is not None else "auto"
    for note in offer(merged.data, merged.instances, mode, support if isinstance(support, str) else None):
        say(note)


async def start_service(env: Any) -> Any:
    """Start the service of environment ``env`` (``Environment``); returns its
    :class:`~gym_runtime.task_sandboxes.api.TaskSandboxServer`."""
    from gym_runtime.task_sandboxes.api import TaskSandboxServer
    from gym_runtime.task_sandboxes.service import TaskSandboxService
    from gym_runtime.task_sandboxes.settings import TaskSandboxSettings

    settings = env.settings.task_sandboxes or TaskSandboxSettings()
    service = TaskSandboxService(settings, env.egress, env.work_dir / "task-sandboxes", env.supervisor.members,
                                 env._say)
    server = TaskSandboxServer(service)
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
