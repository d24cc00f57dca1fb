"""The shared-volume delivery mode's pieces for the tests and benches (docs/runtime.md, "Delivery
modes"): :func:`named_volume` makes a podman named volume on the test OpenSandbox server's podman
service (the claim a daemon names in ``GYM_RUNTIME_OPENSANDBOX_VOLUME``; the daemon sees it at its
mount point on this host, ``GYM_RUNTIME_HOME`` there, as a pod sees its PVC), and
:func:`put_interpreter` puts an interpreter the sandbox image does not hold onto that volume.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def named_volume(server, prefix: str = "gym-state") -> Iterator[tuple[str, Path]]:
    """A new named volume on ``server``'s podman service (an
    :class:`~tests.helpers.opensandbox.server.OpenSandboxServer`): yields its name (the claim) and
    its mount point on this host. On exit every sandbox of the server is deleted, then the volume.
    Raises ``httpx.HTTPStatusError`` when podman refuses to make it."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    server.docker("POST", "/volumes/create", json={"Name": name}).raise_for_status()
    try:
        mount = Path(server.docker("GET", f"/volumes/{name}").json()["Mountpoint"])
        yield name, mount
    finally:
        server.delete_all()
        server.docker("DELETE", f"/volumes/{name}", params={"force": "true"})


def put_interpreter(python: Path | str, home: Path) -> str:
    """The installation ``python`` belongs to (its ``sys.base_prefix``) copied under
    ``home/interpreters/<prefix's name>/`` (hard links where the file system allows, else copies;
    symlinks kept), so sandboxes that mount only the volume at ``home`` can run venvs of it.
    Returns the path of ``python``'s counterpart there. Raises ``subprocess.CalledProcessError``
    when ``python`` does not run, ``FileExistsError`` when the target is already there."""
    prefix = Path(
        subprocess.run(
            [str(python), "-c", "import sys; print(sys.base_prefix)"], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    target = home / "interpreters" / prefix.name

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(prefix, target, symlinks=True, copy_function=link)
    return str(target / Path(python).resolve().relative_to(prefix.resolve()))
