"""How one server process is launched at each level: the bubblewrap command and the pre-exec steps.

Order inside the forked child (preexec_fn, single-threaded): a clean signal state (every signal at
its default action, none blocked: an ignored disposition and the mask survive ``execve``, so a
launcher's ignored SIGHUP or blocked SIGTERM would reach every server), rlimits, cgroup join, then join the
holder's user + network namespace, then PR_SET_PDEATHSIG(SIGKILL) (after the credential change,
so it sticks) and a parent check. bubblewrap then adds: its own user/pid/ipc/uts/mount
namespaces (the uts one named :data:`SANDBOX_HOSTNAME`), ``--die-with-parent``, ``--new-session``, ``--cap-drop ALL``, ``--disable-userns``, a tmpfs ``/tmp`` *before* any bind (a bind under /tmp
would otherwise be hidden), read-only system dirs, venv, interpreter and package, writable dirs.

The environment is NOT passed as ``--setenv`` arguments: those would put secrets on bubblewrap's
command line for every local user to read in ``ps``. bubblewrap is started with the server's
environment *without* its private variables (``ProcessSpec.private_env``: the server's config,
which holds its secrets), since every process of the sandbox can read bubblewrap's environment
(``/proc/1/environ`` is bubblewrap's own init). The private variables travel through a pipe:
bubblewrap runs :data:`LAUNCHER` with the server's interpreter, which reads them from the pipe's
inherited read end (the data is gone from the pipe once read), closes it, and ``execve``s the
server's argv with them, so only the server process itself (and what it starts) holds them.

``ProcessSpec.cow_paths`` (a server's own tree, opted in by the operator) become overlays: the
tree as the lower layer, the server's state directory as the upper one (``overlayfs(5)``), so a
tree that installs into itself at start-up writes there and the package stays as it was. Without
bubblewrap there is no bind and no overlay: the process runs from a private copy of its tree
(``ProcessSpec.tree``, :mod:`sandbox.treecopy`), writable, which stands for both.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .limits import ResourceLimits, apply_rlimits, join_cgroups
from .netns import set_pdeathsig

# The host name every sandboxed process sees (bubblewrap's own UTS namespace, ``--hostname``), and
# the loopback lines of the sandbox's /etc/hosts, which map it to 127.0.0.1: software that resolves
# its own name at start-up (Erlang's EPMD, a JVM's InetAddress.getLocalHost(), a scheduler binding
# gethostbyname(gethostname())) finds it without DNS, and the host's name does not leak in.
SANDBOX_HOSTNAME = "gym-sandbox"
LOOPBACK_HOSTS = (f"127.0.0.1 localhost {SANDBOX_HOSTNAME}", "::1 localhost ip6-localhost ip6-loopback")

# Harmless system files a Python server may need; never all of /etc (as mapped root, /etc/shadow would be readable).
ETC_FILES = (
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/localtime",
    "/etc/mime.types",
    "/etc/ld.so.cache",
    "/etc/alternatives",
)


@dataclass
class ProcessSpec:
    """One server to start. ``argv[0]``: absolute interpreter path (inside a venv). ``env``: the
    COMPLETE environment (the sandbox adds only the proxy variables) but for ``private_env``:
    variables for the program alone (its secrets). Under bubblewrap they reach it through a pipe
    and :data:`LAUNCHER` (``argv[0]`` must then be a Python interpreter), so no other process of
    the sandbox starts with them in its environment; without bubblewrap the program is the
    process started and they are part of its environment. ``read_only_paths``: venv, package,
    server dir...; ``writable_paths``: work dir etc. (``cwd`` is bound read-only when not inside
    either). ``stdout_fd``/``stderr_fd``: open fds (or None = inherit). The interpreter's base
    install is bound read-only automatically."""

    name: str
    argv: Sequence[str]
    cwd: Path | str
    env: Mapping[str, str]
    read_only_paths: Sequence[Path | str] = ()
    writable_paths: Sequence[Path | str] = ()
    stdout_fd: int | None = None
    stderr_fd: int | None = None
    limits: ResourceLimits = field(default_factory=ResourceLimits)
    private_env: Mapping[str, str] = field(default_factory=dict)
    # copy-on-write views: path -> a state directory of the server's; under bubblewrap the path is
    # an overlay (lower: the path itself, upper and work dirs in the state directory), so writes
    # land in the state directory and the path itself is never changed
    cow_paths: Mapping[str, str] = field(default_factory=dict)
    # the server's own tree (a directory of the package) and the package root above it: without
    # bubblewrap the process runs from a private copy of the tree, laid out below a stand-in for the
    # root (sandbox/treecopy.py), so what it writes beside its files stays out of the package; under
    # bubblewrap they are not used (list the root in read_only_paths, the tree in cow_paths for a
    # writable view)
    tree: Path | str | None = None
    tree_root: Path | str | None = None
    # the ports it listens on: a backend whose servers run in sandboxes of their own routes them
    # (sandbox/opensandbox/environment.py); the local sandbox's servers share one network
    ports: Sequence[int] = ()
    # the modules it shares with the other servers of its venv (sandbox/zygote.py): with two or
    # more such servers under bubblewrap, they are forked from one parent that imported them
    preload: Any = None
    # capabilities kept inside its own user namespace (a preloaded parent's CAP_SYS_ADMIN), and
    # descriptors it inherits (the parent's control socket)
    keep_caps: Sequence[str] = ()
    pass_fds: Sequence[int] = ()


# Run by argv[0] with -I -S (no site, no PYTHON* variables): read the private variables (JSON) from
# the fd in argv[1], close it, become the server (argv[2:]) with them added to the environment.
LAUNCHER = (
    "import json,os,sys\n"
    "fd=int(sys.argv[1]);b=b''\n"
    "while 1:\n c=os.read(fd,65536)\n if not c:break\n b+=c\n"
    "os.close(fd);e=dict(os.environ);e.update(json.loads(b))\n"
    "os.execve(sys.argv[2],sys.argv[2:],e)\n"
)


def launcher_argv(argv: Sequence[str], fd: int) -> list[str]:
    """``argv`` started by :data:`LAUNCHER` with the private variables on ``fd`` (no values in it)."""
    return [argv[0], "-I", "-S", "-c", LAUNCHER, str(fd), *argv]


def private_pipe(env: Mapping[str, str]) -> tuple[int, threading.Thread | None]:
    """A pipe holding ``env`` as JSON: ``(read_fd, rest)``. The write end is closed once all is
    written; what does not fit into the pipe now is written by ``rest``, a thread the caller
    starts once the child holds the read end (None when everything fit). The caller closes its
    ``read_fd`` after the spawn."""
    data = json.dumps(dict(env)).encode()
    r, w = os.pipe()
    if len(data) > 65536:
        try:
            fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, len(data))
        except OSError:  # above /proc/sys/fs/pipe-max-size: the thread writes the rest
            pass
    os.set_blocking(w, False)
    try:
        n = os.write(w, data)
    except BlockingIOError:
        n = 0
    if n == len(data):
        os.close(w)
        return r, None
    os.set_blocking(w, True)
    rest = memoryview(data)[n:]

    def finish() -> None:
        view = rest
        try:
            while view:
                view = view[os.write(w, view) :]
        except OSError:  # the child ended before reading everything
            pass
        finally:
            os.close(w)

    return r, threading.Thread(target=finish, name="private-env", daemon=True)


def base_bwrap_args(proc_mode: str = "mount", hostname: str | None = SANDBOX_HOSTNAME) -> list[str]:
    """Namespace, capability and system-directory flags shared by the probe and every server (the
    caller binds an ``/etc/hosts`` with :data:`LOOPBACK_HOSTS`).

    ``proc_mode``: ``mount`` (private /proc for the pid namespace) or ``bind`` (masked-/proc fallback).
    ``hostname``: the name of the sandbox's own UTS namespace, or None where the host refuses
    ``sethostname`` in it (podman's default seccomp profile does): the namespace then keeps the
    host's name (the probe's ``details["hostname"]`` says which, ``probe.py``).
    """
    args = [
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        *(["--hostname", hostname] if hostname else []),
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--disable-userns",
        "--tmpfs",
        "/tmp",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for f in ETC_FILES:
        if os.path.exists(f):
            args += ["--ro-bind", f, f]
    args += ["--proc", "/proc"] if proc_mode == "mount" else ["--ro-bind", "/proc", "/proc"]
    args += ["--dev", "/dev"]
    return args


def bwrap_argv(
    bwrap: str,
    spec: ProcessSpec,
    proc_mode: str,
    ro: Sequence[Path | str],
    hosts_file: Path | None,
    resolv_file: Path | None,
    command: Sequence[str] | None = None,
    hostname: str | None = SANDBOX_HOSTNAME,
) -> list[str]:
    """The full bubblewrap command for ``spec`` (binds sorted parent-first so nested rw-in-ro works),
    running ``command`` (default ``spec.argv``) inside; ``hostname`` as in :func:`base_bwrap_args`.

    It holds no environment values: start bubblewrap with the server's environment."""
    args = [bwrap, *base_bwrap_args(proc_mode, hostname)]
    for cap in spec.keep_caps:  # after --cap-drop ALL: kept in the sandbox's own user namespace only
        args += ["--cap-add", cap]
    if hosts_file is not None:
        args += ["--ro-bind", str(hosts_file), "/etc/hosts"]
    if resolv_file is not None:
        args += ["--ro-bind", str(resolv_file), "/etc/resolv.conf"]
    binds = [(Path(p).resolve(), "--ro-bind") for p in ro] + [
        (Path(p).resolve(), "--bind") for p in spec.writable_paths
    ]
    cwd = Path(spec.cwd).resolve()
    if not any(cwd == b or b in cwd.parents for b, _ in binds):
        binds.append((cwd, "--ro-bind"))  # the working directory is always visible (read-only unless listed)
    seen: set[Path] = set()
    for path, flag in sorted(binds, key=lambda b: (len(b[0].parts), b[1] == "--bind")):
        if path in seen or not path.exists():
            continue
        seen.add(path)
        args += [flag, str(path), str(path)]
    for cow, state in spec.cow_paths.items():  # after every bind: the overlay covers the path's read-only bind
        upper, work = Path(state) / "upper", Path(state) / "work"
        upper.mkdir(parents=True, exist_ok=True)
        work.mkdir(parents=True, exist_ok=True)
        real = str(Path(cow).resolve())
        args += ["--overlay-src", real, "--overlay", str(upper), str(work), real]
    args += ["--chdir", str(cwd), "--", *(command if command is not None else spec.argv)]
    return args


def clean_signals() -> None:
    """In a forked child before ``execve``: every signal back to its default action, none blocked
    (POSIX ``execve``: ignored dispositions and the mask are inherited; handlers are reset anyway)."""
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    for sig in signal.valid_signals():
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            try:
                signal.signal(sig, signal.SIG_DFL)
            except (OSError, ValueError):  # a signal the C library keeps for itself
                pass


def make_preexec(
    limits: ResourceLimits, procs_files: list[str], join: Callable[[], None] | None, parent_pid: int
) -> Callable[[], None]:
    """The preexec_fn for one server (see module doc for the order)."""

    def preexec() -> None:
        clean_signals()
        apply_rlimits(limits)
        join_cgroups(procs_files)
        if join is not None:
            join()
        set_pdeathsig()
        if os.getppid() != parent_pid:
            os._exit(111)

    return preexec
