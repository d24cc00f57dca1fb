"""Daemon side of the namespace holder (``_holder.py``): start it, ask it for sockets, join it.

One holder per sandbox (environment). It owns an unprivileged user namespace plus a network
namespace with only ``lo``; sockets it creates stay bound to that namespace even after they
are passed to the daemon, which is how the daemon serves the proxy and forwards *into* the
namespace and dials *out* of it (docs/architecture.md §6). Requests are synchronous and
take well under a millisecond; callers on the event loop may call them directly.
"""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

HOLDER_SCRIPT = Path(__file__).with_name("_holder.py")
CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWNS = 0x10000000, 0x40000000, 0x00020000
PR_SET_PDEATHSIG, PR_CAPBSET_DROP = 1, 24
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 0x40000
_libc = ctypes.CDLL(None, use_errno=True)


class HolderError(OSError):
    """The holder could not create or serve the namespace; ``str()`` says why."""


def set_pdeathsig(sig: int = 9) -> None:
    """PR_SET_PDEATHSIG for the calling process (preexec_fn helper; follows the parent *thread*)."""
    _libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)


def setns(fd: int, nstype: int) -> None:
    """setns(2) via libc (os.setns needs Python 3.12). Raises OSError."""
    if _libc.setns(fd, nstype) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


class NetnsHolder:
    """A running holder: ``pid``, ``user_fd`` / ``net_fd`` (open namespace fds) and the request API."""

    def __init__(self, proc: subprocess.Popen, ctl: socket.socket) -> None:
        self.proc = proc
        self.pid = proc.pid
        self._ctl = ctl
        self._lock = threading.Lock()
        self.user_fd = os.open(f"/proc/{self.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
        self.net_fd = os.open(f"/proc/{self.pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        self._pool: dict[int, list[socket.socket]] = {4: [], 6: []}
        self.startup_s = 0.0  # seconds from spawn to ready, set by start()

    @classmethod
    def start(cls, timeout: float = 5.0) -> NetnsHolder:
        """Spawn the holder and wait for READY. Call from the thread that will outlive it
        (PDEATHSIG follows the thread). Raises HolderError with the holder's reason."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-B", str(HOLDER_SCRIPT), str(theirs.fileno()), str(os.getpid())],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=set_pdeathsig,
            env={},  # nothing of the daemon's environment (which may hold secrets) in a long-lived helper
        )
        theirs.close()
        ours.settimeout(timeout)
        try:
            msg = ours.recv(512)
        except TimeoutError:
            msg = b"ERR holder did not answer within %.1fs" % timeout
        ours.settimeout(None)
        if msg != b"READY":
            ours.close()
            proc.kill()
            _, err = proc.communicate()
            why = msg.decode(errors="replace")[4:] if msg else err.decode(errors="replace").strip()[-500:]
            raise HolderError(why or f"holder exited with {proc.returncode}")
        proc.stderr.close()  # type: ignore[union-attr]  # started with stderr=PIPE
        holder = cls(proc, ours)
        holder.startup_s = time.monotonic() - t0
        return holder

    def _ask(self, request: str, maxfds: int = 0) -> tuple[str, list[int]]:
        with self._lock:
            self._ctl.send(request.encode())
            if maxfds:
                msg, fds, _, _ = socket.recv_fds(self._ctl, 512, maxfds)
            else:
                msg, fds = self._ctl.recv(512), []
        text = msg.decode()
        if not text:
            raise HolderError("namespace holder is gone")
        if text.startswith("ERR"):
            for fd in fds:
                os.close(fd)
            raise HolderError(text[4:])
        return text, fds

    def listen(self, ip: str, port: int, backlog: int = 512) -> socket.socket:
        """A listening TCP socket at ip:port inside the namespace (port 0 = any)."""
        _, fds = self._ask(f"LISTEN {ip} {port} {backlog}", 1)
        s = socket.socket(fileno=fds[0])
        s.setblocking(False)
        return s

    def udp(self, ip: str, port: int) -> socket.socket:
        """A bound, non-blocking UDP socket at ip:port inside the namespace."""
        _, fds = self._ask(f"UDP {ip} {port}", 1)
        s = socket.socket(fileno=fds[0])
        s.setblocking(False)
        return s

    def socket(self, family: int = 4) -> socket.socket:
        """One unconnected, non-blocking TCP socket inside the namespace (pooled, 32 per request)."""
        pool = self._pool[family]
        if not pool:
            _, fds = self._ask(f"SOCKETS 32 {family}", 32)
            for fd in fds:
                s = socket.socket(fileno=fd)
                s.setblocking(False)
                pool.append(s)
        return pool.pop()

    def port_free(self, port: int) -> bool:
        """True when 127.0.0.1:port is bindable inside the namespace."""
        try:
            self._ask(f"FREE {port}")
            return True
        except HolderError:
            return False

    def add_address(self, ip: str) -> None:
        """Put ``ip`` on the namespace's ``lo`` (so an IP-literal endpoint can be served inside)."""
        self._ask(f"ADDR {ip}")

    def preexec_join(self) -> None:
        """In a forked child (preexec_fn): join the user then the network namespace."""
        setns(self.user_fd, CLONE_NEWUSER)
        setns(self.net_fd, CLONE_NEWNET)

    def preexec_join_bare(self, binds: dict[str, str]) -> None:
        """preexec_fn for servers without bubblewrap (level partial): join the namespaces, bind the
        sandbox's own files (e.g. ``/etc/hosts``) in a private mount namespace, then empty the
        capability bounding set so the exec'd server (uid 0 in the namespace) keeps no capability."""
        self.preexec_join()
        if _libc.unshare(CLONE_NEWNS) != 0 or _libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
            raise OSError(ctypes.get_errno(), "private mount namespace")
        for src, dst in binds.items():
            if _libc.mount(src.encode(), dst.encode(), None, MS_BIND, None) != 0:
                raise OSError(ctypes.get_errno(), f"bind {src} on {dst}")
        for cap in range(64):
            _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)

    def close(self) -> None:
        """Close the control socket (the holder exits, the namespace goes) and reap the holder."""
        for pool in self._pool.values():
            for s in pool:
                s.close()
            pool.clear()
        self._ctl.close()
        for fd in (self.user_fd, self.net_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
