"""Where a task sandbox's image comes from: a root filesystem the operator provides (docs/runtime.md).

``SandboxSpec.image`` (an OCI reference such as ``python:3.12-slim``) is looked up, in order:

1. the operator's map (``GYM_RUNTIME_SANDBOX_IMAGE_MAP``: ``REF=PATH`` or ``REF=host`` entries,
   ``*`` for every other image): ``host`` is the host's own read-only root (``boxroot.py``);
2. each images directory (``GYM_RUNTIME_SANDBOX_IMAGES``, default ``$GYM_RUNTIME_HOME/images``),
   under the reference's normalised path ``<registry>/<repository>/<tag>``
   (``python:3.12-slim`` -> ``docker.io/library/python/3.12-slim``): there either

   * an unpacked root filesystem (a directory with ``bin`` or ``usr``; e.g. what ``umoci unpack``
     leaves as ``rootfs/``, or ``podman export`` untarred),
   * an OCI image layout (``oci-layout`` + ``index.json`` + ``blobs/``: ``skopeo copy
     docker://REF oci:DIR``), or
   * an archive ``<tag>.tar`` / ``<tag>.tar.gz`` holding an OCI layout (``podman save --format
     oci-archive``) or a Docker archive (``docker save``, ``podman save``).

A layout or archive is unpacked once (its layers in order, with OCI whiteouts) into the unpack
cache (``$GYM_RUNTIME_HOME/images-unpacked/<sha256>/``, named by the manifest's digest), every
file owned by the daemon's uid (the box's root), device nodes skipped (a box gets its own
``/dev``); the image config's ``Env`` and ``WorkingDir`` are kept. No image given means the host
root. An image found nowhere raises :class:`ImageNotFound` naming the image and every place looked.
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import json
import os
import shutil
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .boxroot import BoxRoot

HOST = "host"


class ImageNotFound(LookupError):
    """No root filesystem for an image: ``image`` and ``looked`` (every path and map entry tried)."""

    def __init__(self, image: str, looked: list[str]) -> None:
        self.image, self.looked = image, looked
        super().__init__(f"no root filesystem for image {image!r}; looked at: " + "; ".join(looked))


class ImageError(ValueError):
    """An image was found but cannot be used (a broken layout or archive); ``str()`` says why."""


def normalize(ref: str) -> str:
    """``registry/repository:tag`` (or ``@digest``) of an OCI reference, Docker's defaults applied:
    ``python:3.12`` -> ``docker.io/library/python:3.12``, ``docker://x`` -> ``docker.io/library/x:latest``."""
    ref = ref.strip()
    for prefix in ("docker://", "oci://"):
        if ref.startswith(prefix):
            ref = ref[len(prefix) :]
    name, digest = (ref.split("@", 1) + [""])[:2]
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        registry, repo = first, rest
    else:
        registry, repo = "docker.io", name
    if registry == "docker.io" and "/" not in repo.split(":", 1)[0]:
        repo = "library/" + repo
    if digest:
        return f"{registry}/{repo}@{digest}"
    if ":" not in repo.rsplit("/", 1)[-1]:
        repo += ":latest"
    return f"{registry}/{repo}"


def ref_path(ref: str) -> PurePosixPath:
    """The relative path of a normalised reference in an images directory (``...python/3.12-slim``)."""
    norm = normalize(ref)
    if "@" in norm:
        name, digest = norm.split("@", 1)
        return PurePosixPath(name) / digest.replace(":", "_")
    name, tag = norm.rsplit(":", 1)
    return PurePosixPath(name) / tag


def parse_image_map(raw: str) -> dict[str, str]:
    """``REF=PATH|host`` comma list -> {normalised ref or ``*``: target}; raises ValueError."""
    out: dict[str, str] = {}
    for item in (x.strip() for x in raw.split(",") if x.strip()):
        ref, sep, target = item.partition("=")
        if not sep or not ref.strip() or not target.strip():
            raise ValueError(f"entry {item!r} is not REF=PATH or REF=host")
        ref, target = ref.strip(), target.strip()
        if target != HOST and not os.path.isabs(target):
            raise ValueError(f"entry {item!r}: the path must be absolute")
        out["*" if ref == "*" else normalize(ref)] = target
    return out


