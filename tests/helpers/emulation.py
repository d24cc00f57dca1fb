"""Running another architecture's binaries on this host, as the arm64 image's build and test do
(docs/container.md "arm64 under emulation").

Debian's ``qemu-user-static`` registers its interpreters with the kernel's ``binfmt_misc`` (through
``binfmt-support``) with the ``F`` flag: the kernel opens the interpreter once, at registration, so
it also runs binaries inside a container or chroot whose filesystem has no qemu. :func:`emulation_missing`
makes that so where it can (as root: installs the packages, mounts ``binfmt_misc``, enables the
entry) and otherwise says what is missing, for a clean skip.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.helpers.podman import ensure_tools, host_arch, tail

QEMU = {"amd64": "x86_64", "arm64": "aarch64"}  # Debian architecture -> qemu's (and binfmt entry's) name
BINFMT = Path("/proc/sys/fs/binfmt_misc")


def _entry(arch: str, binfmt: Path) -> dict[str, str] | None:
    """The ``qemu-<name>`` binfmt_misc entry as ``{"state": "enabled", "flags": "PF", ...}``, or None."""
    path = binfmt / f"qemu-{QEMU[arch]}"
    if not path.is_file():
        return None
    lines = path.read_text().splitlines()
    fields = dict(line.split(" ", 1) for line in lines[1:] if " " in line)
    return {"state": lines[0].strip() if lines else "", "flags": fields.get("flags:", "").strip(), **fields}


def emulation_missing(arch: str, binfmt: Path = BINFMT) -> str | None:
    """None when binaries of Debian architecture ``arch`` run here (natively, or through an enabled
    qemu-user entry with the ``F`` flag), else why not and how to fix it."""
    if arch == host_arch():
        return None
    if arch not in QEMU:
        return f"no emulation of {arch} is known here (known: {', '.join(QEMU)})"
    name = QEMU[arch]
    reason = ensure_tools(f"qemu-{name}-static", "update-binfmts")
    if reason:
        return f"{arch} emulation: {reason}"
    if not (binfmt / "status").is_file():
        if os.geteuid() != 0:
            return f"{arch} emulation: binfmt_misc is not mounted at {binfmt} (as root: mount -t binfmt_misc none {binfmt})"
        done = subprocess.run(
            ["mount", "-t", "binfmt_misc", "binfmt_misc", str(binfmt)], capture_output=True, text=True
        )
        if done.returncode != 0:
            return f"{arch} emulation: cannot mount binfmt_misc at {binfmt}: {tail(done.stderr)}"
    entry = _entry(arch, binfmt)
    if (entry is None or entry["state"] != "enabled") and os.geteuid() == 0:
        done = subprocess.run(["update-binfmts", "--enable", f"qemu-{name}"], capture_output=True, text=True)
        if done.returncode != 0:
            return f"{arch} emulation: `update-binfmts --enable qemu-{name}` failed: {tail(done.stderr)}"
        entry = _entry(arch, binfmt)
    if entry is None or entry["state"] != "enabled":
        return (
            f"{arch} emulation: the binfmt_misc entry qemu-{name} is not enabled (update-binfmts --enable qemu-{name})"
        )
    if "F" not in entry["flags"]:
        return (
            f"{arch} emulation: qemu-{name} is registered without the F flag (flags: {entry['flags'] or 'none'}), "
            "so containers cannot reach its interpreter; use Debian's qemu-user-static registration"
        )
    return None
