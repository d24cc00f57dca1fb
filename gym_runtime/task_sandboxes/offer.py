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

With an OpenSandbox server configured (``OPENSANDBOX_DOMAIN``), an ``opensandbox`` block (NeMo Gym
0.7.0's own provider) is kept under ``auto`` and ``config``: its task sandboxes go to that server
through the daemon's gate (:mod:`.osb_gate`), so its ``connection`` is the gate's
(:func:`gate_connection`; each server's address and token are put into that server's own view of
the config at start, :func:`scope_view`), never the config's or the operator's key.

Only the config's resolved data is rewritten (what the servers read), never the package's files.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

RESERVED = {"default_metadata"}
OURS = "gym_runtime"
OSB = "opensandbox"
# the domain a kept opensandbox block holds until a server's view gets the gate's address: a name
# under .invalid never resolves, so a view that missed it fails closed
GATE_PLACEHOLDER = "gym-runtime-gate.invalid"
REMOTE = {
    "opensandbox": "the OpenSandbox service",
    "daytona": "Daytona's service",
    "e2b": "E2B's service",
    "ecs_fargate": "AWS ECS",
    "openshell": "an OpenShell service",
}


def _binary(name: str) -> Callable[[], str | None]:
    return lambda: None if shutil.which(name) else f"no `{name}` binary on PATH"


def _remote(what: str) -> Callable[[], str | None]:
    return lambda: f"it needs {what}, its credentials and egress to it"


def _docker() -> str | None:
    if not shutil.which("docker"):
        return "no `docker` binary on PATH"
    if not os.environ.get("DOCKER_HOST") and not os.path.exists("/var/run/docker.sock"):
        return "no docker daemon socket (/var/run/docker.sock, DOCKER_HOST)"
    return None


CHECKS: dict[str, Callable[[], str | None]] = {
    "docker": _docker,
    "apptainer": _binary("apptainer"),
    "enroot": _binary("enroot"),
    "local": lambda: "it runs model-written code unconfined on the host and writes into the server's read-only tree",
    **{name: _remote(what) for name, what in REMOTE.items()},
}


def _provider(block: Any) -> str | None:
    if not isinstance(block, dict):
        return None
    keys = [k for k in block if k not in RESERVED]
    return keys[0] if len(keys) == 1 and isinstance(keys[0], str) else None


@dataclass
class Block:
    """One provider block servers use: ``where`` (for notes), ``parent[key]`` is the block, ``path``
    its dotted key in the config, ``users`` the server instances using it (a named block may be
    named by several)."""

    where: str
    parent: dict
    key: str
    path: str
    users: list[str]

    @property
    def provider(self) -> str | None:
        return _provider(self.parent[self.key])


def provider_blocks(data: dict[str, Any], instances: Any) -> list[Block]:
    """Every provider block servers use (:class:`Block`), a named block once."""
    found: list[Block] = []
    named: dict[str, Block] = {}

    def walk(node: Any, path: str, inst: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "sandbox_provider":
                    if isinstance(v, str) and isinstance(data.get(v), dict):
                        if v not in named:
                            named[v] = Block(f"`{v}` (named by {inst}.{path}{k})", data, v, v, [])
                            found.append(named[v])
                        if inst not in named[v].users:
                            named[v].users.append(inst)
                    elif isinstance(v, dict):
                        found.append(Block(f"{inst}.{path}{k}", node, k, f"{inst}.{path}{k}", [inst]))
                else:
                    walk(v, f"{path}{k}.", inst)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}{i}.", inst)

    for name in instances:
        walk(data.get(name), "", name)
    return found


def keeps_opensandbox(mode: str, remote: str | None) -> bool:
    """Whether an ``opensandbox`` block goes to the operator's OpenSandbox server (``remote``: its
    URL, None when none is configured) under provider mode ``mode``."""
    return remote is not None and mode != OURS


def gate_connection(block: dict) -> None:
    """Point the ``opensandbox`` provider block ``block`` at the daemon's gate: ``domain`` the
    placeholder (:data:`GATE_PLACEHOLDER`), no ``api_key``, ``protocol: http``,
    ``use_server_proxy: true`` (every execd call goes through the gate); the other connection
    settings (timeouts, transport) are the config's."""
    inner = block.get(OSB)
    if not isinstance(inner, dict):
        inner = block[OSB] = {}
    conn = inner.get("connection")
    if not isinstance(conn, dict):
        conn = inner["connection"] = {}
    conn.update(domain=GATE_PLACEHOLDER, api_key=None, protocol="http", use_server_proxy=True)


def scope_view(view: dict[str, Any], instance: str, instances: Any, address: str, token: str) -> None:
    """In ``view`` (one server's copy of the config), give every ``opensandbox`` block ``instance``
    uses the gate's ``address`` (``host:port`` as the server reaches it) and the server's own
    ``token`` as its ``api_key``; blocks of other servers are left as they are."""
    for b in provider_blocks(view, instances):
        if instance in b.users and b.provider == OSB:
            gate_connection(b.parent[b.key])
            b.parent[b.key][OSB]["connection"].update(domain=address, api_key=token)


def has_blocks(data: dict[str, Any], instances: dict[str, Any]) -> bool:
    """Whether any server names a sandbox provider."""
    return bool(provider_blocks(data, instances))


def offer(
    data: dict[str, Any], instances: dict[str, Any], mode: str, available: str | None, remote: str | None = None
) -> list[str]:
    """Rewrite the provider blocks of ``data`` (the merged config, in place) for ``mode``; returns
    one note per block rewritten or worth a word. ``available``: why this daemon cannot give
    ``gym_runtime`` sandboxes (None when it can); ``remote``: the operator's OpenSandbox server
    (its URL) when one is configured, where ``opensandbox`` blocks then go (module doc)."""
    notes: list[str] = []
    for b in provider_blocks(data, instances):
        block, name = b.parent[b.key], b.provider
        if name == OSB and keeps_opensandbox(mode, remote):
            gate_connection(block)
            notes.append(
                f"sandbox provider {b.where}: 'opensandbox' is kept: its task sandboxes are made on the "
                f"OpenSandbox server {remote} through this daemon (each server its own credentials; "
                "images approved by GYM_RUNTIME_OPENSANDBOX_TASK_IMAGES)"
            )
            continue
        if mode == "config":
            continue
        if name is None or name == OURS:
            if name == OURS and available:
                notes.append(
                    f"sandbox provider {b.where}: gym_runtime, but this host cannot make task sandboxes ({available})"
                )
            continue
        why = "GYM_RUNTIME_SANDBOX_PROVIDER=gym_runtime" if mode == OURS else (CHECKS.get(name) or (lambda: None))()
        if why is None:
            continue
        if name == OSB and mode == OURS and remote is not None:
            why += f" (the OpenSandbox server {remote} is not used for task sandboxes under this mode)"
        b.parent[b.key] = {OURS: {}, **{k: v for k, v in block.items() if k in RESERVED}}
        tail = "" if mode == OURS else "; set GYM_RUNTIME_SANDBOX_PROVIDER=config to keep it"
        if name == OSB and mode != OURS:
            tail = "; configure the operator's OpenSandbox server (OPENSANDBOX_DOMAIN, OPENSANDBOX_API_KEY) to keep it"
        notes.append(
            f"sandbox provider {b.where}: {name!r} cannot be given here ({why}); it gets gym_runtime "
            f"(task sandboxes of this daemon) instead{tail}"
        )
        if available:
            notes[-1] += f", but this host cannot make those either ({available})"
    return notes
