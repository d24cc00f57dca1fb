"""Network-namespace holder and socket factory (stdlib only; run as a script, never imported).

``python -I -S _holder.py CTL_FD PARENT_PID``: unshares a user + network namespace (root inside,
mapped to the caller's uid), brings ``lo`` up, then answers requests on the AF_UNIX SEQPACKET
``CTL_FD`` until it is closed (which ends the process and with it the namespaces).
Measured design: docs/architecture.md §6.

Requests (text, one per message) and replies (``OK ...`` plus fds via SCM_RIGHTS, or ``ERR msg``):

* ``LISTEN <ip> <port> <backlog>``: a listening TCP socket inside the namespace.
* ``SOCKETS <n> <4|6>``: ``n`` unconnected TCP sockets inside the namespace.
* ``FREE <port>``: ``OK`` when 127.0.0.1:port can be bound inside, else ``ERR``.
* ``ADDR <ip>``: add ``ip`` (/32 or /128) to ``lo`` (for IP-literal policy endpoints).
* ``UDP <ip> <port>``: a bound UDP socket inside the namespace (the egress DNS, ``dns.py``).
"""

import ctypes
import fcntl
import os
import signal
import socket
import struct
import sys

CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000
PR_SET_PDEATHSIG = 1
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _lo_up():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    req = struct.pack("16sH14x", b"lo", 0)
    flags = struct.unpack("16sH14x", fcntl.ioctl(s, SIOCGIFFLAGS, req))[1]
    fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))
    s.close()


def _add_addr(ip):
    """RTM_NEWADDR over rtnetlink: ip/32 (or /128) on lo (ifindex 1)."""
    fam = socket.AF_INET6 if ":" in ip else socket.AF_INET
    raw = socket.inet_pton(fam, ip)
    plen = 128 if fam == socket.AF_INET6 else 32
    attrs = b""
    for rta_type in (1, 2):  # IFA_ADDRESS, IFA_LOCAL
        attrs += struct.pack("HH", 4 + len(raw), rta_type) + raw + b"\0" * ((-len(raw)) % 4)
    ifa = struct.pack("BBBBI", fam, plen, 0, 0, socket.if_nametoindex("lo"))
    body = ifa + attrs
    # NLM_F_REQUEST|NLM_F_ACK|NLM_F_EXCL|NLM_F_CREATE, RTM_NEWADDR=20
    msg = struct.pack("IHHII", 16 + len(body), 20, 0x1 | 0x4 | 0x200 | 0x400, 1, 0) + body
    nl = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)  # NETLINK_ROUTE
    try:
        nl.sendto(msg, (0, 0))
        reply = nl.recv(4096)
        err = struct.unpack("i", reply[16:20])[0]
        if err not in (0, -17):  # 0 ok, -EEXIST fine
            raise OSError(-err, os.strerror(-err))
    finally:
        nl.close()


def _tcp(fam):
    s = socket.socket(fam, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _serve(ctl):
    while True:
        data = ctl.recv(512)
        if not data:
            return
        words = data.decode().split()
        fds, socks = [], []
        try:
            if words[0] == "LISTEN":
                ip, port, backlog = words[1], int(words[2]), int(words[3])
                s = _tcp(socket.AF_INET6 if ":" in ip else socket.AF_INET)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind((ip, port))
                s.listen(backlog)
                socks.append(s)
                reply = "OK %d" % s.getsockname()[1]
            elif words[0] == "SOCKETS":
                fam = socket.AF_INET6 if words[2] == "6" else socket.AF_INET
                socks = [_tcp(fam) for _ in range(int(words[1]))]
                reply = "OK"
            elif words[0] == "FREE":
                s = _tcp(socket.AF_INET)
                try:
                    s.bind(("127.0.0.1", int(words[1])))
                    reply = "OK"
                finally:
                    s.close()
            elif words[0] == "UDP":
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                s.bind((words[1], int(words[2])))
                socks.append(s)
                reply = "OK"
            elif words[0] == "ADDR":
                _add_addr(words[1])
                reply = "OK"
            else:
                reply = "ERR unknown request"
        except OSError as e:
            reply = "ERR %s" % e
        fds = [s.fileno() for s in socks]
        if fds:
            socket.send_fds(ctl, [reply.encode()], fds)
        else:
            ctl.send(reply.encode())
        for s in socks:
            s.close()


def main():
    ctl = socket.socket(fileno=int(sys.argv[1]))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != int(sys.argv[2]):
        return
    uid, gid = os.getuid(), os.getgid()
    try:
        if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, "unshare(CLONE_NEWUSER|CLONE_NEWNET): " + os.strerror(err))
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", "0 %d 1" % uid)
        _write("/proc/self/gid_map", "0 %d 1" % gid)
        _lo_up()
    except OSError as e:
        ctl.send(("ERR %s" % e).encode())
        return
    ctl.send(b"READY")
    _serve(ctl)


if __name__ == "__main__":
    main()
