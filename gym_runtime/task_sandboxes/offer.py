"""Which sandbox provider each config gets on this host (docs/runtime.md, "Task sandboxes").

NeMo Gym 0.7.0 servers name their provider in their config: ``sandbox_provider: NAME`` refers to a
top-level block ``NAME: {<provider>: {...}, default_metadata?: {...}}``, or ``sandbox_provider:
{<provider>: {...}}`` is the block itself (``nemo_gym/sandbox/config.py``). Under
``GYM_RUNTIME_SANDBOX_PROVIDER`` (the operator's):

* ``auto`` (default): a block naming a provider this host cannot give becomes ``{gym_runtime: {}}``
  (``default_metadata`` kept), and the start says which block, what it named, why that provider
  is not here, and how to keep it: ``docker`` without a ``docker`` binary and daemon socket,
  ``apptainer`` / ``enroot`` without their binary, the remote services (``opensandbox``,
  ``daytona``, ``e2b``, ``ecs_fargate``, ``openshell``: a service, its credentials and egress to
  it, none of which a training pod has by default), and ``local`` (no isolation, and it writes
  into the server's read-only tree);
* ``gym_runtime``: every block becomes ``gym_runtime``;
* ``config``: every block stays as the config says.

Only the config's resolved data is rewritten (what the servers read), never the package's files.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Any

RESERVED = {"default_metadata"}
OURS = "gym_runtime"
REMOTE = {"opensandbox": "the OpenSandbox service", "daytona": "Daytona's service", "e2b": "E2B's service",
          "ecs_fargate": "AWS ECS", "openshell": "an OpenShell service"}


def _binary(name: str) -> Callable[[], str | None]:
    return lambda: None if shutil.which(name) else f"no `{name}` binary on PATH"


def _docker() -> str | None:
    if not shutil.which("docker"):
        return "no `docker` binary on PATH"
    if not os.environ.get("DOCKER_HOST") and not os.path.exists("/var/run/docker.sock"):
        return "no docker daemon socket (/var/run/docker.sock, DOCKER_HOST)"
    return None


CHECKS: dict[str, Callable[[], str | None]] = {
    "docker": _docker, "apptainer": _binary("apptainer"), "enroot": _binary("enroot"),
    "local": lambda: "it runs model-written code unconfined on the host and writes into the server's read-only tree",
    **{name: (lambda what=what: f"it needs {what}, its credentials and egress to it") for name, what in REMOTE.items()},
}


def _provider(block: Any) -> str | None:
    if not isinstance(block, dict):
        return None
    keys = [k for k in block if k not in RESERVED]
    return keys[0] if len(keys) == 1 and isinstance(keys[0], str) else None


def _blocks(data: dict[str, Any], instances: dict[str, Any]) -> list[tuple[str, dict, str]]:
    """Every provider block servers use: ``(where, parent mapping, key)``; a named block once."""
    found: list[tuple[str, dict, str]] = []
    seen: set[str] = set()

    def walk(node: Any, path: str, inst: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "sandbox_provider":
                    if isinstance(v, str) and isinstance(data.get(v), dict) and v not in seen:
                        seen.add(v)
                        found.append((f"`{v}` (named by {inst}.{path}{k})", data, v))
                    elif isinstance(v, dict):
                        found.append((f"{inst}.{path}{k}", node, k))
                else:
                    walk(v, f"{path}{k}.", inst)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}{i}.", inst)

    for name in instances:
        walk(data.get(name), "", name)
    return found


def has_blocks(data: dict[str, Any], instances: dict[str, Any]) -> bool:
    """Whether any server names a sandbox provider."""
    return bool(_blocks(data, instances))


def offer(data: dict[str, Any], instances: dict[str, Any], mode: str, available: str | None) -> list[str]:
    """Rewrite the provider blocks of ``data`` (the merged config, in place) for ``mode``; returns
    one note per block rewritten or worth a word. ``available``: why this daemon cannot give
    ``gym_runtime`` sandboxes (None when it can)."""
    notes: list[str] = []
    if mode == "config":
        return notes
    for where, parent, key in _blocks(data, instances):
        block = parent[key]
        name = _provider(block)
        if name is None or name == OURS:
            if name == OURS and available:
                notes.append(f"sandbox provider {where}: gym_runtime, but this host cannot make task sandboxes "
                             f"({available})")
            continue
        why = "GYM_RUNTIME_SANDBOX_PROVIDER=gym_runtime" if mode == OURS else (CHECKS.get(name) or (lambda: None))()
        if why is None:
            continue
        parent[key] = {OURS: {}, **{k: v for k, v in block.items() if k in RESERVED}}
        tail = "" if mode == OURS else "; set GYM_RUNTIME_SANDBOX_PROVIDER=config to keep it"
        notes.append(f"sandbox provider {where}: {name!r} cannot be given here ({why}); it gets gym_runtime "
                     f"(task sandboxes of this daemon) instead{tail}")
        if available:
            notes[-1] += f", but this host cannot make those either ({available})"
    return notes
