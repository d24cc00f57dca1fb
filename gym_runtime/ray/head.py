"""The private Ray head the daemon starts when servers need Ray and no cluster was given (case C26).

ONE head per environment, started as a supervised sandboxed process (the holder,
``hold/gym_runtime_ray_hold.py``, running ``ray start --head``) in the sandbox network namespace, so servers reach its GCS at ``127.0.0.1:<port>`` and nothing
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
start instead). No Ray Client server: ``ray start`` runs one on every venv that has ``grpc``
(Gym's do) and has no switch against it, but it calls the ``RAY_START_HOOK`` named in its
environment with its ``RayParams`` before it starts anything (Ray 2.60 ``ray/scripts/scripts.py``);
the holder's hook clears the client server's port, as on a venv without ``grpc``. No API server
(the dashboard head, serving the state, job and log APIs: no Gym server uses them; ``ray start``
always starts it, and the hook has it skipped the way Ray skips one that cannot start). No
``ray start --block`` left waiting beside the cluster (a Python process with all of Ray imported,
~200 MiB RSS): the holder, a stdlib-only script (~12 MiB), runs ``ray start --head`` without
``--block``, adopts the processes it leaves as a child subreaper and holds them (its module doc:
what ends the head, what a stop does; where no child subreaper can be had, as under qemu-user,
it runs Ray's own ``ray start --block`` instead). The GCS, the raylet with its two agents (the raylet exits
when one of them does) and the log monitor (task output reaches the servers' logs through it:
Gym's ``ray.init`` keeps ``log_to_driver``) remain.

Head first: the head starts before the servers (wave 0), and they start once it is ready, as
NeMo Gym's own launcher starts Ray before its servers (``nemo_gym/cli`` calls ``initialize_ray``
first). Started beside them, the head competes with their imports for the CPU, and Ray's windows
are fixed: ``ray start`` gives the raylet 30 s to register (Ray 2.60 ``ray/_private/node.py``, not
configurable), a driver 20 s to reach the GCS and 60 s to find a node. On a busy host the head
then fails to start ("The current node timed out during startup") and the servers fail to join it.
Head first costs ~1.5 s to ready on an idle 2-core host (docs/performance-history.md). Under qemu-user
emulation no head serves a server even alone (docs/container.md, "arm64 under emulation").

Prompt start: the raylet connects to its object store (a thread of its own process) right after
starting it, loses that race on every start, and sleeps ``raylet_client_connect_timeout_milliseconds``
(1 s by default) before its next try; ``PROMPT_STORE`` makes the interval 50 ms with 200 tries, the
same 10 s window (Ray 2.60 ``src/ray/common/ray_config_def.h``: 1,000 ms, 10 attempts). Measured alone
on an idle 2-core host: ``ray start --head`` up in 2.2 s instead of 3.2 s (docs/performance-history.md).

Quiet start: with the dashboard off, Ray still loads its usage-stats module, which asks three cloud
metadata services (169.254.169.254, metadata.google.internal) unless ``~/ray_bootstrap_config.yaml``
exists, and posts a "usage stats disabled" report to usage-stats.ray.io even when
``RAY_USAGE_STATS_ENABLED=0`` (ray 2.60 ``dashboard/modules/usage_stats/usage_stats_head.py``).
Each would be an ``egress DENY`` line. So the head's HOME (its temp dir) holds an empty bootstrap
config, and ``RAY_USAGE_STATS_REPORT_URL`` points at a closed loopback port.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

import psutil

# The holder's line once `ray start` has exited and the cluster's processes are its own (hold/).
READY_TEXT = "gym-runtime ray head: holding"
# Ray (2.60 ``ray/_private/services.py``) replaces ``--node-ip-address 127.0.0.1`` by the host's
# routable address and then listens on every interface; with this switch off its node address is
# the loopback one and the head listens on loopback only. Set for the private head and for the
# drivers (servers) that join it, so both agree on the node address.
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
DEFAULT_TEMP_DIR = Path("/tmp/ray")  # where a cluster started without --temp-dir keeps its sockets
# A node's own Ray settings that a driver on the node (a server that joins the cluster) must share
# with the node's raylet: how it resolves the node's address (a loopback node stays loopback, as
# with LOOPBACK_ENV) and where the node keeps its sessions.
NODE_RAY_ENV = ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_TMPDIR")
# usage stats off and their report sent nowhere ("Quiet start" in the module doc)
USAGE_STATS_OFF = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_USAGE_STATS_REPORT_URL": "http://127.0.0.1:9/",
    "RAY_USAGE_STATS_PROMPT_ENABLED": "0",
}
# no idle workers started ahead of tasks (one per CPU at start and at the first driver; "Lean start")
NO_PRESTART = {"RAY_enable_worker_prestart": "0", "RAY_prestart_worker_first_driver": "0"}
# a raylet's connection to its own object store retried every 50 ms, 200 times (the same 10 s as Ray's
# 1 s x 10), rather than a 1 s sleep after the first try, which loses the race with the store's start
# at every start ("Prompt start" in the module doc)
PROMPT_STORE = {"RAY_raylet_client_connect_timeout_milliseconds": "50", "RAY_raylet_client_num_connect_attempts": "200"}


def ray_binary(pythons: Iterable[Path]) -> Path:
    """``bin/ray`` of the first server venv that has one, else the daemon's own (dev dependency)."""
    for py in pythons:
        candidate = Path(py).parent / "ray"
        if candidate.exists():
            return candidate
    return Path(sys.executable).with_name("ray")


