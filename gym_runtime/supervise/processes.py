"""Every process of a running environment by role and size, for ``/processes`` and ``status``.

The daemon's whole process tree (psutil) is walked once; each process gets a ``role``:

=========================  ===============================================================
``daemon``                 the daemon itself
``server``                 a Gym server's Python (``member`` names it) and what it started
``sandbox``                bubblewrap parents of a server (``member`` names it), the network
                           namespace holder, the orphan watchdog
``ray``                    the private Ray head's processes (``component``: ``gcs_server``,
                           ``raylet``, ``dashboard agent``, ``runtime-env agent``,
                           ``log monitor``, ``api server``, ``worker``, ``head holder``
                           (ray/hold/), ``ray start`` while it starts the cluster)
``task sandbox``           the processes of the task sandboxes a server made (``member`` names the
                           server; ``component``: ``bubblewrap``, ``keeper``, ``joiner``, or the
                           command's own name), gym_runtime/task_sandboxes/
``model``                  the built-in stub model
``build``                  uv and bytecode compilers
``other``                  anything else (never expected)
=========================  ===============================================================

Sizes are RSS and, when readable, PSS (shared pages split among their users) in MiB.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import psutil

_RAY = (
    ("gcs_server", "gcs_server"),
    ("raylet", "raylet"),
    ("dashboard/agent.py", "dashboard agent"),
    ("ray::DashboardAgent", "dashboard agent"),  # the title Ray gives the agents once they run
    ("runtime_env/agent/main.py", "runtime-env agent"),
    ("ray::RuntimeEnvAgent", "runtime-env agent"),
    ("log_monitor.py", "log monitor"),
    ("dashboard/dashboard.py", "api server"),
    ("ray::", "worker"),
    ("default_worker.py", "worker"),
    ("ray.util.client.server", "ray client server"),
    ("gym_runtime_ray_hold.py", "head holder"),
    ("/bin/ray start", "ray start"),
)
MIB = 1024 * 1024


def _component(p: psutil.Process) -> str:
    try:
        text = " ".join([p.name(), *p.cmdline()])
    except psutil.Error:
        return "?"
    return next((label for needle, label in _RAY if needle in text), p.name())


def _subtree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def account(
    members: Iterable[Any], helpers: dict[int, str], daemon_pid: int | None = None, boxes: dict[int, str] | None = None
) -> list[dict[str, Any]]:
    """One row per process of the daemon's tree: ``pid``, ``role``, ``member``, ``component``,
    ``rss_mb``, ``pss_mb`` (None when unreadable). ``members``: the supervisor's members (their
    ``proc.pid`` roots a subtree; ``kind`` ``server``/``ray``/``model``); ``helpers``: other known
    pids -> their name (``netns holder``, ``preloaded parent``, ``orphan watchdog``); ``boxes``: pids of task sandboxes ->
    the server that owns them."""
    daemon_pid = daemon_pid or os.getpid()
    owner: dict[int, tuple[str, str | None]] = {}
    for m in members:
        proc = getattr(m, "proc", None)
        if proc is None or proc.pid is None or proc.poll() is not None:  # no pid: it runs on a Ray node
            continue
        role = {"server": "server", "ray": "ray", "model": "model"}.get(m.kind, "other")
        for p in _subtree(proc.pid):
            owner.setdefault(p.pid, (role, m.name))
    rows = []
    for p in _subtree(daemon_pid):
        try:
            name = p.name()
            rss = p.memory_info().rss
        except psutil.Error:
            continue
        try:
            pss: float | None = p.memory_full_info().pss / MIB
        except (psutil.Error, AttributeError):
            pss = None
        role, member = owner.get(p.pid, ("other", None))
        component = None
        if p.pid == daemon_pid:
            role = "daemon"
        elif boxes and p.pid in boxes:
            role, member = "task sandbox", boxes[p.pid]
            component = "joiner" if "_joiner.py" in " ".join(_cmdline(p)) else None
        elif p.pid in helpers:
            role, component = "sandbox", helpers[p.pid]
        elif name == "bwrap":
            role, component = "sandbox", "bubblewrap"
        elif role == "ray":
            component = _component(p)
        elif role == "other" and (name == "uv" or "import compileall" in " ".join(_cmdline(p))):
            role = "build"
        rows.append(
            {
                "pid": p.pid,
                "role": role,
                "member": member,
                "component": component or name,
                "rss_mb": round(rss / MIB, 1),
                "pss_mb": round(pss, 1) if pss is not None else None,
            }
        )
    return rows


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per role: ``processes``, ``rss_mb``, ``pss_mb`` (sums; PSS None when any was unreadable)."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        s = out.setdefault(r["role"], {"processes": 0, "rss_mb": 0.0, "pss_mb": 0.0})
        s["processes"] += 1
        s["rss_mb"] = round(s["rss_mb"] + r["rss_mb"], 1)
        s["pss_mb"] = None if s["pss_mb"] is None or r["pss_mb"] is None else round(s["pss_mb"] + r["pss_mb"], 1)
    return out


def of_environment(supervisor: Any, sandboxes: Iterable[Any], task_sandboxes: Any = None) -> dict[str, Any]:
    """``{"processes": rows, "by_role": totals}`` for a running environment: the supervisor's
    members, the sandboxes' own processes (namespace holders, preloaded parents), the orphan watchdog and the task sandboxes of
    ``task_sandboxes`` (a :class:`~gym_runtime.task_sandboxes.service.TaskSandboxService`; blocking:
    ~1-5 ms a process)."""
    helpers = {pid: what for sb in sandboxes if sb is not None for pid, what in sb.helpers.items()}
    if supervisor.watchdog is not None:
        helpers[supervisor.watchdog.proc.pid] = "orphan watchdog"
    boxes = {
        p.pid: rec.owner for rec in list(getattr(task_sandboxes, "boxes", {}).values()) for p in rec.box.processes()
    }
    rows = account(list(supervisor.members.values()), helpers, boxes=boxes)
    return {"processes": rows, "by_role": summary(rows)}
