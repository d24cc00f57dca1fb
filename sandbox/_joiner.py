"""A task sandbox's door: joins its namespaces once, then starts processes and moves files in it.

Stdlib only, run as a script with the daemon's interpreter, never imported:
``python -I -S -B _joiner.py CTL_FD PARENT_PID KEEPER_PID [CGROUP_PROCS_FILE ...]``, or once per
daemon as ``_joiner.py --factory CTL_FD PARENT_PID``, which forks a joiner per box (:func:`factory`).

It writes its pid into each cgroup file (the box's limits then hold it and everything it starts),
sets ``PR_SET_PDEATHSIG``, and joins the namespaces of the box's keeper process (``taskbox.py``):
first the user namespace that owns them (``NS_GET_USERNS``, ``ioctl_ns(2)``: the daemon's uid owns
it, so no privilege is needed), then ipc, uts, net, pid and mount, then the keeper's own user
namespace. Every module is imported before the mount namespace changes (the host's files are gone
after that). Its own pid stays in the daemon's pid namespace; what it forks is in the box's.

Requests on the AF_UNIX SEQPACKET ``CTL_FD`` are one JSON object each, with file descriptors
attached (``SCM_RIGHTS``); every answer names the request's ``id``:

* ``{"op": "exec", "id", "argv", "env", "cwd"}`` + fds (stdin, stdout, stderr): a child in its own
  session with those fds, no capabilities (empty bounding set) and ``PR_SET_NO_NEW_PRIVS``, runs
  ``argv`` (``PATH`` of ``env``) in ``cwd``. Answer ``{"id", "pid"}`` (the host pid, whose process
  group the daemon kills on a timeout) or ``{"id", "error"}`` (``cwd`` or ``argv[0]`` missing);
  later ``{"exit": pid, "status": N}`` (a signal N is ``-N``).
* ``{"op": "put", "id", "path", "mode"}`` + fd (a file to read): ``path`` created (and its parent
  directories) with the box's own permissions, the bytes copied. ``{"op": "get", "id", "path"}`` +
  fd (a file to write): ``path``'s bytes copied out. Both run in a child; answer ``{"id", "ok":
  true}`` or ``{"id", "error"}``.
* ``{"op": "listen", "id", "ip", "port"}``: a listening TCP socket in the box's network namespace
  (answer ``{"id", "port"}`` + the socket's fd); ``{"op": "sockets", "id", "n", "family"}``: ``n``
  unconnected TCP sockets there; ``{"op": "udp", "id", "ip", "port"}``: a bound UDP socket there
  (the box's DNS, ``dns.py``: ``127.0.0.1:53`` is bound while joining, with the privilege a port
  below 1024 needs).

End of the control socket ends the joiner (the box itself ends with its keeper).
"""

import ctypes
import errno
import fcntl
import json
import os
import select
import signal
import socket
import sys

PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 24, 38
NS_GET_USERNS = 0xB701
ORDER = ("ipc", "uts", "net", "pid", "mnt")
libc = ctypes.CDLL(None, use_errno=True)
DNS: list[socket.socket] = []  # the box's resolver socket, 127.0.0.1:53 UDP, bound while joining


def _setns(fd, what):
    if libc.setns(fd, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "setns(%s): %s" % (what, os.strerror(err)))


def join(keeper):
    """Join the keeper's namespaces (module doc order); raises OSError."""
    fds = {n: os.open("/proc/%d/ns/%s" % (keeper, n), os.O_RDONLY) for n in ORDER + ("user",)}
    owner = fcntl.ioctl(fds["mnt"], NS_GET_USERNS)
    _setns(owner, "owner user")
    for n in ORDER:
        _setns(fds[n], n)
        if n == "net":  # port 53 needs the namespace owner's privilege, which the keeper's user namespace lacks
            DNS.append(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
            DNS[0].bind(("127.0.0.1", 53))
    _setns(fds["user"], "user")
    for fd in [owner, *fds.values()]:
        os.close(fd)
    os.chdir("/")


def send(ctl, obj, fds=()):
    data = json.dumps(obj).encode()
    if fds:
        socket.send_fds(ctl, [data], list(fds))
    else:
        ctl.send(data)


def _child_exec(req, fds, errw):
    os.setsid()
    for i, fd in enumerate(fds[:3]):
        os.dup2(fd, i)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    try:
        os.chdir(req.get("cwd") or "/")
    except OSError as e:
        os.write(errw, ("working directory %s: %s" % (req.get("cwd"), e.strerror)).encode())
        os._exit(126)
    for cap in range(64):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    env = {str(k): str(v) for k, v in req.get("env", {}).items()}
    try:
        os.execvpe(req["argv"][0], req["argv"], env)
    except OSError as e:
        os.write(errw, ("%s: %s" % (req["argv"][0], e.strerror)).encode())
    os._exit(127)


def _copy(src, dst):
    while True:
        chunk = os.read(src, 1 << 20)
        if not chunk:
            return
        view = memoryview(chunk)
        while view:
            view = view[os.write(dst, view) :]


def _child_file(ctl, req, fds):
    try:
        path = req["path"]
        if req["op"] == "put":
            parent = os.path.dirname(path)
            if parent:
                os.makedirs(parent, exist_ok=True)
            out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, req.get("mode", 0o644))
            try:
                _copy(fds[0], out)
            finally:
                os.close(out)
        else:
            src = os.open(path, os.O_RDONLY)
            try:
                _copy(src, fds[0])
            finally:
                os.close(src)
        send(ctl, {"id": req["id"], "ok": True})
        os._exit(0)
    except (OSError, KeyError) as e:
        send(ctl, {"id": req["id"], "error": "%s: %s" % (req.get("path"), getattr(e, "strerror", None) or e)})
        os._exit(1)


