"""NeMo Gym's ``gym_runtime`` sandbox provider: task sandboxes made by the gym-runtime daemon.

Installed by gym-runtime into every server venv it builds, as the distribution
``gym-runtime-sandbox`` whose entry point (group ``nemo_gym.sandbox_providers``) names
:class:`GymRuntimeProvider`. It implements NeMo Gym 0.7.0's ``SandboxProvider`` protocol
(``nemo_gym/sandbox/providers/base.py``), ``SupportsSandboxEndpoint`` (a declared port of the
sandbox as a URL this server reaches) and ``ConnectableProvider`` (a descriptor holds the
sandbox's id and lease, so a sandbox can be lent to another server, ``nemo_gym/sandbox/access.py``)
over the daemon's task-sandbox API, whose address and this server's token are in the server's
environment (``GYM_RUNTIME_SANDBOX_URL``, ``GYM_RUNTIME_SANDBOX_TOKEN``). Select it with the
config block ``sandbox: {gym_runtime: {}}`` (``sandbox_provider: sandbox``); gym-runtime also puts
it in place of a provider its host cannot give.
"""

import logging
import os
import socket
from pathlib import Path

from nemo_gym.sandbox.providers.base import (
    SandboxCreateError,
    SandboxEndpoint,
    SandboxExecResult,
    SandboxHandle,
    SandboxSpec,
    SandboxStatus,
)

LOGGER = logging.getLogger(__name__)
URL_VAR, TOKEN_VAR = "GYM_RUNTIME_SANDBOX_URL", "GYM_RUNTIME_SANDBOX_TOKEN"
SLACK_S = 30.0  # beyond a command's own timeout, for the daemon's answer


