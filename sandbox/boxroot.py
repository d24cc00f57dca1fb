"""The filesystem and namespaces of one task sandbox: the bubblewrap command of its keeper.

A task sandbox (``taskbox.py``) is one set of namespaces kept alive by a *keeper* process run under
bubblewrap (``bwrap(1)``): its own user, pid, ipc, uts, mount and network namespaces (the network
one holds only ``lo``: the box has no route out, its egress goes through the daemon's proxy),
``--die-with-parent``, ``--new-session``, ``--cap-drop ALL``, ``--disable-userns``. The keeper is
``/bin/sh -c 'read _'`` reading a pipe the daemon holds: it ends when the daemon closes the box or
dies, and the whole pid namespace ends with it.

Its root (:class:`BoxRoot`) is one of:

* ``host``: this host's own system directories read-only (``/usr``, ``/bin``, ``/lib*``, harmless
  ``/etc`` files: the same set as a server's sandbox, ``launch.py``), a tmpfs ``/tmp``, and two
  writable directories of the box on the host: its working directory and ``/root`` (``HOME``).
  For plain code execution with the host's interpreters; nothing of the host is writable.
* ``rootfs``: an image's unpacked root filesystem (``images.py``) as the lower layer of an
  overlay whose upper layer is the box's own directory on the host (``overlayfs(5)`` in the box's
  user namespace, Linux >= 5.11): the whole root is writable, as in a container, and writes never
  reach the image, which many boxes share.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .launch import LOOPBACK_HOSTS, SANDBOX_HOSTNAME, base_bwrap_args

KEEPER = ["/bin/sh", "-c", "read _"]
HOST_WORKDIR = "/workspace"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class BoxRoot:
    """What a box's ``/`` is. ``kind``: ``host`` or ``rootfs``; ``path``: the unpacked root
    filesystem (``rootfs``); ``image``: the image reference it stands for (None: the host root);
    ``env``: the image's environment (``KEY=VALUE`` strings of its OCI config; empty for a plain
    directory); ``workdir``: the image's working directory (``WorkingDir``), or None."""

    kind: str
    path: Path | None = None
    image: str | None = None
    env: tuple[str, ...] = ()
    workdir: str | None = None
    source: str = ""  # where it was found, for messages

    @classmethod
    def host(cls) -> BoxRoot:
        return cls("host", source="the host's read-only root")

    def default_env(self) -> dict[str, str]:
        """The image's environment as a mapping (``PATH`` defaulted)."""
        out = {"PATH": DEFAULT_PATH}
        for item in self.env:
            key, sep, value = item.partition("=")
            if sep and key:
                out[key] = value
        return out

    def default_workdir(self) -> str:
        return self.workdir or (HOST_WORKDIR if self.kind == "host" else "/")


@dataclass(frozen=True)
class BoxDirs:
    """The host directories of one box (all under ``base``, removed with it)."""

    base: Path
    upper: Path = field(init=False)
    work: Path = field(init=False)
    home: Path = field(init=False)

    def __post_init__(self) -> None:
        for name in ("upper", "work", "home"):
            object.__setattr__(self, name, self.base / name)

    def make(self) -> None:
        for d in (self.upper, self.work, self.home):
            d.mkdir(parents=True, exist_ok=True)


def _etc_files(dirs: BoxDirs, hostname: str | None) -> tuple[Path, Path]:
    hosts, resolv = dirs.base / "hosts", dirs.base / "resolv.conf"
    lines = list(LOOPBACK_HOSTS)
    if hostname is None:  # the box keeps the host's name, which resolves to itself here too
        lines[0] += f" {socket.gethostname()}"
    hosts.write_text("\n".join(lines) + "\n")
    resolv.write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
    return hosts, resolv


def box_bwrap_argv(
    bwrap: str,
    root: BoxRoot,
    dirs: BoxDirs,
    workdir: str,
    proc_mode: str,
    info_fd: int,
    extra_ro: Sequence[tuple[Path, str]] = (),
    hostname: str | None = SANDBOX_HOSTNAME,
) -> list[str]:
    """The keeper's bubblewrap command for ``root`` (module doc). ``workdir``: the box's working
    directory inside (made writable); ``info_fd``: where bubblewrap writes its JSON info
    (``child-pid``: the host pid of the box's init); ``extra_ro``: (host path, path inside) pairs
    bound read-only; ``hostname``: the box's own host name, or None to keep the host's
    (``launch.base_bwrap_args``)."""
    hosts, resolv = _etc_files(dirs, hostname)
    if root.kind == "host":
        args = [
            bwrap,
            *base_bwrap_args(proc_mode, hostname),
            "--unshare-net",
            "--ro-bind",
            str(hosts),
            "/etc/hosts",
            "--ro-bind",
            str(resolv),
            "/etc/resolv.conf",
            "--bind",
            str(dirs.home),
            "/root",
        ]
        if not (workdir == "/tmp" or workdir.startswith("/tmp/")):
            (dirs.base / "workdir").mkdir(exist_ok=True)
            args += ["--bind", str(dirs.base / "workdir"), workdir]
        else:
            args += ["--dir", workdir]
    else:
        assert root.path is not None
        etc = dirs.upper / "etc"
        etc.mkdir(exist_ok=True)
        (etc / "hosts").write_text(hosts.read_text())
        (etc / "resolv.conf").write_text(resolv.read_text())
        args = [
            bwrap,
            "--unshare-user",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            *(["--hostname", hostname] if hostname else []),
            "--unshare-net",
            "--unshare-cgroup-try",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--disable-userns",
            "--overlay-src",
            str(root.path),
            "--overlay",
            str(dirs.upper),
            str(dirs.work),
            "/",
        ]
        args += ["--proc", "/proc"] if proc_mode == "mount" else ["--ro-bind", "/proc", "/proc"]
        args += ["--dev", "/dev", "--dir", workdir]
    for host_path, inside in extra_ro:
        args += ["--ro-bind", str(host_path), inside]
    args += ["--chdir", "/", "--info-fd", str(info_fd), "--", *KEEPER]
    return args
