"""A small disk of its own for a test: a tmpfs mount (root only), to fill without touching the host's disks."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_disk(path: Path, size_mb: int) -> Iterator[Path]:
    """Mount a ``size_mb`` MB tmpfs at ``path`` for the ``with`` block (skips the test where
    mounting is not allowed: not root, or no mount namespace rights)."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(path: Path, leave_mb: int) -> Path:
    """Write a filler file at ``path`` until only about ``leave_mb`` MB are free on its disk."""
    st = os.statvfs(path.parent)
    free = st.f_bavail * st.f_frsize
    size = max(0, free - leave_mb * 2**20)
    with open(path, "wb") as f:
        f.truncate(0)
        chunk = b"\0" * 2**20
        for _ in range(size // 2**20):
            f.write(chunk)
    return path
