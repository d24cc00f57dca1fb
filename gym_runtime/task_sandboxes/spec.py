"""A ``SandboxSpec`` as the daemon takes it: checked and bounded, since a server's request is untrusted input.

The shape is NeMo Gym 0.7.0's ``SandboxSpec`` (``nemo_gym/sandbox/providers/base.py``) as the
``gym_runtime`` provider sends it: ``image``, ``ttl_s``, ``workdir``, ``env``, ``resources``
(``cpu``, ``memory_mib``, ``disk_gib``, ``gpu``), ``ports``. ``files`` are uploaded by Gym's own
``AsyncSandbox.start`` after the create; ``entrypoint``, ``metadata`` and ``provider_options`` mean
nothing here and are ignored.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gym_runtime.task_sandboxes.settings import TaskSandboxSettings

MAX_ENV_BYTES = 256 << 10


class TaskSandboxError(Exception):
    """One failure of a task-sandbox request: ``code`` (``GR-SANDBOX-TASK-*``), ``status`` (HTTP),
    ``message`` (names the server, the sandbox or the image) and ``hint``."""

    def __init__(self, code: str, message: str, status: int = 400, hint: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.status, self.hint = code, message, status, hint

    def to_dict(self) -> dict[str, Any]:
        out = {"code": self.code, "message": self.message}
        if self.hint:
            out["hint"] = self.hint
        return {"error": out}


@dataclass(frozen=True)
class BoxRequest:
    """What a box is made from: ``image`` (None: the host root), ``workdir`` (absolute or None),
    ``env``, ``limits`` (:class:`sandbox.taskbox.BoxLimits`), ``ttl_s``, ``ports``."""

    image: str | None
    workdir: str | None
    env: dict[str, str]
    limits: Any
    ttl_s: float | None
    ports: tuple[int, ...] = field(default_factory=tuple)


def _bad(owner: str, what: str) -> Exception:
    return TaskSandboxError("GR-SANDBOX-TASK-SPEC", f"server {owner!r} asked for a task sandbox with {what}", 400)


def box_request(spec: Mapping[str, Any], settings: TaskSandboxSettings, owner: str) -> BoxRequest:
    """Check ``spec``; raises ``GR-SANDBOX-TASK-SPEC`` naming the field. Memory is the spec's
    ``memory_mib`` capped by ``GYM_RUNTIME_SANDBOX_MEMORY_MB`` (its default when the spec names none);
    CPU is the spec's ``cpu``, capped by this host's cores."""
    from sandbox.taskbox import BoxLimits

    if not isinstance(spec, Mapping):
        raise _bad(owner, "a spec that is not a mapping")
    image = spec.get("image")
    if image is not None and (not isinstance(image, str) or len(image) > 512):
        raise _bad(owner, f"image {str(image)[:80]!r} (a reference string)")
    workdir = spec.get("workdir")
    if workdir is not None and (
        not isinstance(workdir, str) or not workdir.startswith("/") or "\0" in workdir or ".." in workdir.split("/")
    ):
        raise _bad(owner, f"workdir {str(workdir)[:80]!r} (an absolute path without '..')")
    env = spec.get("env") or {}
    if not isinstance(env, Mapping) or not all(
        isinstance(k, str) and k and "=" not in k and "\0" not in k and isinstance(v, str) and "\0" not in v
        for k, v in env.items()
    ):
        raise _bad(owner, "env that is not a mapping of names to strings")
    if sum(len(k) + len(v) for k, v in env.items()) > MAX_ENV_BYTES:
        raise _bad(owner, f"env over {MAX_ENV_BYTES} bytes")
    res = spec.get("resources") or {}
    if not isinstance(res, Mapping):
        raise _bad(owner, "resources that are not a mapping")
    if res.get("gpu"):
        raise _bad(owner, f"gpu: {res['gpu']} (task sandboxes of this runtime have no GPUs)")
    try:
        cpu = float(res["cpu"]) if res.get("cpu") is not None else None
        mem = int(res["memory_mib"]) if res.get("memory_mib") is not None else None
        ttl = float(spec["ttl_s"]) if spec.get("ttl_s") is not None else None
        ports = tuple(int(p) for p in spec.get("ports") or ())
    except (TypeError, ValueError) as e:
        raise _bad(owner, f"a resource, ttl_s or port that is not a number ({e})") from None
    if (
        (cpu is not None and cpu <= 0)
        or (mem is not None and mem <= 0)
        or (ttl is not None and ttl <= 0)
        or any(not 0 < p < 65536 for p in ports)
    ):
        raise _bad(owner, "a cpu, memory_mib, ttl_s or port <= 0 (or a port above 65535)")
    cap = settings.memory_mb
    memory = min(mem, cap) if (mem and cap) else (mem or cap)
    cores = len(os.sched_getaffinity(0))
    return BoxRequest(
        image, workdir, dict(env), BoxLimits(memory, settings.pids, min(cpu, cores) if cpu else None), ttl, ports
    )
