"""A preloaded parent for the servers of one venv: imports their shared modules once, forks each server.

Stdlib only, never imported by the daemon: it runs as ``python _zygote.py CTL_FD`` with the
venv's interpreter, inside a bubblewrap sandbox that binds every path its servers use and keeps
``CAP_SYS_ADMIN`` in the sandbox's own user namespace (docs/architecture.md, "Preloaded parents").
It never holds a secret: each server's private variables reach the server alone, after the fork.

Requests on the AF_UNIX SEQPACKET ``CTL_FD`` are one JSON object each, file descriptors attached
(``SCM_RIGHTS``):

* ``{"op": "preload", "modules": [...], "report": path | null}``: import each module that the
  venv has (a module it lacks is skipped; one whose import fails is reported); with ``report``,
  then write there (atomically) the source file of every module imported whose bytecode was not
  there to read (it was compiled in memory), each path ended by a NUL: the daemon compiles those into the
  venv's shared bytecode cache (``gym_runtime/venvs/bytecode.py``). Answer ``{"op": "preloaded", "ok": [...],
  "failed": {module: error}, "threads": [names], "seconds": s, "views": null | why}``;
  ``threads`` lists the Python threads alive afterwards, which a fork would not carry over, and
  ``views`` says why a child could not make its own mount namespace here (a trial fork); with
  either, the daemon forks nothing; ``immortal`` counts the objects made immortal
  (``sandbox/_immortal.py``'s ``immortalize``: 0 on an interpreter where that is not done), and ``unmapped`` the bytes
  of library pages the parent no longer maps (:func:`_unmap_file_pages`). A module of ``modules``
  that the venv lacks, or whose package lacks it, is skipped.
* ``{"op": "fork", "id", "name", "argv", "cwd", "env", "nofile", "hide", "keep", "resolv"}`` +
  fds (stdout, stderr, hello): a child named ``name`` (its ``comm``, as ``ps`` and ``top`` show
  it; its command line stays the parent's) in a session of its own and a mount namespace of its own, where
  ``hide`` (the other servers' writable paths) are covered, ``/tmp`` is a new tmpfs (with
  ``keep``, its own paths below it, bound again) and ``resolv`` (a file) is bound read-only on
  ``/etc/resolv.conf``; then RLIMIT_CORE 0 and RLIMIT_NOFILE
  ``nofile``, every capability dropped (bounding set too), ``PR_SET_NO_NEW_PRIVS``,
  ``PR_SET_DUMPABLE`` 0 (siblings cannot read its memory or environment) and
  ``PR_SET_PDEATHSIG``, and Landlock's signal scope (it can signal neither the parent nor
  another server). It then writes ``hello`` on the hello socket (the daemon reads its host
  pid from the socket's credentials and moves it into its cgroups), reads its private variables
  (JSON, to the socket's end) and becomes the server: ``argv`` is ``[python, script, args...]``
  or ``[python, "-m", module, args...]``, run by ``runpy`` as ``python`` would run it, with
  ``env`` plus the private variables as its whole environment. A server given a learning dir
  (``PYTHONPYCACHEPREFIX``) and a report file (``GYM_RUNTIME_PYCACHE_REPORT``) by a parent that
  reads the venv's shared cache reads that cache too, writes no bytecode, and appends to the report
  file each source its imports compile: as the parent, it compiles only what the cache lacks, where under
  its own prefix it would compile everything it imports after the fork. A step that fails writes
  ``error: ...`` on the hello socket instead, and the child exits 126. Answer on ``CTL_FD``
  only when the fork itself fails: ``{"id", "error"}``; later ``{"exit": id, "status": N}`` (a
  signal N is ``-N``) once the child ended.

End of the control socket ends the parent; its children end with it (``PR_SET_PDEATHSIG``).

The module is long because it runs on its own (stdlib only, with the venv's interpreter, before
any of the project's code can be imported), so it shares no helper with the rest of the sandbox
but ``_immortal.py`` (stdlib only too), which it loads from beside itself.
"""

import array
import ctypes
import errno
import gc
import importlib
import importlib.util
import json
import os
import select
import signal
import socket
import struct
import sys
import threading
import time
import warnings

REPORT_VAR = "GYM_RUNTIME_PYCACHE_REPORT"  # gym_runtime/venvs/bytecode.py's: a learning server's report file
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NAME, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 4, 15, 24, 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 4096, 16384, 1 << 18
LINUX_CAPABILITY_VERSION_3 = 0x20080522
SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_RESTRICT_SELF = 444, 446  # the same on x86_64 and aarch64
LANDLOCK_CREATE_RULESET_VERSION, LANDLOCK_SCOPE_SIGNAL = 1, 2
MAX_FDS = 3
MADV_DONTNEED = 4  # the same on x86_64 and aarch64 (asm-generic/mman-common.h)
libc = ctypes.CDLL(None, use_errno=True)
CHILDREN: dict[int, object] = {}  # pid -> request id


