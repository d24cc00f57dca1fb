"""How a server's trees, venvs and work directories reach its OpenSandbox sandbox: the one seam
between the two delivery modes (docs/runtime.md, "Delivery modes"). The environment asks
:meth:`mounts` for a sandbox's ``volumes`` (wire format of ``POST /v1/sandboxes``,
opensandbox-server 1.1.1) and nothing else differs.

* :class:`HostPaths` (``GYM_RUNTIME_OPENSANDBOX_VOLUME`` unset): every path a server needs is a
  ``host`` volume at the same path (:func:`.spec.volumes`): sandboxes share the daemon's disk.
* :class:`SharedVolume` (``GYM_RUNTIME_OPENSANDBOX_VOLUME=<claim>``): nothing goes by host path.
  The volume the daemon sees mounted at its state root (``GYM_RUNTIME_HOME``: venvs, bytecode
  store, run directories) is a ``pvc`` volume mounted read-only at that same path in every
  sandbox. A read-only tree outside the state root (the package, the built-in server trees) is
  copied once onto the volume, under ``delivered/<key>-<signature>/`` (the signature hashes the
  tree's names, sizes and modification times: a changed tree is a new copy, a copy in use is never
  rewritten), and mounted from there (``subPath``) read-only at its own path. A writable
  directory (each server's work directory, its ``HOME`` and log directory) is a ``subPath`` of the
  same volume mounted read-write at its path: one claim for the operator to provision, and what a
  server writes is where the daemon reads it. A writable directory outside the state root cannot
  be delivered (``GR-OSB-VOLUME-PATH``). The interpreter the venvs point at is not copied: it is
  on the volume (under the state root) or in the sandbox image at the same path, which the volume
  check (:mod:`.volume_check`) verifies before any server starts (its block names the interpreter, the image and the fix).

Every ``pvc`` volume is sent with ``createIfNotExists: false``: a wrong claim name is refused by
the server (docker runtime: ``VOLUME::PVC_VOLUME_NOT_FOUND``) instead of an empty volume made in
its place.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gym_runtime.errors import SandboxServiceSettingsError

from ..probe import interpreter_roots
from .spec import outermost, volumes

SYSTEM = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # the image's own, never mounted
DELIVERED = "delivered"  # the copies of trees outside the state root, under it


def _system(p: Path | str) -> bool:
    return any(str(p) == s or str(p).startswith(s + "/") for s in SYSTEM)


def _existing(paths: Iterable[Path | str]) -> list[Path]:
    return [Path(p).resolve() for p in paths if Path(p).exists()]


class HostPaths:
    """Host volumes at the same path (the server's ``[storage] allowed_host_paths`` must hold them)."""

    mode = "host paths"

    def mounts(self, spec: Any) -> list[dict[str, Any]]:
        """``spec``'s read-only paths, its cwd and its interpreter's roots (the image's own under
        :data:`SYSTEM` left out) and its writable paths, as :func:`.spec.volumes`."""
        ro = [
            p
            for p in (*spec.read_only_paths, *interpreter_roots(str(spec.argv[0])), spec.cwd)
            if not _system(Path(p).resolve())
        ]
        return volumes(_existing(ro), _existing(spec.writable_paths))

    def interpreters(self, specs: Iterable[Any]) -> list[str]:
        """Interpreters to look for in the image: none (they are mounted, or the image's by path)."""
        return []

    async def check(self, env: Any, specs: list[Any]) -> list[str]:
        """Nothing to check before the first creates (the server checks each host path): no line to say."""
        return []

    def describe(self) -> dict[str, Any]:
        return {"delivery": self.mode}


def _pvc(claim: str, name: str, mount: Path, read_only: bool, sub_path: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": name,
        "pvc": {"claimName": claim, "createIfNotExists": False, "deleteOnSandboxTermination": False},
        "mountPath": str(mount),
        "readOnly": read_only,
    }
    if sub_path:
        out["subPath"] = sub_path
    return out


def signature(path: Path) -> str:
    """16 hex digits hashing every name under ``path`` (a file or a tree) with its size and
    modification time (ns); symlinks by their target text."""
    h = hashlib.sha256()
    if path.is_file():
        st = path.stat()
        h.update(f"{path.name}\0{st.st_size}\0{st.st_mtime_ns}".encode())
        return h.hexdigest()[:16]
    for base, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files) + [d for d in dirs if os.path.islink(os.path.join(base, d))]:
            full = os.path.join(base, name)
            st = os.lstat(full)
            extra = os.readlink(full) if os.path.islink(full) else f"{st.st_size}\0{st.st_mtime_ns}"
            h.update(f"{os.path.relpath(full, path)}\0{extra}\n".encode())
    return h.hexdigest()[:16]


