"""The private Ray head's holder: starts the cluster with ``ray start --head`` and holds it.

Run as a plain script (``python -I -S gym_runtime_ray_hold.py RAY_BIN start --head ...``, the
stdlib only) as the head's supervised process, in place of ``ray start --head --block``: that
command stays alive only to wait, a Python process with all of Ray imported (~240 MiB RSS with a
Gym venv's packages), while this one holds the same cluster in ~10 MiB
(docs/performance-history.md, "A leaner Ray head").

1. It makes itself a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``), then runs the given
   ``ray start --head`` command WITHOUT ``--block``, with its own output (the head's log). That
   command starts the cluster and exits; the processes it started (GCS, raylet, log monitor) are
   then this process's children, so they stay inside the head's process tree and process group,
   where the daemon accounts for and stops them. Then it says ``gym-runtime ray head: holding N
   Ray processes``, the line the daemon waits for.
2. It holds: it reaps every child; when one of the processes ``ray start`` left behind ends, the
   head is broken (what ``ray start --block`` reports as "Some Ray subprocesses exited
   unexpectedly"): it says which one, kills the rest of its process group and exits 1, so the
   daemon sees the head fail. Other adopted processes (a task's orphaned subprocess) are reaped
   silently.
3. SIGTERM, SIGINT, SIGHUP: it kills its process group (the whole cluster: a drained raylet saves
   nothing the daemon keeps, the GCS keeps its tables in memory) and exits 0.

Where a child subreaper is refused (qemu-user emulation answers ``prctl(PR_SET_CHILD_SUBREAPER)``
with ``EINVAL``), or when the command given ends with ``--block``, Ray's own ``ray start --head
--block`` holds the head instead, as this process's child: Ray watches its processes and exits 1
when one ends unexpectedly ("Some Ray subprocesses exited unexpectedly", Ray 2.60
``ray/scripts/scripts.py``). The holder passes its output on and says the same ``holding N Ray
processes`` line once Ray says it blocks; a stop is handled as above; when ``ray start --block``
exits, the head is over (exit 1). It costs the waiting Python process with Ray imported that the
lean hold avoids.

It runs ``ray start`` as the venv's ``bin/ray`` would, with the command groups Ray adds to its
command line only when they import (Ray Serve's, the job and state commands: Ray 2.60
``ray/scripts/scripts.py`` takes their absence as a minimal install does) marked absent, which
none of ``start`` needs (:data:`LEAN_CLI`: 0.3 s of imports instead of 1.0 s).

The same file is ``ray start``'s ``RAY_START_HOOK`` (Ray 2.60 ``ray/scripts/scripts.py``: a
``module.function`` called with the head's ``RayParams`` before anything starts):
:func:`lean_params` turns off Ray Client's server, which ``ray start`` otherwise runs on every
venv that has ``grpc`` (Gym servers join with ``ray.init(address=...)``, never ``ray://``), and
its API server (the dashboard head, which no Gym server uses). This directory holds nothing else,
since it is on ``ray start``'s ``PYTHONPATH``; the hook removes it and itself from the environment
before Ray starts any process.
"""

import os
import signal
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
HOOK = "gym_runtime_ray_hold.lean_params"
PR_SET_CHILD_SUBREAPER = 36
# What `ray start --block` prints once the head is up and it starts watching (Ray 2.60
# ``ray/scripts/scripts.py``, after the head's address is written).
BLOCKING_TEXT = "This command will now block forever"
# Ray's command line, run by the venv's interpreter as ``bin/ray`` runs it, with the command groups
# it adds only when they import (Ray 2.60 ``ray/scripts/scripts.py``: ``serve``, ``job`` and the
# state commands, each in a ``try``/``except`` that a minimal Ray install takes) marked absent:
# ``ray start`` then imports in 0.3 s what took 1.0 s (Ray Serve pulls in pandas). argv: RAY_BIN ARGS...
LEAN_CLI = (
    "import sys\n"
    "for name in ('ray.serve.scripts', 'ray.dashboard.modules.job.cli', 'ray.util.state.state_cli'):\n"
    "    sys.modules[name] = None\n"
    "sys.argv[0] = sys.argv.pop(1)\n"
    "from ray.scripts.scripts import main\n"
    "sys.exit(main())\n"
)


def lean_params(ray_params, head):  # noqa: ARG001 - Ray's RAY_START_HOOK signature
    """``RAY_START_HOOK``: no Ray Client server (as on a venv without ``grpc``, which Ray
    supports); no API server (see :func:`_no_api_server`); and nothing of the hook for the
    processes Ray starts next."""
    ray_params.ray_client_server_port = None
    _no_api_server()
    os.environ.pop("RAY_START_HOOK", None)
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != HERE]
    if rest:
        os.environ["PYTHONPATH"] = os.pathsep.join(rest)
    else:
        os.environ.pop("PYTHONPATH", None)


def _no_api_server():
    """Skip the API server that ``ray start`` always starts (the dashboard head: the state, job and
    log APIs a dashboard or ``ray list`` use; ~120 MiB RSS and ~1.4 CPU s to start). Gym servers use
    none of them: they join with ``ray.init(address=...)`` and run tasks, which need the GCS, the
    raylet and its agents. The start function answers what it answers when the API server cannot
    start and the dashboard was not asked for: no URL and no process, after which the node starts
    the rest as usual (Ray 2.60 ``ray/_private/node.py``, ``start_api_server``). A Ray without that
    function starts its API server as before."""
    try:
        from ray._private import services
    except ImportError:
        return
    if callable(getattr(services, "start_api_server", None)):
        services.start_api_server = lambda *args, **kwargs: (None, None)


