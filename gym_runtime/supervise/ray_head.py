"""The private Ray head the daemon starts when servers need Ray and no cluster was given (case C26).

ONE head per environment, started as a supervised sandboxed process (``ray start --head --block``)
in the sandbox network namespace, so servers reach its GCS at ``127.0.0.1:<port>`` and nothing
outside the sandbox can. It runs from a server venv's own ``bin/ray`` when one has Ray: a Ray
driver refuses a cluster started by another Ray or Python version, and Gym's venvs pin
``ray[default]`` to one version (NeMo Gym 0.4.0 `nemo_gym/global_config.py`, the `ray[default]` pin). Its temp dir is short (unix
socket paths are limited to 107 bytes) and shared read-write with the servers, whose drivers
connect to the raylet's sockets there; it is removed when the environment stops.

Why Ray servers run at ``partial`` isolation (host ``/proc`` bound read-only, own pid namespace,
network namespace and filesystem view kept): a Ray driver (``ray.init(address=...)``, called by
every Gym SDK server at start-up) finds its node's raylet by scanning the process table for a
``raylet --node_id=...`` command line (``ray/_private/services.py`` ``find_node_ids``); in a
private pid namespace it never sees one and fails after 60 s with "No node info found matching
attributes". Ray Client (``ray://``) would avoid the scan but adds one driver process per server on
the head and is not how Gym servers join a cluster.

Lean start (what Gym servers use: ``ray.init(address=...)`` and tasks): no dashboard UI, no
autoscaler monitor (a fixed one-node cluster has nothing to scale; ``--no-monitor``), and no idle
workers started ahead of tasks (``RAY_enable_worker_prestart=0``,
``RAY_prestart_worker_first_driver=0``: otherwise one Python worker per CPU, ~100 MB each, would
start with the head and again when the first server connects; a server's first task pays the worker
start instead). The GCS, the raylet with its two agents, the API server, the log monitor (task
output reaches the servers' logs) and Ray Client's server remain: ``ray start`` has no switch for
them.

Quiet start: with the dashboard off, Ray still loads its usage-stats module, which asks three cloud
metadata services (169.254.169.254, metadata.google.internal) unless ``~/ray_bootstrap_config.yaml``
exists, and posts a "usage stats disabled" report to usage-stats.ray.io even when
``RAY_USAGE_STATS_ENABLED=0`` (ray 2.60 ``dashboard/modules/usage_stats/usage_stats_head.py``).
Each would be an ``egress DENY`` line. So the head's HOME (its temp dir) holds an empty bootstrap
config, and ``RAY_USAGE_STATS_REPORT_URL`` points at a closed loopback port.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

READY_TEXT = "Ray runtime started"
# Ray (2.60 ``ray/_private/services.py``) replaces ``--node-ip-address 127.0.0.1`` by the host's
# routable address and then listens on every interface; with this switch off its node address is
# the loopback one and the head listens on loopback only. Set for the private head and for the
# drivers (servers) that join it, so both agree on the node address.
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
DEFAULT_TEMP_DIR = Path("/tmp/ray")  # where a cluster started without --temp-dir keeps its sockets


def ray_binary(pythons: Iterable[Path]) -> Path:
    """``bin/ray`` of the first server venv that has one, else the daemon's own (dev dependency)."""
    for py in pythons:
        candidate = Path(py).parent / "ray"
        if candidate.exists():
            return candidate
    return Path(sys.executable).with_name("ray")


def make_temp_dir() -> Path:
    """A fresh short directory for the head's sessions and sockets (and its HOME, holding an empty
    ``ray_bootstrap_config.yaml``: see the module doc)."""
    path = Path(tempfile.mkdtemp(prefix="gr-ray-", dir="/tmp"))
    (path / "ray_bootstrap_config.yaml").write_text("{}\n")
    return path


def remove_temp_dir(path: Path | None) -> None:
    """Delete a temp dir made by :func:`make_temp_dir` (never anything else)."""
    if path is not None and path.name.startswith("gr-ray-") and path.parent == Path("/tmp"):
        shutil.rmtree(path, ignore_errors=True)


# Listeners of a head whose defaults are fixed ports (dashboard agent 52365, Ray Client 10001 where
# installed...): each gets a port of its own, so a head at isolation none never collides with
# another Ray on the host (e.g. a training job's cluster on the same node).
PORT_FLAGS = ("--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--runtime-env-agent-port",
              "--metrics-export-port", "--node-manager-port", "--object-manager-port")
CLIENT_PORT_FLAG = "--ray-client-server-port"  # only where Ray Client is installed (it needs ``grpc``)


def has_ray_client(ray_bin: Path) -> bool:
    """True when the venv of ``ray_bin`` has Ray Client's dependency (``grpc``): ``ray start`` then
    runs its client server, on 10001 unless told otherwise (Ray 2.60 ``scripts.py``)."""
    return any((ray_bin.parent.parent / "lib").glob("python*/site-packages/grpc/__init__.py"))


def head_argv(ray_bin: Path, gcs_port: int, temp_dir: Path, ports: Iterable[int]) -> list[str]:
    """``ray start --head --block`` on loopback with what Gym servers use (see the module doc): no
    dashboard, no autoscaler monitor (a fixed one-node cluster), no usage stats; ``ports``: one free
    port per flag of :data:`PORT_FLAGS`, then one for Ray Client's server (used where it is
    installed, :func:`has_ray_client`)."""
    flags = PORT_FLAGS + ((CLIENT_PORT_FLAG,) if has_ray_client(ray_bin) else ())
    given = [a for flag, port in zip(flags, ports) for a in (flag, str(port))]
    return [str(ray_bin), "start", "--head", "--block", "--port", str(gcs_port), "--node-ip-address", "127.0.0.1",
            *given, "--include-dashboard", "false", "--no-monitor", "--disable-usage-stats",
            "--temp-dir", str(temp_dir)]


def head_env(ray_bin: Path, temp_dir: Path) -> dict[str, str]:
    """The head's complete environment (no ``RAY_ADDRESS``, nothing from the daemon's shell; usage
    stats off and their report sent nowhere, see the module doc; loopback only, :data:`LOOPBACK_ENV`)."""
    return {"PATH": f"{ray_bin.parent}:/usr/local/bin:/usr/bin:/bin", "HOME": str(temp_dir), "LANG": "C.UTF-8",
            "RAY_USAGE_STATS_ENABLED": "0", "RAY_USAGE_STATS_REPORT_URL": "http://127.0.0.1:9/",
            "RAY_USAGE_STATS_PROMPT_ENABLED": "0", "PYTHONUNBUFFERED": "1", **LOOPBACK_ENV,
            # no idle workers started ahead of tasks (one per CPU at start and at the first driver)
            "RAY_enable_worker_prestart": "0", "RAY_prestart_worker_first_driver": "0"}
