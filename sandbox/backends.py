"""The sandbox backend: what differs between sandbox kinds, one object per kind (docs/runtime.md,
"Sandbox backends"; docs/architecture.md §6).

The daemon makes one backend per run (:func:`make_backend`, from the settings) and every caller
asks it, never its name:

* ``await backend.reap_leftovers()`` -> ids of the sandboxes a dead daemon of the same state
  slot left (deleted before anything is created);
* ``await backend.start(policy, work_dir, require_full=..., level=...)`` -> the environment's
  sandbox: the object servers are spawned by (``allocate_port``, ``publish``,
  ``expose_host_service``, ``expose_inside``, ``await prepare(specs, say)`` -> progress lines
  (what it made for the first starts, e.g. the private tree copies made without bubblewrap;
  ``say`` takes the lines of what it goes on making in the background),
  ``parent_interpreters(servers)`` -> the interpreters whose servers will be forked from a
  preloaded parent (known before any spec is made), ``spawn_after(spec)`` -> a future to wait
  for before spawning ``spec`` (a preloaded parent still importing) or None,
  ``spawn(spec)``, ``close()``, ``level``, ``report``, ``processes``, ``denials``;
  :class:`sandbox.Sandbox` is the local one);
* ``await backend.check()`` -> what ``doctor`` prints: the backend, the service and its version,
  what isolation it gives (``{"backend", "isolation", "gives", ...}``);
* ``await backend.close()`` -> drops its connection (after the sandboxes are closed);
* ``backend.ray_scope``: where the cluster of a server that uses Ray can be (``environment``: one
  the environment's servers share, the private head or a joined one; ``server``: each server's
  own, inside its sandbox), read by :func:`gym_runtime.ray.target.choose` (:func:`ray_scope` by name).

Backends: :class:`LocalBackend` (``local``: namespaces and bubblewrap on this host, the default)
and :class:`sandbox.opensandbox.backend.OpenSandboxBackend` (``opensandbox``: the operator's
OpenSandbox server).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from .policy import EgressPolicy

LOCAL_GIVES = {
    "full": "user, network, pid, mount, ipc and uts namespaces (bubblewrap), an egress proxy enforcing "
    "the allowlist, per-server cgroup limits",
    "partial": "network namespace and egress proxy; no private /proc (masked-/proc fallback); without "
    "bubblewrap each server runs from a private copy of its tree (what it writes there stays out "
    "of the package)",
    "none": "no isolation: servers share the host's network, files and processes (egress not enforced); each "
    "runs from a private copy of its tree (what it writes there stays out of the package)",
}


class LocalBackend:
    """Today's sandbox on this host (:class:`sandbox.Sandbox`); nothing outlives the daemon (each
    server dies with its pid namespace or process group), so there is nothing to reap."""

    name = "local"
    host_isolation = True  # the isolation is this host's (probed, and forced lower by --isolation)
    ray_scope = "environment"  # servers share one network: a private Ray head, or a joined cluster's node
    close_step = ("sandbox (forwards, proxy, netns holder)", 5.0)  # teardown step: name, deadline (s)

    async def reap_leftovers(self) -> list[str]:
        return []

    async def start(
        self, policy: EgressPolicy, work_dir: Path, *, require_full: bool = False, level: str | None = None
    ) -> Any:
        """:meth:`sandbox.Sandbox.start` (raises :class:`~gym_runtime.errors.IsolationError`)."""
        from .core import Sandbox

        return await Sandbox.start(policy, work_dir, require_full=require_full, level=level)

    async def check(self) -> dict[str, Any]:
        from .probe import probe_isolation

        report = await asyncio.to_thread(probe_isolation)
        level = report.level.value
        return {
            "backend": self.name,
            "status": "ok",
            "isolation": level,
            "gives": LOCAL_GIVES[level],
            "reasons": list(report.reasons),
        }

    async def close(self) -> None:
        return None


def ray_scope(name: str) -> str:
    """The ``ray_scope`` of backend ``name`` (``local`` | ``opensandbox``) without making it (``doctor``)."""
    if name == "local":
        return LocalBackend.ray_scope
    from .opensandbox.backend import OpenSandboxBackend

    return OpenSandboxBackend.ray_scope


def make_backend(name: str, connection: Any = None, labels: Any = None) -> Any:
    """The backend ``name`` (``local`` | ``opensandbox``, checked by the settings). ``connection``
    (:class:`~sandbox.opensandbox.connection.OpenSandboxConnection`) and ``labels``
    (:class:`~sandbox.opensandbox.spec.RunLabels`) are the OpenSandbox backend's; it raises
    :class:`~gym_runtime.errors.SandboxServiceSettingsError` ``GR-OSB-SETTINGS`` without a
    connection or an image."""
    if name == "local":
        return LocalBackend()
    from .opensandbox.backend import OpenSandboxBackend

    return OpenSandboxBackend(connection, labels)