def interpreter_of(executable: Path, timeout_s: float = 60.0) -> str | None:
    """The program the kernel runs in place of ``executable`` (a Python), or None when it runs as
    itself: the first word of a started process's ``/proc/PID/cmdline``, which is the
    ``binfmt_misc`` interpreter (qemu-user's ``/usr/libexec/qemu-binfmt/aarch64-binfmt-P``) for a
    binary of another architecture. The process is started with ``-I -S`` and ends when its stdin
    closes. ``subprocess.Popen`` returns once the exec is under way; the new program's command line
    can still read empty for a moment (the kernel sets it up after the old memory is released), so
    it is read until it is not."""
    proc = subprocess.Popen(
        [str(executable), "-I", "-S", "-c", "import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline, first = time.monotonic() + timeout_s, ""
    try:
        while not first and proc.poll() is None and time.monotonic() < deadline:
            with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
                first = f.read().split(b"\0", 1)[0].decode(errors="replace")
            if not first:
                time.sleep(0.001)
    finally:
        proc.stdin.close()  # type: ignore[union-attr]  # started with stdin=PIPE
        proc.wait(timeout_s)
    return None if first in ("", str(executable)) else first


def check_native(ray_bin: Path, why: str) -> None:
    """Refuse a private head whose binaries run through an interpreter (CPU emulation), before
    anything starts: a Ray driver finds its node's raylet by the executable name of a process
    command line (Ray 2.60 ``ray/_private/services.py``, ``_is_raylet_process``), which under
    emulation names the interpreter, so no server could ever join (docs/container.md, "arm64 under
    emulation"). ``why``: why the head is wanted (the Ray target's source, ``needed by a, b``).
    Raises :class:`StartError` (``GR-RAY-EMULATED``, exit 3)."""
    from gym_runtime.errors import StartError

    interpreter = interpreter_of(ray_bin.parent / "python")
    if interpreter is not None:
        raise StartError(
            f"ray: a private Ray head is wanted ({why}), but this host runs {ray_bin.parent / 'python'} "
            f"through {interpreter} (CPU emulation), where Ray's drivers cannot find their node's raylet: "
            "they look for a process whose executable is named raylet, and every emulated process is "
            "named after the interpreter",
            code="GR-RAY-EMULATED",
            hint="run the image built for this host's architecture, or declare `ray_enabled = False` "
            "on the server classes that never call Ray (NeMo Gym 0.7)",
        )


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


def remove_stale_temp_dirs(min_age_s: float = 60.0) -> list[Path]:
    """Delete the temp dirs of heads whose daemon was killed (SIGKILL: nothing removed its dir);
    returns them. A dir is stale when it was made more than ``min_age_s`` seconds ago (a starting
    head's dir has no process yet) and no process names it, as its working directory (the head's
    holder runs there) or on its command line (Ray's processes name their session's dirs)."""
    dirs = [p for p in Path("/tmp").glob("gr-ray-*") if p.is_dir() and not p.is_symlink()]
    now = time.time()
    dirs = [p for p in dirs if now - _made_at(p) > min_age_s]
    if not dirs:
        return []
    used: set[Path] = set()
    for proc in psutil.process_iter(["cwd", "cmdline"]):
        names = [proc.info.get("cwd") or "", *(proc.info.get("cmdline") or [])]
        used.update(d for d in dirs if any(str(d) in n for n in names))
    stale = [d for d in dirs if d not in used]
    for d in stale:
        remove_temp_dir(d)
    return stale


def _made_at(path: Path) -> float:
    try:
        return path.lstat().st_mtime
    except OSError:
        return time.time()


# Listeners of a head whose defaults are fixed ports (dashboard agent 52365...): each gets a port of
# its own, so a head at isolation none never collides with another Ray on the host (e.g. a training
# job's cluster on the same node).
PORT_FLAGS = (
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--runtime-env-agent-port",
    "--metrics-export-port",
    "--node-manager-port",
    "--object-manager-port",
)
# The head's holder (and ``ray start``'s RAY_START_HOOK): a plain script in a directory of its own,
# which the head's sandbox binds read-only.
HOLD_DIR = Path(__file__).with_name("hold")
HOLD_SCRIPT = HOLD_DIR / "gym_runtime_ray_hold.py"


def head_argv(ray_bin: Path, gcs_port: int, temp_dir: Path, ports: Iterable[int]) -> list[str]:
    """The head's command: the holder (:data:`HOLD_SCRIPT`, run by the venv's own interpreter,
    ``-I -S``: the stdlib only) running ``ray start --head`` on loopback with what Gym servers use
    (see the module doc): no dashboard, no autoscaler monitor (a fixed one-node cluster), no usage
    stats, no Ray Client server (the holder's hook); ``ports``: one free port per flag of
    :data:`PORT_FLAGS`."""
    given = [a for flag, port in zip(PORT_FLAGS, ports, strict=True) for a in (flag, str(port))]
    return [
        str(ray_bin.parent / "python"),
        "-I",
        "-S",
        str(HOLD_SCRIPT),
        str(ray_bin),
        "start",
        "--head",
        "--port",
        str(gcs_port),
        "--node-ip-address",
        "127.0.0.1",
        *given,
        "--include-dashboard",
        "false",
        "--no-monitor",
        "--disable-usage-stats",
        "--temp-dir",
        str(temp_dir),
    ]


def head_env(ray_bin: Path, temp_dir: Path) -> dict[str, str]:
    """The head's complete environment (no ``RAY_ADDRESS``, nothing from the daemon's shell; usage
    stats off and their report sent nowhere, see the module doc; loopback only, :data:`LOOPBACK_ENV`)."""
    return {
        "PATH": f"{ray_bin.parent}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(temp_dir),
        "LANG": "C.UTF-8",
        **USAGE_STATS_OFF,
        "PYTHONUNBUFFERED": "1",
        **LOOPBACK_ENV,
        **NO_PRESTART,
        **PROMPT_STORE,
    }