class SharedVolume:
    """``claim``: the volume's claim name; ``root``: where the daemon sees it mounted (its state
    root, resolved). ``staged`` maps a tree outside the state root to its copy's sub-path."""

    mode = "shared volume"

    def __init__(self, claim: str, root: Path) -> None:
        self.claim, self.root = claim, Path(root).resolve()
        self.staged: dict[Path, str] = {}

    def root_mount(self) -> dict[str, Any]:
        """The state root, read-only at its own path (what the volume check's sandbox gets)."""
        return _pvc(self.claim, "state", self.root, True)

    def under_root(self, p: Path) -> bool:
        return p == self.root or self.root in p.parents

    def stage(self, path: Path) -> str:
        """The sub-path (relative to the state root) of ``path``'s copy on the volume, made when
        missing (copied to a temporary name, then renamed: a half-made copy is never used)."""
        if path in self.staged:
            return self.staged[path]
        key = hashlib.sha256(str(path).encode()).hexdigest()[:12]
        rel = f"{DELIVERED}/{key}-{signature(path)}"
        dest = self.root / rel
        if not dest.exists():
            tmp = self.root / DELIVERED / f".tmp-{key}-{uuid.uuid4().hex[:8]}"
            tmp.parent.mkdir(parents=True, exist_ok=True)
            if path.is_file():
                tmp.mkdir()
                shutil.copy2(path, tmp / path.name)
            else:
                shutil.copytree(path, tmp, symlinks=True)
            try:
                tmp.rename(dest)
            except OSError:  # another daemon made the same copy meanwhile
                shutil.rmtree(tmp, ignore_errors=True)
        self.staged[path] = f"{rel}/{path.name}" if path.is_file() else rel
        return self.staged[path]

    def mounts(self, spec: Any) -> list[dict[str, Any]]:
        """The state root read-only (read-write when it is itself a writable path), each
        read-only path outside it from its copy (:meth:`stage`), each writable path as a
        read-write sub-path; raises ``GR-OSB-VOLUME-PATH`` for a writable path outside it."""
        writable = outermost(_existing(spec.writable_paths))
        outside = [p for p in writable if not self.under_root(p)]
        if outside:
            raise SandboxServiceSettingsError(
                f"server {spec.name!r} writes to {outside[0]}, which is not on the shared volume "
                f"{self.claim!r} (mounted at GYM_RUNTIME_HOME={self.root})",
                code="GR-OSB-VOLUME-PATH",
                hint="sandboxes see only that volume: give --work-dir (and GYM_RUNTIME_TOKEN_CAPTURE_DIR, "
                "when set) a directory under GYM_RUNTIME_HOME, or unset GYM_RUNTIME_OPENSANDBOX_VOLUME",
            )
        ro = [p for p in _existing([*spec.read_only_paths, spec.cwd]) if not _system(p) and not self.under_root(p)]
        out = [_pvc(self.claim, "state", self.root, self.root not in writable)]
        out += [
            _pvc(self.claim, f"tree-{i}", p, True, self.stage(p))
            for i, p in enumerate(q for q in outermost(ro) if q not in writable)
        ]
        out += [
            _pvc(self.claim, f"rw-{i}", p, False, str(p.relative_to(self.root)))
            for i, p in enumerate(q for q in writable if q != self.root)
        ]
        return out

    def interpreters(self, specs: Iterable[Any]) -> list[str]:
        """The interpreters ``specs``' venvs point at (resolved) that are not on the volume: the
        sandbox image must hold each at the same path (checked by :mod:`.volume_check`)."""
        found = (Path(str(s.argv[0])).resolve() for s in specs)
        return sorted({str(p) for p in found if not self.under_root(p)})

    async def check(self, env: Any, specs: list[Any]) -> list[str]:
        """Before any server's sandbox is made: every spec's mounts worked out (trees copied onto
        the volume, a writable path outside it refused), then the volume check in one probe
        sandbox (:func:`.volume_check.run`). Returns the progress line to say; raises
        ``GR-OSB-VOLUME-PATH`` and the check's blocks."""
        import asyncio

        from . import volume_check

        for spec in specs:
            await asyncio.to_thread(self.mounts, spec)
        interpreters = self.interpreters(specs)
        await volume_check.run(env, self, interpreters)
        return [
            f"shared volume {self.claim!r} at {self.root}: seen by a probe sandbox; {len(self.staged)} tree(s) "
            f"outside it copied onto it; interpreter(s) in the image: {', '.join(interpreters) or 'none'}"
        ]

    def describe(self) -> dict[str, Any]:
        return {"delivery": self.mode, "volume": self.claim, "mounted_at": str(self.root)}


def delivery_for(conn: Any) -> HostPaths | SharedVolume:
    """The delivery mode of ``conn`` (:class:`~.connection.OpenSandboxConnection`): its volume's, else host paths."""
    if conn.volume:
        return SharedVolume(conn.volume, conn.state_root)
    return HostPaths()