def _beside(name):
    """The stdlib-only module ``name`` of this file's directory (``sandbox/<name>.py``), loaded from
    its path: this file runs as a script (``python _zygote.py``, where ``-I`` or ``PYTHONSAFEPATH``
    would leave its directory off ``sys.path``), and tests load it by path too. Not put in
    ``sys.modules``: a server imports nothing of it."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_immortal = _beside("_immortal")  # immortalize(): shared with sandbox/opensandbox/_parent.py


def _check(ret, what):
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, "%s: %s" % (what, os.strerror(err)))


def _mount(src, target, fstype, flags, data=None):
    _check(
        libc.mount(src and src.encode(), target.encode(), fstype and fstype.encode(), flags, data and data.encode()),
        "mount %s" % target,
    )


def _drop_capabilities():
    for cap in range(64):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == 22:  # EINVAL: past the last
            break
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    _check(libc.capset(header, data), "capset")
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")


def _scope_signals():
    """Landlock's signal scope (``landlock(7)``, ABI 6, Linux 6.12): from now on this process and
    what it starts may signal (or trace) only themselves, not the parent nor another server."""
    abi = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, 0, LANDLOCK_CREATE_RULESET_VERSION)
    if abi < 6:
        raise OSError(
            errno.ENOSYS,
            "Landlock cannot scope signals on this kernel (ABI %s, 6 needed: Linux 6.12)"
            % (abi if abi >= 0 else "none"),
        )
    attr = ctypes.create_string_buffer(struct.pack("QQQ", 0, 0, LANDLOCK_SCOPE_SIGNAL), 24)
    fd = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, attr, 24, 0)
    if fd < 0:
        _check(-1, "landlock_create_ruleset")
    try:
        _check(libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, fd, 0), "landlock_restrict_self")
    finally:
        os.close(fd)


def _view(req):
    """The child's own mount namespace (module doc). The parent's mounts are locked (bubblewrap's
    nested user namespace), so nothing is unmounted: what the child must not see is covered by
    an empty read-only tmpfs (a path the host has removed since, which no lookup reaches, is left
    as it is), and its own paths below ``/tmp`` (``keep``) are bound again on top
    of its new ``/tmp``, each with the flags it had (read-only stays read-only)."""
    _check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    for path in req.get("hide", []):
        try:
            _mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "mode=000,size=4k")
        except FileNotFoundError:  # removed since the parent's view was made (a harvested learning dir): nothing to see
            pass
    if req.get("resolv"):  # a file of the parent's read-only view: the bind is read-only too
        _mount(req["resolv"], "/etc/resolv.conf", None, MS_BIND)
    held = [(path, os.open(path, os.O_PATH)) for path in req.get("keep", [])]
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    for path, fd in held:
        if os.path.isdir("/proc/self/fd/%d" % fd):
            os.makedirs(path, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "a").close()
        _mount("/proc/self/fd/%d" % fd, path, None, MS_BIND | MS_REC)  # keeps the mount's flags: read-only stays
        os.close(fd)


def _limits(req):
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if req.get("nofile"):
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        n = req["nofile"] if hard == resource.RLIM_INFINITY else min(req["nofile"], hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))


def _become(req, private):
    """Run the server as ``python argv[1:]`` would (module doc): an exception it does not catch is
    printed by ``sys.excepthook`` from its own frames on (none of this file's, none of runpy's) and
    ends it with status 1."""
    import runpy

    env = dict(req["env"])
    env.update(private)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(req["cwd"])
    argv = req["argv"]
    base = [p for p in sys.path[1:] if p]  # sys.path[0] is this file's directory
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    prefix, report = env.get("PYTHONPYCACHEPREFIX") or None, env.get(REPORT_VAR)
    reporting = bool(prefix and report and sys.pycache_prefix is None)  # the parent reads the shared cache
    if reporting:
        _list_compiled(report)
    sys.pycache_prefix = None if reporting else prefix
    sys.dont_write_bytecode = reporting or bool(env.get("PYTHONDONTWRITEBYTECODE"))
    if "numpy.random" in sys.modules:  # its global state was seeded in the parent: siblings would share it
        sys.modules["numpy.random"].seed()  # (the stdlib's random reseeds itself after a fork)
    if env.get("PYTHONUNBUFFERED"):
        for stream in (sys.stdout, sys.stderr):
            stream.reconfigure(write_through=True)
    try:
        if argv[1] == "-m":
            sys.argv = [argv[2], *argv[3:]]
            sys.path[:] = [req["cwd"], *extra, *base]
            runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv[1:])
            sys.path[:] = [os.path.dirname(os.path.abspath(argv[1])), *extra, *base]
            runpy.run_path(argv[1], run_name="__main__")
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as e:  # what `python script` prints: the traceback from the server's own code on
        tb = e.__traceback__
        while tb is not None and (
            tb.tb_frame.f_code.co_filename == __file__ or tb.tb_frame.f_globals.get("__name__") == "runpy"
        ):
            tb = tb.tb_next
        sys.excepthook(type(e), e.with_traceback(tb), tb)  # the hook reads the exception's own traceback
        sys.exit(1)


def _list_compiled(path):
    """From now on, append to ``path`` (each ended by a NUL) the absolute path of every ``.py`` source an
    import compiles, having no fresh bytecode to read (``SourceLoader.source_to_code``, which the
    import system calls only then): the learning server's report (module doc). Nothing else pays
    for it. Each append opens and closes the file; one that fails (the daemon removed the learning
    dir once it recorded the server) is skipped, and never fails the import."""
    from importlib import _bootstrap_external  # the import system's own loaders

    compile_source = _bootstrap_external.SourceLoader.source_to_code

    def source_to_code(self, data, source_path, *args, **kwargs):
        try:
            if isinstance(source_path, str) and source_path.startswith("/") and source_path.endswith(".py"):
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
                try:
                    os.write(fd, os.fsencode(source_path) + b"\0")
                finally:
                    os.close(fd)
        except Exception:  # noqa: BLE001 - speed only: the daemon then compiles nothing for it
            pass
        return compile_source(self, data, source_path, *args, **kwargs)

    _bootstrap_external.SourceLoader.source_to_code = source_to_code


def _child(ctl, req, fds):
    """In the forked child: never returns (ends the process as the server's interpreter would)."""
    out, err, hello = fds
    hello_sock = socket.socket(fileno=hello)
    try:
        ctl.close()
        os.setsid()
        libc.prctl(PR_SET_NAME, req.get("name", "server").encode()[:15], 0, 0, 0)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        _view(req)
        _limits(req)
        _drop_capabilities()
        _scope_signals()
        _check(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "PR_SET_DUMPABLE")
        hello_sock.sendall(b"hello")
        chunks = []
        while True:
            chunk = hello_sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
        if not chunks:  # the daemon gave up on this child: it never runs
            os._exit(126)
        private = json.loads(b"".join(chunks))
    except BaseException as e:  # noqa: BLE001 - any failure before the server runs is said, then 126
        try:
            hello_sock.sendall(("error: %s: %s" % (type(e).__name__, e)).encode())
        finally:
            os._exit(126)
    hello_sock.close()
    sys.stdout.flush()
    sys.stderr.flush()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(out, 1)
    os.dup2(err, 2)
    for fd in {devnull, out, err} - {0, 1, 2}:
        os.close(fd)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
    _become(req, private)
    sys.exit(0)


def _fresh(source, cached):
    """Whether ``cached`` holds bytecode of ``source`` as it is now (the import then read it): the
    interpreter's magic number, and a timestamp header with the source's mtime and size, or a
    hash-based one (PEP 552)."""
    try:
        with open(cached, "rb") as f:
            head = f.read(16)
        st = os.stat(source)
    except (OSError, TypeError):
        return False
    if len(head) < 16 or head[:4] != importlib.util.MAGIC_NUMBER:
        return False
    flags, mtime, size = struct.unpack("<III", head[4:16])
    return bool(flags & 1) or (mtime == int(st.st_mtime) & 0xFFFFFFFF and size == st.st_size & 0xFFFFFFFF)


def _report(path):
    """Write to ``path`` the source file of every imported module that was compiled here, not read
    from bytecode (module doc)."""
    files = sorted(
        {
            f
            for m in list(sys.modules.values())
            if isinstance(f := getattr(m, "__file__", None), str)
            and f.endswith(".py")
            and getattr(getattr(m, "__spec__", None), "origin", None) != "frozen"  # built into the interpreter
            and not _fresh(f, getattr(m, "__cached__", None))
        }
    )
    tmp = path + ".tmp"
    with open(tmp, "wb") as out:  # each path ended by a NUL: a file name may hold a newline
        out.write(b"".join(os.fsencode(f) + b"\0" for f in files))
    os.replace(tmp, path)


def _unmap_file_pages():
    """Drop the parent's own mappings of the file pages its imports read: the code and read-only
    data of the native libraries (NeMo Gym 0.7.0's SDK: pyarrow's, SciPy's, pandas', numpy's; ~58
    MiB), which none of its servers shares. A fork copies no page-table entry of a file mapping
    that holds no private copy of a page (Linux ``mm/memory.c``, ``vma_needs_copy``): a server maps
    again, from the page cache, what it runs itself. Left mapped, those pages count in the parent's
    memory alone (its PSS and USS) for as long as it lives, and it never runs that code again.

    Only mappings that cannot differ from their file are dropped: private file mappings that are
    not writable and hold no anonymous (copied) page, per ``/proc/self/smaps``; ``madvise(2)``'s
    ``MADV_DONTNEED`` then leaves the pages in the page cache, and a later read maps them again
    from there, unchanged. Returns the bytes that were resident in what was dropped (0 where
    ``/proc`` cannot be read)."""
    spans, span = [], None
    try:
        with open("/proc/self/smaps") as f:
            for line in f:
                parts = line.split()
                if not parts[0].endswith(":"):  # a mapping's line: range, perms, offset, device, inode, path
                    span = None
                    perms = parts[1]
                    if len(parts) >= 6 and parts[5].startswith("/") and perms[1] != "w" and perms[3] == "p":
                        low, high = (int(x, 16) for x in parts[0].split("-"))
                        span = [low, high, 0, 0]  # resident and anonymous kB
                        spans.append(span)
                elif span is not None and parts[0] in ("Rss:", "Anonymous:"):
                    span[2 if parts[0] == "Rss:" else 3] = int(parts[1])
    except OSError:
        return 0
    madvise = libc.madvise
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    dropped = 0
    for low, high, rss, anon in spans:
        if rss and not anon and madvise(low, high - low, MADV_DONTNEED) == 0:
            dropped += rss * 1024
    return dropped


def _preload(modules, report=None):
    started, ok, failed = time.monotonic(), [], {}
    for name in modules:
        try:
            try:
                found = importlib.util.find_spec(name)  # imports the packages above a submodule
            except ModuleNotFoundError:  # such a package is missing
                found = None
            if found is None:
                continue
            importlib.import_module(name)
            ok.append(name)
        except BaseException as e:  # noqa: BLE001 - the module's own failure, reported
            failed[name] = "%s: %s" % (type(e).__name__, e)
    threads = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    if report:
        try:
            _report(report)
        except OSError:  # speed only: the daemon then compiles nothing for the parent
            pass
    gc.collect()
    immortal = _immortal.immortalize()  # no server writes the pages of what it imported by counting references
    gc.freeze()  # what it imported is left out of the children's collections: their pages stay shared
    unmapped = _unmap_file_pages()  # what its imports read of the native libraries: no server shares it
    _immortal.fill_pools()  # no server makes its first objects in the pages of the parent's pools
    return {
        "op": "preloaded",
        "ok": ok,
        "failed": failed,
        "threads": threads,
        "immortal": immortal,
        "unmapped": unmapped,
        "seconds": round(time.monotonic() - started, 3),
        "views": _try_view(),
    }


def _try_view():
    """Whether a child can make a view of its own here and scope its signals (None) or why not:
    some container runtimes refuse a mount namespace or a tmpfs inside the sandbox, and kernels
    before 6.12 have no Landlock signal scope."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            _view({})
            _scope_signals()
            os._exit(0)
        except BaseException as e:  # noqa: BLE001 - said to the parent
            os.write(w, ("%s: %s" % (type(e).__name__, e)).encode()[:4000])
            os._exit(1)
    os.close(w)
    said = b""
    while True:
        chunk = os.read(r, 4096)
        if not chunk:
            break
        said += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return said.decode(errors="replace") or None


def _send(ctl, obj):
    ctl.send(json.dumps(obj).encode())


def _reap(ctl):
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        rid = CHILDREN.pop(pid, None)
        if rid is not None:
            _send(ctl, {"exit": rid, "status": os.waitstatus_to_exitcode(status)})


def main():
    ctl = socket.socket(fileno=int(sys.argv[1]))
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # no server it forked (no capability left) may trace it: it hands each new child its hello socket
    _check(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "PR_SET_DUMPABLE")
    warnings.simplefilter("ignore", DeprecationWarning)  # fork() of a process with native threads (BLAS pools)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *a: None)
    while True:
        ready, _, _ = select.select([ctl, wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
            _reap(ctl)
        if ctl not in ready:
            continue
        fds = array.array("i")
        msg, anc, _, _ = ctl.recvmsg(1 << 20, socket.CMSG_SPACE(MAX_FDS * fds.itemsize))
        if not msg:
            return
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
        req = json.loads(msg)
        if req["op"] == "preload":
            _send(ctl, _preload(req["modules"], req.get("report")))
        elif req["op"] == "fork":
            try:
                pid = os.fork()
            except OSError as e:
                _send(ctl, {"id": req["id"], "error": str(e)})
                pid = -1
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.close(wake_r)
                os.close(wake_w)
                _child(ctl, req, list(fds))
            if pid > 0:
                CHILDREN[pid] = req["id"]
        for fd in fds:
            os.close(fd)


if __name__ == "__main__":
    main()
