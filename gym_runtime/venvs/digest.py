"""Content digests: file sha256s (cached by stat) and the digest of a venv plan.

A venv is reused only when its marker holds the digest of every input (docs/architecture.md §5, case C01):
the rendered install file, injected pins and their mode, hash mode, the interpreter (path and
exact version), the uv version, the sha256 of every file in the wheel pool, the stage-2 closure,
uv's honoured index settings, and the contents of local path requirements. A wheel rebuilt
with the same name but new bytes changes its sha256 and so the digest.

File hashes are cached in ``<venv root>/.cache/sha256.json`` keyed by path, size, mtime and
inode, so a warm plan does not re-read large wheels.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

SCHEMA = "gym-runtime-venv/3"  # 2: the fast-exit hook (exit_hook.py); 3: its Ray driver module
SKIP_DIRS = {".git", "__pycache__", ".venv", "build", "dist", ".mypy_cache", ".pytest_cache"}


class HashCache:
    """sha256 of files, remembered by ``(path, size, mtime_ns, inode)``; thread-safe."""

    def __init__(self, store: Path | None) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._data: dict[str, Any] = {}  # key -> [size, mtime_ns, inode, value]; "#names" -> {file: sha256}
        self._dirty = False
        if store and store.is_file():
            try:
                self._data = json.loads(store.read_text())
            except (OSError, ValueError):
                self._data = {}

    def memo(self, path: Path, what: str, compute: Callable[[Path], Any]) -> Any:
        """``compute(path)`` (a JSON value), remembered by the stamp :meth:`sha256` uses, under
        ``what`` (e.g. ``dist-info``: a wheel's METADATA, read once per file version)."""
        st = path.stat()
        key = f"{what}:{path.resolve()}"
        stamp = [st.st_size, st.st_mtime_ns, st.st_ino]
        with self._lock:
            hit = self._data.get(key)
            if isinstance(hit, list) and len(hit) == 4 and hit[:3] == stamp:
                return hit[3]
        value = compute(path)
        with self._lock:
            self._data[key] = [*stamp, value]
            self._dirty = True
        return value

    def sha256(self, path: Path) -> str:
        st = path.stat()
        key = str(path.resolve())
        stamp = [st.st_size, st.st_mtime_ns, st.st_ino]
        with self._lock:
            hit = self._data.get(key)
            if isinstance(hit, list) and hit[:3] == stamp:
                return str(hit[3])
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        digest = h.hexdigest()
        with self._lock:
            self._data[key] = [*stamp, digest]
            self._dirty = True
        return digest

    def changed_since_seen(self, filename: str, sha256: str) -> bool:
        """Record that ``filename`` has ``sha256``; True when a different sha256 was seen before
        under the same file name (a rebuilt wheel: uv's cache would hand out the old contents)."""
        with self._lock:
            seen = self._data.setdefault("#names", {})
            before = seen.get(filename)
            if before != sha256:
                seen[filename] = sha256
                self._dirty = True
        return before is not None and before != sha256

    def save(self) -> None:
        """Write the cache back (atomically) when it changed; errors are ignored (it is a cache)."""
        if not (self.store and self._dirty):
            return
        try:
            self.store.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.store.with_suffix(f".{os.getpid()}.tmp")
            with self._lock:
                tmp.write_text(json.dumps(self._data))
                self._dirty = False
            os.replace(tmp, self.store)
        except OSError:
            pass


def tree_digest(root: Path, cache: HashCache) -> str:
    """Digest of a local project directory (relative paths + file sha256s), for path requirements."""
    h = hashlib.sha256()
    if root.is_file():
        h.update(cache.sha256(root).encode())
        return h.hexdigest()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        for f in sorted(filenames):
            p = Path(dirpath) / f
            if p.is_file() and not p.is_symlink():
                h.update(f"{p.relative_to(root).as_posix()}\0{cache.sha256(p)}\n".encode())
    return h.hexdigest()


def plan_digest(inputs: dict[str, Any]) -> str:
    """sha256 over the canonical JSON of ``inputs`` (plus the schema version)."""
    blob = json.dumps({"schema": SCHEMA, **inputs}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()
