"""The ``opensandbox`` backend (:mod:`sandbox.backends`): servers in sandboxes of the operator's
OpenSandbox server, one sandbox per server (docs/runtime.md, "Sandbox backends")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gym_runtime.errors import SandboxServiceSettingsError

from ..policy import EgressPolicy
from .connection import OpenSandboxConnection
from .service import SandboxService
from .spec import RunLabels

GIVES = (
    "one sandbox per server on the operator's OpenSandbox server (a container or a Kata VM, as the operator "
    "runs it): its own filesystem, processes and /tmp, trees and venvs read-only, egress by the sandbox's "
    "networkPolicy (deny by default), memory and CPU limits; secrets only in the sandbox of the server "
    "that uses them"
)


def _require(conn: OpenSandboxConnection | None) -> OpenSandboxConnection:
    if conn is None:
        raise SandboxServiceSettingsError(
            "sandbox backend opensandbox needs an OpenSandbox server, but OPENSANDBOX_DOMAIN is not set",
            code="GR-OSB-SETTINGS",
            hint="set OPENSANDBOX_DOMAIN=host:port (and OPENSANDBOX_API_KEY, "
            "GYM_RUNTIME_OPENSANDBOX_IMAGE), or use --sandbox-backend local",
        )
    return conn


class OpenSandboxBackend:
    """``connection``: how to reach the server; ``labels``: this run's labels (None: ``doctor``,
    which creates nothing)."""

    name = "opensandbox"
    host_isolation = False  # the service's sandboxes isolate; this host's namespaces are not used
    # no network spans the sandboxes: a server that uses Ray starts its own in its sandbox (NeMo Gym's
    # initialize_ray without ray_head_node_address); joining a cluster is refused (GR-OSB-RAY, gym_runtime/ray/target.py)
    ray_scope = "server"
    close_step = ("sandboxes on the OpenSandbox server (relays, deletion by the run's label)", 30.0)

    def __init__(self, connection: OpenSandboxConnection | None, labels: RunLabels | None) -> None:
        self.conn = _require(connection)
        self.labels = labels
        self.service = SandboxService(self.conn)

    async def reap_leftovers(self) -> list[str]:
        """Delete the sandboxes a dead daemon of this state slot left (by label) before anything is created."""
        assert self.labels is not None
        await self.service.version()  # GR-OSB-UNREACHABLE at once (listing retries for seconds first)
        return await self.service.reap(self.labels)

    async def start(
        self, policy: EgressPolicy, work_dir: Path, *, require_full: bool = False, level: str | None = None
    ) -> Any:
        """The environment's :class:`~sandbox.opensandbox.environment.OpenSandboxEnvironment`;
        ``require_full`` is met (every server is in a sandbox of its own); ``level`` (a forced
        local level) does not apply. Raises ``GR-OSB-*``."""
        from .environment import OpenSandboxEnvironment

        assert self.labels is not None
        if not self.conn.image:
            raise SandboxServiceSettingsError(
                "sandbox backend opensandbox needs the image servers run in, but "
                "GYM_RUNTIME_OPENSANDBOX_IMAGE is not set",
                code="GR-OSB-SETTINGS",
                hint="set it to an image the OpenSandbox server's runtime has: "
                "Debian-based, with the libraries the servers' Python needs",
            )
        if not self.conn.daemon_host:
            raise SandboxServiceSettingsError(
                "sandbox backend opensandbox needs the address sandboxes reach this "
                "daemon at, but GYM_RUNTIME_OPENSANDBOX_DAEMON_HOST is not set",
                code="GR-OSB-SETTINGS",
                hint="set it to this host's address on the "
                "sandboxes' network (the container bridge's gateway for a "
                "docker/podman runtime, the pod IP on Kubernetes)",
            )
        return await OpenSandboxEnvironment.open(self.service, self.labels, policy, Path(work_dir))

    async def check(self) -> dict[str, Any]:
        """What ``doctor`` says: server, version, whether the key is accepted, the isolation it gives."""
        out: dict[str, Any] = {"backend": self.name, **self.conn.describe(), "isolation": "opensandbox", "gives": GIVES}
        try:
            out["version"] = await self.service.version()
            await self.service.list_ids({"gym-runtime-probe": "1"}, "checking the API key")
            out["status"] = "ok"
        except Exception as e:
            to_dict = getattr(e, "to_dict", None)
            out.update(status="error", error=to_dict() if callable(to_dict) else {"message": str(e)})
        return out

    async def close(self) -> None:
        await self.service.close()
