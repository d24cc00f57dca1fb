"""Small image root filesystems for task sandbox tests, built from this host's own binaries.

``mini_rootfs(dest)`` copies a shell and a few tools with the shared libraries ``ldd`` names (no
network, no registry); ``oci_layout`` and ``oci_archive`` pack a root filesystem the way
``skopeo copy ... oci:DIR`` and ``podman save --format oci-archive`` do (one gzip layer, an image
config with ``Env`` and ``WorkingDir``), optionally with a second layer of OCI whiteouts.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

TOOLS = (
    "/bin/sh",
    "/bin/cat",
    "/bin/ls",
    "/bin/echo",
    "/bin/sleep",
    "/bin/mkdir",
    "/bin/rm",
    "/usr/bin/id",
    "/usr/bin/env",
    "/bin/kill",
)


def mini_rootfs(dest: Path, tools: tuple[str, ...] = TOOLS) -> Path:
    """A root filesystem at ``dest`` holding ``tools`` (by their absolute paths) and their libraries."""
    for d in ("bin", "usr/bin", "tmp", "etc", "proc", "dev", "root"):
        (dest / d).mkdir(parents=True, exist_ok=True)
    for tool in tools:
        real = Path(tool).resolve()
        if not real.exists():
            continue
        target = dest / tool.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(real, target)
        out = subprocess.run(["ldd", str(real)], capture_output=True, text=True).stdout
        for lib in re.findall(r"(/\S+)", out):
            lib_dest = dest / lib.lstrip("/")
            if not lib_dest.exists():
                lib_dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(Path(lib).resolve(), lib_dest)
    (dest / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    return dest


def _tar_gz(rootfs: Path | None, extra: dict[str, bytes] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        if rootfs is not None:
            for p in sorted(rootfs.rglob("*")):
                tf.add(p, arcname=str(p.relative_to(rootfs)), recursive=False)
        for name, data in (extra or {}).items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return gzip.compress(buf.getvalue(), mtime=0)


def _blob(layout: Path, data: bytes) -> dict:
    digest = hashlib.sha256(data).hexdigest()
    (layout / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (layout / "blobs" / "sha256" / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def oci_layout(
    rootfs: Path,
    layout: Path,
    env: list[str] | None = None,
    workdir: str | None = None,
    whiteouts: dict[str, bytes] | None = None,
) -> Path:
    """An OCI image layout at ``layout`` with ``rootfs`` as its first layer and, when given, a second
    layer holding ``whiteouts`` (``{"bin/.wh.ls": b""}``-style entries and plain files)."""
    layout.mkdir(parents=True, exist_ok=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    layers = [_blob(layout, _tar_gz(rootfs))]
    if whiteouts:
        layers.append(_blob(layout, _tar_gz(None, whiteouts)))
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": env or ["PATH=/usr/bin:/bin"], "WorkingDir": workdir or ""},
        "rootfs": {"type": "layers", "diff_ids": []},
    }
    cfg = _blob(layout, json.dumps(config).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **cfg},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **ly} for ly in layers],
    }
    m = _blob(layout, json.dumps(manifest).encode())
    (layout / "index.json").write_text(
        json.dumps(
            {"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", **m}]}
        )
    )
    return layout


def oci_archive(layout: Path, archive: Path) -> Path:
    """``layout`` packed as an OCI archive file (``podman save --format oci-archive``)."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w") as tf:
        for p in sorted(layout.rglob("*")):
            tf.add(p, arcname=str(p.relative_to(layout)), recursive=False)
    return archive