def _say(text):
    sys.stderr.write(f"gym-runtime ray head: {text}\n")
    sys.stderr.flush()


def _proc_field(pid, name):
    """A field of ``/proc/PID/status`` (``PPid``, ``NSpid``...) as a list of ints, or []."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(name + ":"):
                    return [int(v) for v in line.split()[1:]]
    except (OSError, ValueError):
        pass
    return []


def _stat(pid):
    """``(pid, ppid, pgrp)`` as ``/proc`` shows them for ``pid`` (``"self"`` or a number), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            head, tail = f.read().rsplit(")", 1)
        fields = tail.split()
        return int(head.split("(", 1)[0]), int(fields[1]), int(fields[2])
    except (OSError, ValueError, IndexError):
        return None


def _processes(ppid=None, pgrp=None):
    """``{pid: name}`` of the processes whose parent is ``ppid`` or whose process group is
    ``pgrp``, both as ``/proc`` shows them (zombies too: one of ``ray start``'s processes that ended
    after it stopped watching must end the head); pids of this process's own pid namespace.
    ``/proc`` may be the host's (a sandbox with its own pid namespace and the host's ``/proc``
    bound read-only): each match is named by the last entry of its ``NSpid``, its pid in the
    innermost namespace, which is ours."""
    me = _stat("self")
    out = {}
    for entry in os.listdir("/proc"):
        st = _stat(entry) if entry.isdigit() else None
        if st is None or st[0] == me[0] or not (st[1] == ppid or st[2] == pgrp):
            continue
        nspid = _proc_field(entry, "NSpid")
        try:
            with open(f"/proc/{entry}/comm") as f:
                name = f.read().strip()
        except OSError:
            name = "?"
        out[nspid[-1] if nspid else st[0]] = name
    return out


def _end(code, why=None):
    """SIGKILL every other process of this process group (the whole cluster: Ray's processes stay
    in it) and every child, reap, exit ``code``."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    if why:
        _say(why)
    me = _stat("self")
    for pid in _processes(ppid=me[0], pgrp=me[2]):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    while True:
        try:
            os.wait()
        except ChildProcessError:
            break
        except InterruptedError:
            continue
    os._exit(code)


def _say_held(ray, how=""):
    _say(f"holding {len(ray)} Ray processes{how}: " + ", ".join(f"{n} ({p})" for p, n in sorted(ray.items())))


def _hold_blocking(ray_argv, env):
    """Run ``ray start ... --block`` as the head's holder (module doc); never returns."""
    start = subprocess.Popen(ray_argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    held = False
    for line in iter(start.stdout.readline, b""):
        sys.stdout.buffer.write(line)
        sys.stdout.flush()
        if not held and BLOCKING_TEXT.encode() in line:
            held = True
            _say_held(_processes(ppid=start.pid), f" under `ray start --block` (pid {start.pid})")
    code = start.wait()
    _end(1, f"`ray start --block` exited with {code}: see its output above")


def _subreaper():
    """Make this process a child subreaper; None when done, else why it could not."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return f"prctl(PR_SET_CHILD_SUBREAPER) failed: {os.strerror(ctypes.get_errno())}"
    return None


def lean(ray_argv):
    """``RAY_BIN ARGS...`` (a venv's ``bin/ray``) as the venv's interpreter runs it through
    :data:`LEAN_CLI`; any other command as given."""
    python = os.path.join(os.path.dirname(os.path.realpath(ray_argv[0])), "python")
    if os.path.basename(ray_argv[0]) != "ray" or not os.path.exists(python):
        return ray_argv
    return [python, "-c", LEAN_CLI, *ray_argv]


def main():
    ray_argv = sys.argv[1:]
    if not ray_argv:
        _say("usage: gym_runtime_ray_hold.py RAY_BIN start --head ... [--block]")
        return 2
    ray_argv = lean(ray_argv)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: _end(0))
    path = [p for p in (HERE, os.environ.get("PYTHONPATH", "")) if p]
    env = {**os.environ, "RAY_START_HOOK": HOOK, "PYTHONPATH": os.pathsep.join(path)}
    blocking = "--block" in ray_argv
    refused = None if blocking else _subreaper()
    if refused:
        _say(f"{refused}: no child subreaper here, so Ray's own `ray start --block` holds the head")
        _hold_blocking([*ray_argv, "--block"], env)
    if blocking:
        _hold_blocking(ray_argv, env)
    start = subprocess.Popen(ray_argv, env=env)
    code = start.wait()
    if code != 0:
        _end(1, f"`ray start` exited with {code}: see its output above")
    ray = _processes(ppid=_stat("self")[0])  # what `ray start` left: GCS, raylet, log monitor
    if not ray:
        _end(1, "`ray start` left no process behind")
    _say_held(ray)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            _end(1, "no Ray process left")
        if pid in ray:  # any other: an adopted orphan (a task's subprocess), reaped and forgotten
            code = os.waitstatus_to_exitcode(status)
            how = f"signal {-code}" if code < 0 else f"exit code {code}"
            _end(1, f"Ray process {ray[pid]} (pid {pid}) ended ({how}); stopping the head")


if __name__ == "__main__":
    sys.exit(main())
