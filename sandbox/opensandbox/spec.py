"""What one server's OpenSandbox sandbox is asked for: pure functions, no I/O (docs/runtime.md,
"Sandbox backends").

Each returns the request's piece in the server's wire format (``POST /v1/sandboxes`` of
opensandbox-server 1.1.1: ``networkPolicy``, ``resourceLimits``, ``volumes``, ``metadata``,
``timeout``); :func:`sdk_network_policy` and :func:`sdk_volumes` turn them into the SDK's models,
which the SDK converts back to exactly these shapes (a test holds them together).

* **Egress**: :func:`network_policy` maps the environment's :class:`~sandbox.policy.EgressPolicy`
  to ``{"defaultAction": "deny", "egress": [...]}``: the daemon's addresses (head server and the
  addresses servers reach their peers at) and the policy endpoints first, then, only while
  ``NMP_RL_SANDBOX_ALLOW_INTERNET`` is on, the operator's list and the ``*.com`` / ``*.org``
  defaults. OpenSandbox's egress sidecar matches names and CIDRs, not ports: an entry's port is
  not carried, and the local backend's check of the addresses a name resolves to (private ranges)
  has no counterpart there (docs/runtime.md says what stays unproven).
* **Labels**: every sandbox carries :data:`LABEL_RUN` (this run) and :data:`LABEL_OWNER` (the
  daemon's state slot on its host): only one daemon holds a slot at a time, so any sandbox with
  the slot's owner label and another run's id was left by a daemon that died (reap.py).
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox.limits import ResourceLimits
from sandbox.policy import DEFAULT_SUFFIXES, EgressPolicy, parse_ip_literal

LABEL_RUN = "gym-runtime-run"
LABEL_OWNER = "gym-runtime-owner"
LABEL_SERVER = "gym-runtime-server"
TTL_S = 600  # the reap timer: a sandbox of a daemon that died is deleted by the server after this
RENEW_EVERY_S = 120  # while the run lives its sandboxes' TTL is renewed this often (5 renewals per TTL)
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True)
class RunLabels:
    """``run``: this run's id (16 hex digits); ``owner``: the daemon's state slot on its host
    (16 hex digits of a hash of host name and slot path)."""

    run: str
    owner: str

    @classmethod
    def new(cls, slot: Path | str, hostname: str) -> RunLabels:
        """Labels for a new run of the daemon holding ``slot`` on ``hostname``."""
        owner = hashlib.sha256(f"{hostname}\0{Path(slot).resolve()}".encode()).hexdigest()[:16]
        return cls(uuid.uuid4().hex[:16], owner)

    def metadata(self, server: str) -> dict[str, str]:
        """The sandbox metadata (labels) of server ``server``'s sandbox; label values are cut to
        the 63 characters Kubernetes allows, other characters than ``[A-Za-z0-9_.-]`` become ``-``."""
        name = _LABEL_VALUE.sub("-", server)[:63].strip("-_.") or "server"
        return {LABEL_RUN: self.run, LABEL_OWNER: self.owner, LABEL_SERVER: name}

    def owner_filter(self) -> dict[str, str]:
        """The metadata filter listing every sandbox of this slot (any run)."""
        return {LABEL_OWNER: self.owner}


def _cidr(ip: str) -> str:
    addr = ipaddress.ip_address(ip)
    return f"{addr}/{32 if addr.version == 4 else 128}"


def network_policy(policy: EgressPolicy, daemon_addresses: Iterable[str] = ()) -> dict[str, Any]:
    """The sandbox's ``networkPolicy`` (module doc): ``defaultAction`` always ``deny``; ``egress``
    a list of ``{"action": "allow", "target": name | "*.suffix" | CIDR}`` without repeats, in this
    order: ``daemon_addresses`` (IP literals, as /32 or /128), policy endpoint hosts, then (internet
    on only) the operator's entries and the defaults. Loopback needs no rule (a sandbox's loopback
    is its own). Raises ValueError for a daemon address that is not an IP literal."""
    targets: list[str] = [_cidr(a) for a in daemon_addresses]
    for host, _port in policy.endpoints:
        ip = parse_ip_literal(host)
        if ip is not None and ip.is_loopback:
            continue
        targets.append(_cidr(str(ip)) if ip is not None else host)
    if policy.allow_internet:
        for entry in policy.operator_list:
            ip = parse_ip_literal(entry.pattern)
            targets.append(_cidr(str(ip)) if ip is not None else entry.pattern)
        targets += list(DEFAULT_SUFFIXES)
    return {"defaultAction": "deny", "egress": [{"action": "allow", "target": t} for t in dict.fromkeys(targets)]}


def resource_limits(limits: ResourceLimits, cpu: str) -> dict[str, str]:
    """``resourceLimits``: ``cpu`` as given, ``memory`` in ``Mi`` (left out when unlimited). The
    process limit (``limits.pids``) has no per-sandbox field: the operator's server sets it for
    every sandbox (docker runtime: ``[docker] pids_limit``; docs/runtime.md)."""
    out = {"cpu": cpu}
    if limits.memory_mb:
        out["memory"] = f"{limits.memory_mb}Mi"
    return out


def outermost(paths: Iterable[Path]) -> list[Path]:
    """``paths`` without repeats and without any path below another one of them, sorted."""
    unique = sorted(set(paths), key=lambda p: (len(p.parts), str(p)))
    kept: list[Path] = []
    for p in unique:
        if not any(k == p or k in p.parents for k in kept):
            kept.append(p)
    return sorted(kept)


def volumes(read_only: Sequence[Path | str], writable: Sequence[Path | str]) -> list[dict[str, Any]]:
    """``volumes``: every path as a host volume mounted at the same path (venvs hold absolute
    interpreter paths), read-only ones first. A path below another of the same kind is covered by
    it and left out; a writable path below a read-only one is kept (mounted over it). Names are
    ``ro-N`` / ``rw-N``. Paths are resolved; the server refuses any outside its
    ``[storage] allowed_host_paths``."""
    ro = outermost(Path(p).resolve() for p in read_only)
    rw = outermost(Path(p).resolve() for p in writable)
    rw_set = set(rw)
    ro = [p for p in ro if p not in rw_set]
    out = [
        {"name": f"ro-{i}", "host": {"path": str(p)}, "mountPath": str(p), "readOnly": True} for i, p in enumerate(ro)
    ]
    out += [
        {"name": f"rw-{i}", "host": {"path": str(p)}, "mountPath": str(p), "readOnly": False} for i, p in enumerate(rw)
    ]
    return out


def sdk_network_policy(wire: dict[str, Any]) -> Any:
    """:func:`network_policy`'s dict as the SDK's ``NetworkPolicy``."""
    from opensandbox.models.sandboxes import NetworkPolicy

    return NetworkPolicy.model_validate(wire)


def sdk_volumes(wire: list[dict[str, Any]]) -> list[Any]:
    """:func:`volumes`' dicts as the SDK's ``Volume`` models."""
    from opensandbox.models.sandboxes import Volume

    return [Volume.model_validate(v) for v in wire]
