"""Get an environment package onto a Ray node: in place when the node has it, else shipped (docs/scale-out.md).

Identity: :func:`package_digest` = the digest of the package tree (relative paths and file sha256s;
``.git``, ``__pycache__``, ``.venv``, ``build``, ``dist`` skipped), the same digest the venv
builder uses for local project requirements.

* **In place**: the node has a directory at the driver's absolute path (a shared filesystem, or
  the same image) whose digest is the driver's: it is used as is.
* **Shipped**: the driver makes one ``tar.gz`` of the tree (:func:`archive`) and puts it in Ray's
  object store once per run; each node that lacks the package checks the archive's sha256,
  extracts it (no links, no absolute paths: ``tarfile``'s ``data`` filter) into a temporary
  directory under its cache, checks the tree digest of the result and renames it to
  ``<cache>/<digest>``. A cached tree with the right digest is reused by later runs; a mismatch
  at any step fails with ``GR-PLACE-PACKAGE`` and leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

from filelock import FileLock

from gym_runtime.errors import StartError
from gym_runtime.venvs.digest import SKIP_DIRS, HashCache, tree_digest


def package_digest(root: Path) -> str:
    """Digest of the package tree at ``root`` (hex sha256; module doc)."""
    return tree_digest(Path(root), HashCache(None))


def _skipped(rel: Path) -> bool:
    return any(part in SKIP_DIRS or part.endswith(".egg-info") for part in rel.parts)


def archive(root: Path) -> tuple[bytes, str]:
    """A ``tar.gz`` of exactly the files :func:`package_digest` covers; returns ``(bytes, sha256)``."""
    root = Path(root)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        for dirpath, dirnames, filenames in os.walk(root):
            rel_dir = Path(dirpath).relative_to(root)
            dirnames[:] = sorted(d for d in dirnames if not _skipped(rel_dir / d))
            for f in sorted(filenames):
                p = Path(dirpath) / f
                if p.is_file() and not p.is_symlink():
                    tar.add(p, arcname=(rel_dir / f).as_posix(), recursive=False)
    blob = buf.getvalue()
    return blob, hashlib.sha256(blob).hexdigest()


def in_place(root: str, digest: str) -> Path | None:
    """``root`` when this node has the package there with ``digest``, else None."""
    path = Path(root)
    if path.is_dir() and package_digest(path) == digest:
        return path
    return None


def unpack(blob: bytes, sha256: str, digest: str, cache: Path) -> Path:
    """The package from a shipped archive, under ``cache/<digest>`` (reused when already there).

    Raises :class:`StartError` ``GR-PLACE-PACKAGE`` when the archive's sha256 or the extracted
    tree's digest is not the expected one (nothing is kept)."""
    final = cache / digest
    cache.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cache / f".{digest[:24]}.lock")):
        if final.is_dir() and package_digest(final) == digest:
            return final
        got = hashlib.sha256(blob).hexdigest()
        if got != sha256:
            raise StartError(
                f"the shipped package archive is corrupt: sha256 {got[:16]}..., expected {sha256[:16]}...",
                code="GR-PLACE-PACKAGE",
                hint="start again; if it repeats, check the node's memory and the Ray object store",
            )
        tmp = Path(tempfile.mkdtemp(prefix=f".{digest[:24]}.", dir=cache))
        try:
            with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
                tar.extractall(tmp, filter="data")
            found = package_digest(tmp)
            if found != digest:
                raise StartError(
                    f"the shipped package does not match the driver's: tree digest {found[:16]}..., "
                    f"expected {digest[:16]}...",
                    code="GR-PLACE-PACKAGE",
                    hint="a file changed while the package was being archived: start again",
                )
            if final.exists():
                shutil.rmtree(final)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return final
