"""Choose the Ray cluster servers use, explicitly and once (case C26).

Sources, first wins: ``--ray-address`` flag, the config's ``ray_head_node_address``, the
``RAY_ADDRESS`` variable of the daemon's environment. Values: ``host:port`` (a GCS address: join
it), ``auto`` (join the one running local cluster, found from its processes; none found is an
error, never a new cluster), ``local`` (start a private cluster).
With no value, a private cluster is started only when a server uses Ray (the release's rule,
:mod:`gym_runtime.ray.use`: a Gym SDK server before 0.7, whose ``run_webserver`` always
calls ``ray.init`` and would otherwise start one cluster *per server*; from 0.7 one whose class
does not declare ``ray_enabled = False``; any server declaring ``ray_enabled = True``); otherwise
Ray is not used at all.

The sandbox backend's ``ray_scope`` (:mod:`sandbox.backends`) says where a Ray-using server's
cluster can be: ``environment`` (``local``: one cluster every server of the environment reaches,
the private head or a joined one) or ``server`` (``opensandbox``: one sandbox per server, so no
cluster spans them). Under ``server`` the mode is ``own``: each server that uses Ray starts its
own cluster inside its sandbox, the way NeMo Gym's ``initialize_ray`` does when the global config
has no ``ray_head_node_address`` (``ray.init()`` with no address; Gym shuts it down at exit,
``maybe_ray_cluster_exit``). ``local`` given means the same there; an address to join (or
``auto``) is refused with ``GR-OSB-RAY``: a Ray driver joins a cluster only from one of its nodes.

Rules: a dashboard/jobs URL (``http://...:8265``) is rejected with a hint; joining checks that the
GCS port accepts a TCP connection within ``connect_timeout_s`` and names the address's source on
failure; the daemon stops only a cluster it started. ``RAY_ADDRESS`` is never passed to servers:
they get the chosen address as ``ray_head_node_address`` in ``NEMO_GYM_CONFIG_DICT``.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psutil

from gym_runtime.errors import IsolationError, SandboxServiceSettingsError, SettingsError, StartError


@dataclass(frozen=True)
class RayTarget:
    """The decision: ``mode`` ``none`` | ``join`` | ``local`` | ``own`` (each server's own cluster in
    its sandbox: the module doc); ``address`` (join: ``host:port``);
    ``source`` (``--ray-address``, ``config ray_head_node_address``, ``RAY_ADDRESS``, ``auto``,
    ``needed by <servers>``); ``needed_by``: servers that need Ray; ``without``: servers NeMo Gym
    would give a Ray driver that run without one (:mod:`gym_runtime.ray.use`)."""

    mode: str
    address: str | None = None
    source: str = ""
    needed_by: tuple[str, ...] = ()
    without: tuple[str, ...] = ()

    def describe(self) -> str:
        """One log line: ``ray: connected to H:P (from RAY_ADDRESS)`` and the like."""
        if self.mode == "join":
            return f"ray: joining the cluster at {self.address} (from {self.source})"
        if self.mode == "local":
            return f"ray: starting a private local instance ({self.source})"
        if self.mode == "own":
            return f"ray: each server that uses Ray starts its own in its sandbox ({self.source})"
        return "ray: not used (no address given and no server needs it)"

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "address": self.address,
            "source": self.source,
            "needed_by": list(self.needed_by),
            "without": list(self.without),
        }


def _split(address: str, source: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise SettingsError(
            f"{source}={address!r} is not a Ray GCS address host:port, 'auto' or 'local'",
            code="GR-RAY-ADDRESS",
            hint="use the head node's GCS address, e.g. 10.0.0.5:6379",
        )
    return host.strip("[]"), int(port)


def check_address(address: str, source: str) -> None:
    """Reject dashboard / Ray Client URLs (C26 case 1); raises :class:`SettingsError`."""
    low = address.lower()
    if low.startswith(("http://", "https://")):
        raise SettingsError(
            f"{source}={address} looks like a dashboard URL; ray.init needs the GCS address (host:6379) or 'auto'",
            code="GR-RAY-DASHBOARD-URL",
            hint=f"set {source} to the head node's GCS address host:port (`ray status` shows it)",
        )
    if low.startswith("ray://"):
        raise SettingsError(
            f"{source}={address} is a Ray Client address; servers join with the GCS address",
            code="GR-RAY-CLIENT-URL",
            hint="use host:port of the head node's GCS (default 6379)",
        )
    if low not in ("auto", "local"):
        _split(address, source)


def find_running_cluster() -> str | None:
    """The GCS address of the one running local cluster, or None. Running clusters are found from
    their processes' command lines (Ray's ``find_gcs_addresses``); Ray's address file
    (``/tmp/ray/ray_current_cluster``) only breaks a tie, since it can be missing (``ray start
    --block``, ray PR #32961) or name a cluster that is gone. Raises :class:`SettingsError` when
    several clusters run and the file names none of them. Imports Ray only when called."""
    try:
        from ray._private import services
    except ImportError:
        return None
    running = sorted({_over_loopback(a) for a in services.find_gcs_addresses()})
    if len(running) <= 1:
        return running[0] if running else None
    latest = services.find_bootstrap_address(None)
    if latest and _over_loopback(latest) in running:
        return _over_loopback(latest)
    raise SettingsError(
        f"ray address 'auto' is ambiguous: {len(running)} clusters run here ({', '.join(running)})",
        code="GR-RAY-AUTO",
        hint="give the GCS address host:port of the one to join",
    )


def _over_loopback(address: str) -> str:
    """``127.0.0.1:port`` for a GCS address on one of this host's own interfaces (Ray records the
    node IP, not loopback, even for ``--node-ip-address 127.0.0.1``; the GCS listens on all)."""
    host, _, port = address.rpartition(":")
    try:
        mine = {a.address for addrs in psutil.net_if_addrs().values() for a in addrs}
    except (OSError, psutil.Error):
        return address
    return f"127.0.0.1:{port}" if host.strip("[]") in mine else address


def wait_reachable(address: str, source: str, timeout_s: float) -> None:
    """TCP-connect to the GCS port within ``timeout_s`` (C26 case 2); raises :class:`StartError`."""
    host, port = _split(address, source)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return
    except OSError as e:
        raise StartError(
            f"ray: cannot reach the cluster at {address} (from {source}) within {timeout_s:g}s: {e.strerror or e}",
            code="GR-RAY-UNREACHABLE",
            hint=f"start that cluster, fix {source}, or unset it to let gym-runtime decide",
        ) from None


def given(flag: str | None, config_value: Any, environ: Mapping[str, str]) -> tuple[str, str] | None:
    """The address that decides, as ``(value, source)``, checked (a dashboard URL raises
    :class:`SettingsError` before anything is built); None when no source gives one."""
    for value, source in (
        (flag, "--ray-address"),
        (config_value, "config ray_head_node_address"),
        (environ.get("RAY_ADDRESS"), "RAY_ADDRESS"),
    ):
        if value not in (None, ""):
            value = str(value).strip()
            check_address(value, source)
            return value, source
    return None


def check_given(flag: str | None, config_value: Any, environ: Mapping[str, str], scope: str = "environment") -> None:
    """:func:`given`'s checks, and ``GR-OSB-RAY`` for a cluster to join under scope ``server``, before
    anything is built (which servers use Ray is known only then; :func:`choose` names them)."""
    chosen = given(flag, config_value, environ)
    if chosen is not None and chosen[0] != "local" and scope == "server":
        raise _no_join(*chosen, ())


def choose(
    flag: str | None, config_value: Any, environ: Mapping[str, str], needed_by: list[str], scope: str = "environment"
) -> RayTarget:
    """Decide the target (no I/O except ``auto`` discovery). ``scope``: the sandbox backend's
    ``ray_scope`` (module doc). Raises :class:`SettingsError`, and under scope ``server``
    :class:`SandboxServiceSettingsError` ``GR-OSB-RAY`` for an address to join."""
    needs = tuple(needed_by)
    chosen = given(flag, config_value, environ)
    private = "own" if scope == "server" else "local"
    if chosen is None:
        return RayTarget(private, None, "needed by " + ", ".join(needs), needs) if needs else RayTarget("none")
    value, source = chosen
    if value == "local":
        return RayTarget(private, None, f"{source}=local", needs)
    if scope == "server":  # check_given said so before the build, without the servers' names
        raise _no_join(value, source, needs)
    if value != "auto":
        return RayTarget("join", value, source, needs)
    found = find_running_cluster()
    if found is None:
        raise SettingsError(
            f"{source}=auto but no running Ray cluster was found on this host (no gcs_server process)",
            code="GR-RAY-AUTO",
            hint="start the cluster first, give its GCS address host:port, or use 'local' for a "
            "private instance; gym-runtime never starts a second cluster silently",
        )
    return RayTarget("join", found, f"{source}=auto (found running cluster)", needs)


def _no_join(value: str, source: str, needs: tuple[str, ...]) -> SandboxServiceSettingsError:
    """``GR-OSB-RAY``: a cluster to join (``value`` from ``source``) under a backend whose servers
    each run in a sandbox of their own."""
    users = f" ({', '.join(needs)} use{'s' if len(needs) == 1 else ''} Ray)" if needs else ""
    return SandboxServiceSettingsError(
        f"sandbox backend opensandbox cannot join the Ray cluster given by {source}={value}{users}: a Ray driver "
        "joins a cluster only from one of the cluster's nodes (ray.init(address=...) needs that node's raylet on "
        "its own host), and a server's sandbox is no node of it",
        code="GR-OSB-RAY",
        hint=f"unset {source} to let each server that uses Ray start its own in its sandbox (NeMo Gym's "
        "initialize_ray without ray_head_node_address), or use --sandbox-backend local to join the cluster "
        '(docs/runtime.md, "Sandbox backends")',
    )


def ray_level(target: RayTarget, requested: str | None, require_full: bool) -> str | None:
    """The isolation level for an environment whose servers use Ray. A Ray driver must see its
    node's raylet in the process table (see :mod:`gym_runtime.ray.head`), so with our
    private head servers run at ``partial`` (host ``/proc`` read-only, own network namespace);
    joining a cluster outside the sandbox needs the host network and its raylet's sockets, so
    ``none``. ``requested`` is the forced level or None (best available); a lower request is kept.
    Raises :class:`IsolationError` when full isolation is required."""
    if target.mode in ("none", "own") or not target.needed_by:  # own: each server's sandbox holds its Ray
        return requested
    from sandbox import probe_isolation

    best = requested or probe_isolation().level.value
    want = "none" if target.mode == "join" else "partial"
    if best == "none" or best == want:
        return requested
    if require_full:
        raise IsolationError(
            f"full isolation required (--require-isolation) but {', '.join(target.needed_by)} "
            "use Ray, whose drivers find their raylet by scanning the process table, which a "
            "private pid namespace hides"
            + (" (and a cluster outside the sandbox is only reachable on the host network)" if want == "none" else ""),
            code="GR-SANDBOX-RAY",
            hint="drop --require-isolation (Ray servers then run at 'partial': own network "
            "namespace and filesystem view, host /proc read-only), or declare `ray_enabled = False` "
            "on the server classes that never call Ray (NeMo Gym 0.7)",
        )
    return want
