"""The preloaded parent of a group's sandbox: imports the modules its servers share once, then forks
each server its launcher asks for (docs/runtime.md, "One sandbox per venv").

Stdlib only, never imported by the daemon: it runs as ``python -c <_immortal.py + this file> SOCKET MODULES`` with
the venv's interpreter, as an execd command of the group's sandbox (:mod:`.groups`), and so it
shares no helper with the rest of the sandbox package but ``sandbox/_immortal.py``. It is not dumpable (``PR_SET_DUMPABLE`` 0),
so neither it nor a server forked from it can be read by another process of the sandbox.

``SOCKET``: an AF_UNIX SEQPACKET path it listens on at once (launchers queue there while it imports);
``MODULES``: a JSON list of dotted names, each imported when the venv has it. A module that fails is
skipped; a Python thread alive after the imports (a fork carries none) makes it answer every
request ``{"no": why}``, and the launcher then starts its server itself. What it imported is then
made immortal (``sandbox/_immortal.py``, whose text the command holds before this file's: CPython 3.12
and 3.13, elsewhere nothing) and frozen (``gc.freeze``), as ``sandbox/_zygote.py`` does: a server's
reference counts never write those objects and its collections never walk them, so their pages stay
shared with the parent and its siblings. Its first line on stdout (execd's log of its command):
``preloaded parent: N module(s) imported, M objects made immortal``, then why it forks nothing, if so.

A launcher's request: ``{"name", "argv", "cwd", "env", "nofile"}`` with its stdout and stderr attached
(``SCM_RIGHTS``). The parent forks a child, answers ``{"pid": N}`` and later, once the child ended,
``{"status": S}`` (a wait status); it never reads the connection after the fork. The child: a
session of its own (its process group is the server's tree), named ``name`` (its ``comm``: its
command line stays the parent's), stdout and stderr the launcher's (the
command's log), RLIMIT_NOFILE ``nofile``, ``cwd``; it reads its private variables from the
launcher (one message) and becomes the server, as ``python argv[1:]`` would run it, with ``env``
plus those as its whole environment. A thread of the child waits for the launcher's end of the
connection: when the launcher is gone (its command interrupted or killed), the child's process
group is killed.
"""

import ctypes
import gc
import json
import os
import select
import signal
import socket
import sys
import threading

libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
# sandbox/_immortal.py's (its text comes before this file's in the command: .groups' PARENT)
immortalize = globals()["immortalize"]
fill_pools = globals()["fill_pools"]


def _become(conn, req):
    """In the forked child: never returns (module doc)."""
    import runpy

    os.setsid()
    libc.prctl(15, req["name"].encode()[:15], 0, 0, 0)  # PR_SET_NAME: its comm, as ps shows it
    data = conn.recv(1 << 20)
    if not data:  # the launcher gave up on it: it never runs
        os._exit(126)
    private = json.loads(data)
    if req.get("nofile"):
        import resource

        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        n = req["nofile"] if hard == resource.RLIM_INFINITY else min(req["nofile"], hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, hard))

    def watch():
        while conn.recv(1 << 16):
            pass
        os.killpg(0, signal.SIGKILL)  # the launcher is gone: so is the server

    threading.Thread(target=watch, daemon=True).start()
    env = dict(req["env"])
    env.update(private)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(req["cwd"])
    sys.pycache_prefix = env.get("PYTHONPYCACHEPREFIX") or None  # its own bytecode settings, not the parent's
    sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
    if "numpy.random" in sys.modules:  # seeded in the parent: siblings would share its state
        sys.modules["numpy.random"].seed()
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(write_through=True)
    argv, base = req["argv"], [p for p in sys.path[1:] if p]
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if argv[1] == "-m":
        sys.argv = [argv[2], *argv[3:]]
        sys.path[:] = [req["cwd"], *extra, *base]
        runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv[1:])
        sys.path[:] = [os.path.dirname(os.path.abspath(argv[1])), *extra, *base]
        runpy.run_path(argv[1], run_name="__main__")


def _fork(conn, req, fds, listener):
    pid = os.fork()
    if pid:
        return pid
    try:
        listener.close()
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        for fd in {devnull, *fds} - {0, 1, 2}:
            os.close(fd)
        for sig in (signal.SIGTERM, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _become(conn, req)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, int) and e.code is not None:
            print(e.code, file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    except BaseException:  # what `python script` prints, then status 1
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main():
    path, modules = sys.argv[1], json.loads(sys.argv[2])
    if os.path.exists(path):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    os.chmod(path, 0o600)
    listener.listen(256)
    for name in modules:
        try:
            __import__(name)
        except BaseException:  # noqa: BLE001 - a module the venv lacks or that fails: its servers import it
            pass
    gc.collect()
    immortal = immortalize()  # no server writes the pages of what it imported by counting references
    gc.freeze()  # what it imported is left out of the servers' collections: their pages stay shared
    fill_pools()  # no server makes its first objects in the pages of the parent's pools
    threads = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    refuse = f"the preloaded parent has Python threads after its imports ({', '.join(threads)})" if threads else None
    print(
        f"preloaded parent: {len(modules)} module(s) imported, {immortal:,} objects made immortal"
        + (f"; {refuse}" if refuse else ""),
        flush=True,
    )
    children = {}  # pid -> the launcher's connection
    rd, wr = os.pipe()
    os.set_blocking(wr, False)
    signal.set_wakeup_fd(wr)
    signal.signal(signal.SIGCHLD, lambda *a: None)
    while True:
        ready, _, _ = select.select([listener, rd], [], [], 5.0)
        if rd in ready:
            os.read(rd, 4096)
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = children.pop(pid, None)
            if conn is not None:
                try:
                    conn.send(json.dumps({"status": status}).encode())
                except OSError:
                    pass
                conn.close()
        if listener not in ready:
            continue
        conn, _ = listener.accept()
        fds = []
        try:
            data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 2)
            if refuse or len(fds) != 2:
                conn.send(json.dumps({"no": refuse or "no stdout and stderr given"}).encode())
                conn.close()
                continue
            pid = _fork(conn, json.loads(data), fds, listener)
            conn.send(json.dumps({"pid": pid}).encode())
            children[pid] = conn
        except (OSError, ValueError):
            conn.close()
        finally:
            for fd in fds:
                os.close(fd)


main()