class GymRuntimeProvider:
    """Sandboxes of the gym-runtime daemon. ``url``/``token`` default to the server's environment;
    ``default_timeout_s``: an exec's timeout when the caller gives none (NeMo Gym's default 180)."""

    name = "gym_runtime"

    def __init__(self, url=None, token=None, default_timeout_s=180.0, **options):
        self._url = (url or os.environ.get(URL_VAR) or "").rstrip("/")
        self._token = token or os.environ.get(TOKEN_VAR) or ""
        self._default_timeout_s = default_timeout_s
        if options:
            LOGGER.warning("gym_runtime sandbox provider ignores options %s", ", ".join(sorted(options)))
        if not self._url or not self._token:
            raise SandboxCreateError(f"the gym_runtime sandbox provider needs {URL_VAR} and {TOKEN_VAR}, which "
                                     "gym-runtime sets for the servers it starts; this process was not started by it")
        self._clients = {}

    def _client(self):
        import asyncio

        import httpx

        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None or client.is_closed:
            # TCP_NODELAY: a request's head and body leave as two writes; with Nagle the body waits
            # for the daemon's delayed ACK (40 ms on Linux) on every call
            transport = httpx.AsyncHTTPTransport(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
            client = self._clients[loop] = httpx.AsyncClient(
                base_url=self._url, trust_env=False, timeout=httpx.Timeout(None, connect=30.0), transport=transport,
                headers={"Authorization": f"Bearer {self._token}"})
        return client

    async def _call(self, method, path, handle=None, *, expect=(200,), **kw):
        headers = kw.pop("headers", {})
        if handle is not None and (handle.raw or {}).get("lease"):
            headers["X-Sandbox-Lease"] = handle.raw["lease"]
        resp = await self._client().request(method, path, headers=headers, **kw)
        if resp.status_code not in expect:
            try:
                err = resp.json()["error"]
                msg = f"[{err['code']}] {err['message']}" + (f" (hint: {err['hint']})" if err.get("hint") else "")
            except (ValueError, KeyError, TypeError):
                msg = f"HTTP {resp.status_code}: {resp.text[:500]}"
            raise RuntimeError(msg)
        return resp

    async def create(self, spec: SandboxSpec) -> SandboxHandle:
        res = spec.resources
        body = {"image": spec.image, "ttl_s": spec.ttl_s, "workdir": spec.workdir, "env": dict(spec.env),
                "ports": list(spec.ports),
                "resources": {k: getattr(res, k) for k in ("cpu", "memory_mib", "disk_gib", "gpu", "gpu_type")}}
        try:
            resp = await self._call("POST", "/v1/sandboxes", json=body, expect=(201,))
        except RuntimeError as e:
            raise SandboxCreateError(str(e)) from None
        data = resp.json()
        return SandboxHandle(sandbox_id=data["sandbox_id"], provider_name=self.name,
                             raw={"lease": data["lease"], "workdir": data.get("workdir")})

    async def exec(self, handle, command, *, cwd=None, env=None, timeout_s=None, user=None) -> SandboxExecResult:
        timeout = self._default_timeout_s if timeout_s is None else timeout_s
        resp = await self._call("POST", f"/v1/sandboxes/{handle.sandbox_id}/exec", handle,
                                json={"command": command, "cwd": cwd, "env": env, "timeout_s": timeout,
                                      "user": user}, timeout=None if timeout is None else timeout + SLACK_S)
        d = resp.json()
        return SandboxExecResult(stdout=d["stdout"], stderr=d["stderr"], return_code=int(d["return_code"]),
                                 error_type=d.get("error_type"))

    async def upload_file(self, handle, source_path: Path, target_path: str) -> None:
        def chunks():
            with open(source_path, "rb") as f:
                while block := f.read(1 << 20):
                    yield block

        async def body():
            for block in chunks():
                yield block

        await self._call("PUT", f"/v1/sandboxes/{handle.sandbox_id}/files", handle, params={"path": target_path},
                         content=body(), expect=(204,))

    async def download_file(self, handle, source_path: str, target_path: Path) -> None:
        target_path = Path(target_path)
        target_path.parent.mkdir(parents=True, exist_ok=True)
        headers = {}
        if (handle.raw or {}).get("lease"):
            headers["X-Sandbox-Lease"] = handle.raw["lease"]
        async with self._client().stream("GET", f"/v1/sandboxes/{handle.sandbox_id}/files",
                                          params={"path": source_path}, headers=headers) as resp:
            if resp.status_code != 200:
                await resp.aread()
                try:
                    err = resp.json()["error"]
                    raise FileNotFoundError(f"[{err['code']}] {err['message']}")
                except (ValueError, KeyError, TypeError):
                    raise RuntimeError(f"HTTP {resp.status_code}: {resp.text[:500]}") from None
            with open(target_path, "wb") as f:
                async for block in resp.aiter_bytes():
                    f.write(block)

    async def status(self, handle) -> SandboxStatus:
        try:
            resp = await self._call("GET", f"/v1/sandboxes/{handle.sandbox_id}", handle, expect=(200, 404))
        except Exception:
            return SandboxStatus.UNKNOWN
        if resp.status_code == 404:
            return SandboxStatus.STOPPED
        return SandboxStatus.RUNNING if resp.json().get("status") == "running" else SandboxStatus.STOPPED

    async def endpoint(self, handle, port: int) -> SandboxEndpoint:
        """SupportsSandboxEndpoint: a URL this server reaches for a port the spec declared."""
        d = (await self._call("GET", f"/v1/sandboxes/{handle.sandbox_id}/endpoints/{int(port)}", handle)).json()
        return SandboxEndpoint(endpoint=d["endpoint"], headers=d.get("headers") or {})

    async def close(self, handle) -> None:
        await self._call("DELETE", f"/v1/sandboxes/{handle.sandbox_id}", handle, expect=(204,))

    async def aclose(self) -> None:
        for client in list(self._clients.values()):
            try:
                await client.aclose()
            except RuntimeError:  # a client of a loop that is gone
                pass
        self._clients.clear()

    # ConnectableProvider: lend a sandbox to another server of the environment
    async def serialize_handle(self, handle, *, scope=None) -> dict:
        return {"sandbox_id": handle.sandbox_id, "lease": (handle.raw or {}).get("lease"),
                "workdir": (handle.raw or {}).get("workdir")}

    async def connect(self, descriptor) -> SandboxHandle:
        handle = SandboxHandle(sandbox_id=str(descriptor["sandbox_id"]), provider_name=self.name,
                               raw={"lease": descriptor.get("lease"), "workdir": descriptor.get("workdir")})
        await self._call("GET", f"/v1/sandboxes/{handle.sandbox_id}", handle)
        return handle