def _sockets(req):
    if req["op"] == "udp":
        if DNS and (req.get("ip", "127.0.0.1"), int(req.get("port", 53))) == ("127.0.0.1", 53):
            return {}, [DNS[0]]
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((req.get("ip", "127.0.0.1"), int(req.get("port", 53))))
        return {}, [s]
    if req["op"] == "listen":
        ip = req.get("ip", "127.0.0.1")
        s = socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((ip, int(req.get("port", 0))))
        s.listen(int(req.get("backlog", 512)))
        return {"port": s.getsockname()[1]}, [s]
    fam = socket.AF_INET6 if req.get("family") == 6 else socket.AF_INET
    return {}, [socket.socket(fam, socket.SOCK_STREAM, socket.IPPROTO_TCP) for _ in range(int(req.get("n", 1)))]


def handle(ctl, req, fds, execs, files):
    op = req.get("op")
    if op in ("listen", "sockets", "udp"):
        try:
            extra, socks = _sockets(req)
            send(ctl, {"id": req["id"], **extra}, [s.fileno() for s in socks])
            for s in socks:
                if s not in DNS:
                    s.close()
        except OSError as e:
            send(ctl, {"id": req["id"], "error": str(e)})
        return
    if op == "exec":
        argv = req["argv"]
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv) or len(fds) < 3:
            raise ValueError("exec needs argv (a list of strings) and three fds")
        errr, errw = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:
            try:  # the child never returns into the request loop
                ctl.close()
                os.close(errr)
                _child_exec(req, fds, errw)
            finally:
                os._exit(127)
        os.close(errw)
        why = b""
        while chunk := os.read(errr, 4096):
            why += chunk
        os.close(errr)
        if why:
            os.waitpid(pid, 0)
            send(ctl, {"id": req["id"], "error": why.decode(errors="replace")})
        else:
            execs.add(pid)
            send(ctl, {"id": req["id"], "pid": pid})
    elif op in ("put", "get"):
        if not isinstance(req.get("path"), str) or not fds:
            raise ValueError("put/get need a path and an fd")
        pid = os.fork()
        if pid == 0:
            try:
                _child_file(ctl, req, fds)
            finally:
                os._exit(1)
        files.add(pid)
    else:
        send(ctl, {"id": req.get("id"), "error": "unknown op %r" % op})


def reap(ctl, execs, files):
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid in execs:
            execs.discard(pid)
            send(ctl, {"exit": pid, "status": os.waitstatus_to_exitcode(status)})
        files.discard(pid)


def serve(ctl, keeper, procs_files, affinity=None):
    """Be one box's joiner: into its cgroups and namespaces, then answer ``ctl`` until it closes."""
    try:
        if affinity:
            os.sched_setaffinity(0, affinity)
        me = str(os.getpid()).encode()
        for procs in procs_files:
            fd = os.open(procs, os.O_WRONLY)
            try:
                os.write(fd, me)
            finally:
                os.close(fd)
        join(keeper)
    except OSError as e:
        send(ctl, {"ready": False, "error": str(e)})
        return
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    send(ctl, {"ready": True, "pid": os.getpid()})
    execs, files = set(), set()
    while True:
        try:
            ready, _, _ = select.select([ctl, wake_r], [], [])
        except InterruptedError:
            continue
        if wake_r in ready:
            try:
                os.read(wake_r, 4096)
            except BlockingIOError:
                pass
            reap(ctl, execs, files)
        if ctl in ready:
            req = None
            try:
                data, fds, _, _ = socket.recv_fds(ctl, 1 << 20, 8)
            except OSError as e:
                if e.errno == errno.EINTR:
                    continue
                return
            if not data:
                return
            try:
                req = json.loads(data)
                handle(ctl, req, fds, execs, files)
            except (ValueError, KeyError, TypeError, OSError) as e:  # one bad request never ends the joiner
                send(ctl, {"id": req.get("id") if isinstance(req, dict) else None, "error": "bad request: %s" % e})
            finally:
                for fd in fds:
                    os.close(fd)


def factory(ctl):
    """``--factory``: fork one joiner per request (``{"keeper", "cgroups", "affinity"}`` + the box's
    control socket), answering ``{"pid"}``: a fork of this small process costs a few milliseconds
    where a new interpreter costs tens to hundreds. Its joiners die with it (``PR_SET_PDEATHSIG``),
    and it with the daemon's spawn thread; children are reaped by the kernel (``SIGCHLD`` ignored)."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    me = os.getpid()
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(ctl, 1 << 16, 2)
        except InterruptedError:
            continue
        if not data:
            return
        req = json.loads(data)
        pid = os.fork()
        if pid == 0:
            ctl.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != me:
                os._exit(1)
            box = socket.socket(fileno=fds[0])
            try:
                serve(box, int(req["keeper"]), req.get("cgroups") or [], req.get("affinity"))
            finally:
                os._exit(0)
        for fd in fds:
            os.close(fd)
        send(ctl, {"pid": pid})


def main():
    factory_mode = sys.argv[1] == "--factory"
    args = sys.argv[2:] if factory_mode else sys.argv[1:]
    ctl = socket.socket(fileno=int(args[0]))
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != int(args[1]):
        return
    if factory_mode:
        factory(ctl)
    else:
        serve(ctl, int(args[2]), args[3:])


if __name__ == "__main__":
    main()