@dataclass
class ImageStore:
    """Resolves images to box roots. ``dirs``: the images directories; ``cache``: the unpack cache;
    ``mapping``: the operator's map (:func:`parse_image_map`)."""

    dirs: Sequence[Path]
    cache: Path
    mapping: Mapping[str, str]

    def resolve(self, image: str | None) -> BoxRoot:
        """The root for ``image`` (None: the host root). Raises ImageNotFound, ImageError."""
        if image is None or not image.strip():
            return BoxRoot.host()
        norm = normalize(image)
        looked: list[str] = []
        target = self.mapping.get(norm) or self.mapping.get("*")
        if target is not None:
            source = f"GYM_RUNTIME_SANDBOX_IMAGE_MAP ({'*' if norm not in self.mapping else norm}={target})"
            if target == HOST:
                return BoxRoot("host", image=image, source=source)
            found = self._at(Path(target), image, source)
            if found is not None:
                return found
            looked.append(f"{source}: {target} (neither a root filesystem, an OCI layout nor an archive)")
        rel = ref_path(image)
        for d in self.dirs:
            for candidate in (d / rel, d / f"{rel}.tar", d / f"{rel}.tar.gz"):
                found = self._at(candidate, image, str(candidate)) if candidate.exists() else None
                if found is not None:
                    return found
            looked.append(f"{d / rel}[.tar|.tar.gz]")
        raise ImageNotFound(image, looked or ["no images directory is set"])

    def _at(self, path: Path, image: str, source: str) -> BoxRoot | None:
        if path.is_dir() and (path / "index.json").is_file():
            return self._unpacked(image, source, lambda: path)
        if path.is_dir() and ((path / "bin").exists() or (path / "usr").is_dir()):
            return BoxRoot("rootfs", path.resolve(), image=image, source=source)
        if path.is_dir() and (path / "rootfs").is_dir():  # an OCI runtime bundle (umoci unpack)
            config = _bundle_config(path)
            return BoxRoot("rootfs", (path / "rootfs").resolve(), image, *config, source=source)
        if path.is_file() and path.name.endswith((".tar", ".tar.gz", ".tgz")):
            return self._unpacked(image, source, lambda: path)
        return None

    def _unpacked(self, image: str, source: str, where) -> BoxRoot:
        path = where()
        key = _digest_of(path)
        dest = self.cache / key
        if not (dest / "ready.json").is_file():
            self.cache.mkdir(parents=True, exist_ok=True)
            with open(self.cache / f".{key}.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if not (dest / "ready.json").is_file():
                    _unpack(path, dest)
        meta = json.loads((dest / "ready.json").read_text())
        return BoxRoot(
            "rootfs",
            dest / "rootfs",
            image,
            tuple(meta.get("env") or ()),
            meta.get("workdir") or None,
            source=f"{source} (unpacked in {dest})",
        )


def _bundle_config(bundle: Path) -> tuple[tuple[str, ...], str | None]:
    try:
        proc = json.loads((bundle / "config.json").read_text()).get("process", {})
        return tuple(proc.get("env") or ()), proc.get("cwd") or None
    except (OSError, ValueError):
        return (), None


def _digest_of(path: Path) -> str:
    """A cache key: the layout's manifest digest, or an archive's sha256 (with size and mtime)."""
    if path.is_dir():
        index = json.loads((path / "index.json").read_text())
        manifests = index.get("manifests") or []
        if not manifests:
            raise ImageError(f"{path}/index.json lists no manifest")
        return manifests[0]["digest"].split(":", 1)[-1][:32]
    st = path.stat()
    return hashlib.sha256(f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:32]


def _unpack(path: Path, dest: Path) -> None:
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        layout = path
        if path.is_file():
            layout = tmp / "archive"
            layout.mkdir()
            with tarfile.open(path) as tf:
                tf.extractall(layout, filter="data")
        layers, config = _layers(layout)
        rootfs = tmp / "rootfs"
        rootfs.mkdir()
        for layer in layers:
            _apply_layer(layer, rootfs)
        cfg = config.get("config") or config.get("Config") or {}
        (tmp / "ready.json").write_text(
            json.dumps({"source": str(path), "env": cfg.get("Env") or [], "workdir": cfg.get("WorkingDir") or None})
        )
        if (tmp / "archive").exists():
            shutil.rmtree(tmp / "archive")
        shutil.rmtree(dest, ignore_errors=True)
        os.rename(tmp, dest)
    except (OSError, KeyError, ValueError, tarfile.TarError) as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ImageError(f"cannot unpack the image at {path}: {e}") from None


def _blob(layout: Path, digest: str) -> Path:
    algo, _, hexd = digest.partition(":")
    return layout / "blobs" / algo / hexd


def _layers(layout: Path) -> tuple[list[Path], dict]:
    """The layer files (in order) and the image config of an OCI layout or a Docker archive."""
    if (layout / "index.json").is_file():
        desc = json.loads((layout / "index.json").read_text())["manifests"][0]
        manifest = json.loads(_blob(layout, desc["digest"]).read_text())
        if "manifests" in manifest:  # an image index: take the first (linux/amd64 first in practice)
            manifest = json.loads(_blob(layout, manifest["manifests"][0]["digest"]).read_text())
        config = json.loads(_blob(layout, manifest["config"]["digest"]).read_text())
        return [_blob(layout, layer["digest"]) for layer in manifest["layers"]], config
    if (layout / "manifest.json").is_file():
        entry = json.loads((layout / "manifest.json").read_text())[0]
        return [layout / p for p in entry["Layers"]], json.loads((layout / entry["Config"]).read_text())
    raise ImageError(f"{layout}: neither an OCI layout (index.json) nor a Docker archive (manifest.json)")


def _open_layer(path: Path) -> tarfile.TarFile:
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic[:2] == b"\x1f\x8b":
        return tarfile.open(fileobj=gzip.open(path), mode="r|")
    if magic == b"\x28\xb5\x2f\xfd":
        raise ImageError(
            f"layer {path.name} is zstd-compressed, which this runtime cannot read; "
            "unpack the image (umoci unpack) and provide its rootfs instead"
        )
    return tarfile.open(path, mode="r|")


def _apply_layer(layer: Path, rootfs: Path) -> None:
    """One layer onto ``rootfs``: whiteouts first (``.wh.NAME`` removes NAME, ``.wh..wh..opq``
    empties its directory: OCI image spec, "Whiteouts"), then the other entries."""
    with _open_layer(layer) as tf:
        for m in tf:
            name = PurePosixPath(m.name.lstrip("./") if m.name not in (".", "./") else "")
            if not name.name.startswith(".wh."):
                continue
            target = rootfs / name.parent
            if name.name == ".wh..wh..opq":
                if target.is_dir():
                    for child in target.iterdir():
                        _remove(child)
            else:
                _remove(target / name.name[4:])
    uid, gid = os.getuid(), os.getgid()

    def keep(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
        if PurePosixPath(member.name).name.startswith(".wh.") or member.isdev():
            return None
        member = tarfile.tar_filter(member, path)
        return member.replace(uid=uid, gid=gid, uname="", gname="", deep=False)

    with _open_layer(layer) as tf:
        tf.extractall(rootfs, filter=keep)


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
