"""The Python API: ``gym_runtime.Runtime`` brings an environment up like ``gym-runtime up`` does.

Async::

    rt = Runtime("path/to/package", policy_base_url="http://127.0.0.1:8000/v1")
    info = await rt.start()          # {"status": "ready", "head_server": ..., "servers": {...}, ...}
    ...                              # rt.head_url, rt.servers, rt.health()
    code = await rt.stop()           # 0, or 3 when a server had failed for good

Sync (a context manager; the environment runs on its own event-loop thread, which lives until
exit so the servers' parent-death signal stays armed)::

    with Runtime("path/to/package") as rt:      # no policy URL: the built-in stub model is started
        httpx.post(rt.head_url + "/rollouts/run", json={"examples": rows})

Errors: :class:`~gym_runtime.errors.GymRuntimeError` subclasses (``ConfigError``, ``BuildError``,
``IsolationError``, ``StartError``...); after a failed start everything started is stopped again.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from gym_runtime.config import PolicyValues
from gym_runtime.runtime.bringup import Environment, UpRequest
from gym_runtime.settings import RuntimeSettings, load_settings
from gym_runtime.supervise.options import SuperviseOptions


class Runtime:
    """One environment, started and stopped by the caller.

    Arguments: ``package`` (directory, or a :class:`~gym_runtime.package.Package` value such as
    :func:`~gym_runtime.package.bare.package_from_config_paths` makes), ``overrides`` (``key=value``
    list), ``job_config`` (a config layer ``(data, label)`` merged over the files and beneath the
    overrides), ``policy_base_url``
    (str or list of replicas; None = start the stub model), ``policy_api_key``,
    ``policy_model_name``, ``head_host`` / ``head_port`` (default loopback, a free port),
    ``ray_address`` (``host:port`` | ``auto`` | ``local``), ``work_dir`` (logs, server homes),
    ``require_isolation`` (fail unless full isolation), ``isolation`` (force ``full`` | ``partial``
    | ``none``), ``python`` (server venv interpreter), ``placement`` (``local``: this host, or
    ``ray``: nodes of the ``ray_address`` cluster, docs/scale-out.md; a process that is already a
    Ray driver is reused), ``max_concurrent_rollouts`` (rollouts in flight per ``/rollouts/run``
    batch unless its body says; default 32 per agent replica, docs/rollouts.md),
    ``options`` (:class:`SuperviseOptions`), ``sandbox_backend`` (``local`` | ``opensandbox``; default
    the settings' ``GYM_RUNTIME_SANDBOX_BACKEND``, docs/runtime.md "Sandbox backends"),
    ``settings`` (:class:`RuntimeSettings`, default from the environment), ``progress`` (a
    callable receiving human progress lines).
    """

    def __init__(
        self,
        package: Any,
        *,
        overrides: list[str] | None = None,
        job_config: tuple[dict[str, Any], str] | None = None,
        policy_base_url: str | list[str] | None = None,
        policy_api_key: str | None = None,
        policy_model_name: str | None = None,
        head_host: str = "127.0.0.1",
        head_port: int | None = None,
        ray_address: str | None = None,
        work_dir: str | Path | None = None,
        require_isolation: bool = False,
        isolation: str | None = None,
        python: str | None = None,
        placement: str = "local",
        max_concurrent_rollouts: int | None = None,
        options: SuperviseOptions | None = None,
        settings: RuntimeSettings | None = None,
        progress=None,
        sandbox_backend: str | None = None,
    ) -> None:
        self.request = UpRequest(
            package,
            list(overrides or []),
            PolicyValues(policy_base_url, policy_api_key, policy_model_name),
            head_host,
            head_port,
            ray_address,
            Path(work_dir) if work_dir else None,
            require_isolation,
            isolation,
            python,
            options=options or SuperviseOptions(),
            placement=placement,
            max_concurrent_rollouts=max_concurrent_rollouts,
            job_config=job_config,
            sandbox_backend=sandbox_backend,
        )
        self.settings = settings or load_settings()
        self.progress = progress
        self.env: Environment | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------------ async API
    async def start(self) -> dict[str, Any]:
        """Bring the environment up; returns the ready info (the JSON ``up`` prints)."""
        self.env = Environment(self.request, self.settings, self.progress)
        try:
            return await self.env.start()
        except BaseException:
            if not self.env.stop_under_way:  # a stop called meanwhile waits for this start: never wait for it here
                await self.env.stop()
            raise

    async def stop(self, fast: bool = False) -> int:
        """Stop every process (TERM, grace, KILL, reap) and the head server; returns the exit code
        (3 when a server had failed for good). A second call, or ``fast``, skips the grace."""
        return await self.env.stop(fast) if self.env is not None else 0

    async def wait(self) -> int:
        """Wait until the environment stops by itself (a server failed for good) or is stopped."""
        assert self.env is not None
        code = await self.env.supervisor.wait_stopped()
        await self.env.stop()
        return code

    async def __aenter__(self) -> Runtime:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ------------------------------------------------------------------ sync API
    def __enter__(self) -> Runtime:
        import uvloop  # the daemon's loop, as for `up` (docs/performance-history.md, "Sandbox data path")

        self._loop = uvloop.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="gym-runtime", daemon=True)
        self._thread.start()
        try:
            self._call(self.start())
        except BaseException:
            self._close_loop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._call(self.stop())
        finally:
            self._close_loop()

    def _call(self, coro) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _close_loop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            if self._thread is not None:
                self._thread.join(5)
            self._loop.close()
            self._loop = self._thread = None

    # ------------------------------------------------------------------ state
    @property
    def ready_info(self) -> dict[str, Any] | None:
        return self.env.ready_info if self.env else None

    @property
    def head_url(self) -> str | None:
        """``http://host:port`` of the head server once its listener is bound (a client waits in its
        backlog until it serves, at the latest once the servers are spawned)."""
        return self.env.head_url if self.env else None

    @property
    def servers(self) -> dict[str, str | None]:
        """Server instance name -> its base URL from this host (the stable address of an instance
        placed on Ray nodes)."""
        if not self.env:
            return {}
        return self.env.placement.servers()

    def health(self) -> tuple[int, dict[str, Any]]:
        """Same as the head server's ``GET /health``: ``(200|503, body)``."""
        return self.env.health() if self.env else (503, {"status": "stopped"})
