"""Per-server resource limits: cgroups where writable (v2, else v1), else rlimits plus a psutil watcher.

Measured here (docs/architecture.md §6): v1 memory/pids are writable as root; a hog over
``memory.limit_in_bytes`` is SIGKILLed in ~0.45 s. Without cgroups the sandbox's watcher
(:class:`sandbox.core.Sandbox`) samples each tree's RSS and process count every second and
kills a tree over its limit; the exit is then reported as ``memory-limit`` / ``pids-limit``.
"""

from __future__ import annotations

import os
import resource
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

CG = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class ResourceLimits:
    """Limits for one server: ``memory_mb`` (RSS of the whole tree), ``pids`` (processes in the tree),
    ``nofile`` (RLIMIT_NOFILE). None = no limit."""

    memory_mb: int | None = None
    pids: int | None = None
    nofile: int | None = 65536


def _own_v1(controller: str) -> Path | None:
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, ctrls, path = line.split(":", 2)
            if controller in ctrls.split(","):
                return CG / controller / path.lstrip("/")
    except OSError:
        pass
    return None


def _writable_dir(base: Path | None) -> bool:
    if base is None or not base.is_dir():
        return False
    probe = base / f"gym-runtime-probe-{uuid.uuid4().hex[:8]}"
    try:
        probe.mkdir()
        probe.rmdir()
        return True
    except OSError:
        return False


def _v2_base() -> Path | None:
    if not (CG / "cgroup.controllers").is_file():
        return None
    try:
        rel = next(ln[3:] for ln in Path("/proc/self/cgroup").read_text().splitlines() if ln.startswith("0::"))
    except (OSError, StopIteration):
        return None
    base = CG / rel.lstrip("/")
    ctrls = (base / "cgroup.subtree_control").read_text().split() if (base / "cgroup.subtree_control").exists() else []
    return base if {"memory", "pids"} <= set(ctrls) else None


_mode: str | None = None


def cgroup_mode() -> str:
    """``v2``, ``v1`` or ``none``: which cgroup hierarchy this process can create limit groups in (cached)."""
    global _mode
    if _mode is None:
        if _writable_dir(_v2_base()):
            _mode = "v2"
        elif _writable_dir(_own_v1("memory")) and _writable_dir(_own_v1("pids")):
            _mode = "v1"
        else:
            _mode = "none"
    return _mode


class CgroupSlot:
    """The cgroup(s) of one server; ``procs_files`` are written by the child before exec."""

    def __init__(self, name: str, limits: ResourceLimits) -> None:
        self.mode = cgroup_mode()
        self.dirs: list[Path] = []
        tag = f"gym-runtime-{os.getpid()}-{name}-{uuid.uuid4().hex[:6]}"
        mem = None if limits.memory_mb is None else limits.memory_mb * 1024 * 1024
        if self.mode == "v2":
            d = _v2_base() / tag  # type: ignore[operator]  # mode v2 was chosen because that base exists
            d.mkdir()
            self.dirs = [d]
            if mem is not None:
                (d / "memory.max").write_text(str(mem))
                if (d / "memory.swap.max").exists():
                    (d / "memory.swap.max").write_text("0")
            if limits.pids is not None:
                (d / "pids.max").write_text(str(limits.pids))
        elif self.mode == "v1":
            m, p = _own_v1("memory") / tag, _own_v1("pids") / tag  # type: ignore[operator]  # mode v1 was chosen because both controllers exist
            m.mkdir()
            p.mkdir()
            self.dirs = [m, p]
            if mem is not None:
                (m / "memory.limit_in_bytes").write_text(str(mem))
                if (m / "memory.memsw.limit_in_bytes").exists():
                    try:
                        (m / "memory.memsw.limit_in_bytes").write_text(str(mem))
                    except OSError:
                        pass
            if limits.pids is not None:
                (p / "pids.max").write_text(str(limits.pids))
        self.procs_files = [str(d / "cgroup.procs") for d in self.dirs]
        self.enforces_memory = self.mode != "none" and mem is not None
        self.enforces_pids = self.mode != "none" and limits.pids is not None

    def oom_killed(self) -> bool:
        """True when the kernel OOM-killed something in this group (memory limit hit)."""
        return self._counted(("memory.events", "memory.oom_control"), "oom_kill")

    def pids_limited(self) -> bool:
        """True when a fork in this group hit ``pids.max``."""
        return self._counted(("pids.events",), "max")

    def _counted(self, fnames: tuple[str, ...], key: str) -> bool:
        """True when ``key N`` with N > 0 stands in one of the ``fnames`` event files of a group dir."""
        for d in self.dirs:
            for fname in fnames:
                try:
                    for line in (d / fname).read_text().splitlines():
                        k, _, v = line.partition(" ")
                        if k == key and int(v) > 0:
                            return True
                except (OSError, ValueError):
                    continue
        return False

    def remove(self) -> None:
        """Remove the group directories (they must be empty; errors ignored)."""
        for d in self.dirs:
            try:
                d.rmdir()
            except OSError:
                pass


def apply_rlimits(limits: ResourceLimits) -> None:
    """In the child before exec: RLIMIT_NOFILE (capped to the hard limit) and RLIMIT_CORE=0."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if limits.nofile is not None:
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        n = limits.nofile if hard == resource.RLIM_INFINITY else min(limits.nofile, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))


def join_cgroups(procs_files: Sequence[str], pid: int | None = None) -> None:
    """Move process ``pid`` into each group: by default this process (in the child before exec);
    a server forked from a preloaded parent is moved by the daemon, before it runs."""
    data = str(os.getpid() if pid is None else pid).encode()
    for f in procs_files:
        fd = os.open(f, os.O_WRONLY)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
