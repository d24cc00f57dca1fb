"""The bytecode store: what the daemon compiled for a venv's processes, kept beside the venvs so a
rebuilt venv gets it back before its processes start (docs/runtime.md, "Bytecode").

A venv's shared bytecode cache (:mod:`gym_runtime.venvs.bytecode`) is lost with the venv; a cold
start (venvs deleted, uv cache kept) would learn and compile it again. The store keeps it,
content-addressed, under ``$GYM_RUNTIME_HOME/bytecode`` (never inside the venv root, never bound
into a sandbox)::

    objects/<p[:2]>/<p>.pyc     a .pyc the daemon compiled, named by the sha256 ``p`` of its bytes
    imports/<digest24>.json     per venv plan digest: {"schema", "tag", "magic", "users": [...],
                                "files": {path in the venv: [sha256 of the source, p]}}
    .lock                       held while saving and pruning

* :meth:`PycStore.save` snapshots a venv's shared cache (every ``.pyc`` of its cache tag whose
  header matches its source's mtime and size: the daemon's compiles) and the users it holds.
* :meth:`PycStore.place` puts them into a venv of the same digest: each file only when the
  venv's source has the recorded sha256, the object's bytes have their name's sha256 (a corrupt
  object is removed) and its header carries the interpreter's magic number. The object is
  hard-linked when its header's mtime and size match the new source (uv hard-links sources from
  its cache, so they usually do), else copied with the new source's mtime and size in its header
  (the bytes after the header are the code, compiled from identical source bytes). The users
  count as learned only when every recorded file was placed.
* Bounded: after each save the :data:`KEEP` most recently used indexes stay and objects none of
  them names are removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from gym_runtime.files import write_bytes, write_json
from gym_runtime.venv_layout import shared_cache

SCHEMA = 1
KEEP = 16  # indexes kept (most recently used first); see docs/runtime.md "Bytecode"
_HEADER = struct.Struct("<4sIII")  # magic, flags (0: timestamp pyc), source mtime, source size
_PROBE = "import sys, importlib.util as u; print(sys.implementation.cache_tag, u.MAGIC_NUMBER.hex())"


@dataclass(frozen=True)
class Interpreter:
    """A venv interpreter's bytecode identity: ``tag`` (``cpython-312``) and ``magic`` (4 bytes)."""

    tag: str
    magic: bytes


def interpreter(python: Path) -> Interpreter:
    """Ask ``python`` (isolated, no ``site``) for its cache tag and magic number. Raises OSError or
    ``subprocess.SubprocessError`` when it does not run."""
    out = subprocess.run(
        [str(python), "-I", "-S", "-c", _PROBE],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
    ).stdout.split()
    return Interpreter(out[0], bytes.fromhex(out[1]))


@dataclass
class Placed:
    """What :meth:`PycStore.place` did: ``users`` now learned (empty unless every file was
    placed), ``placed`` of ``total`` recorded files in the venv's cache, ``rejected`` sources
    changed or objects missing, corrupt or of another interpreter."""

    users: set[str] = field(default_factory=set)
    placed: int = 0
    total: int = 0
    rejected: list[str] = field(default_factory=list)


def _sha256(path: Path | str) -> tuple[str, bytes]:
    data = Path(path).read_bytes()
    return hashlib.sha256(data).hexdigest(), data


def _fresh(head: bytes, magic: bytes, st: os.stat_result) -> bool:
    """True when ``head`` is a timestamp .pyc header of ``magic`` for a source with stat ``st``."""
    if len(head) < _HEADER.size:
        return False
    m, flags, mtime, size = _HEADER.unpack_from(head)
    return m == magic and flags == 0 and mtime == int(st.st_mtime) & 0xFFFFFFFF and size == st.st_size & 0xFFFFFFFF


class PycStore:
    """The store under ``root`` (``$GYM_RUNTIME_HOME/bytecode``). Only the daemon writes it."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _index_path(self, digest: str) -> Path:
        return self.root / "imports" / f"{digest[:24]}.json"

    def _object(self, sha: str) -> Path:
        return self.root / "objects" / sha[:2] / f"{sha}.pyc"

    def index(self, digest: str) -> dict[str, Any] | None:
        """The record for venv plan ``digest``, or None when absent or unreadable."""
        try:
            data = json.loads(self._index_path(digest).read_text())
        except (OSError, ValueError):
            return None
        ok = (
            isinstance(data, dict)
            and data.get("schema") == SCHEMA
            and isinstance(data.get("users"), list)
            and isinstance(data.get("files"), dict)
        )
        return data if ok else None

    def users(self, digest: str) -> set[str]:
        """The users whose imports the store holds for ``digest``."""
        idx = self.index(digest)
        return {u for u in idx["users"] if isinstance(u, str)} if idx else set()

    # ------------------------------------------------------------------ placing
    def place(self, venv: Path, digest: str, interp: Interpreter) -> Placed:
        """Put the stored bytecode of ``digest`` into ``venv``'s ``__pycache__`` dirs (see the
        module docstring for what is checked). Never raises for a bad entry: it is not used."""
        idx = self.index(digest)
        if idx is None or idx.get("tag") != interp.tag or idx.get("magic") != interp.magic.hex():
            return Placed()
        with contextlib.suppress(OSError):  # most recently used: kept by prune() (a read-only store still serves)
            os.utime(self._index_path(digest))
        out = Placed(total=len(idx["files"]))
        root = os.path.realpath(venv)
        for rel, entry in idx["files"].items():
            if self._place_one(venv, root, rel, entry, interp):
                out.placed += 1
            else:
                out.rejected.append(rel)
        if out.placed == out.total:
            out.users = {u for u in idx["users"] if isinstance(u, str)}
        return out

    def _place_one(self, venv: Path, root: str, rel: str, entry: Any, interp: Interpreter) -> bool:
        if not (isinstance(entry, list) and len(entry) == 2 and all(isinstance(e, str) for e in entry)):
            return False
        src = venv / rel
        if not os.path.realpath(src).startswith(root + os.sep) or src.suffix != ".py":
            return False
        target = src.parent / "__pycache__" / f"{src.stem}.{interp.tag}.pyc"
        try:
            st = src.stat()
            try:
                with open(target, "rb") as fh:
                    if _fresh(fh.read(_HEADER.size), interp.magic, st):
                        return True  # the venv's own cache already has it
            except FileNotFoundError:
                pass
            if _sha256(src)[0] != entry[0]:
                return False  # the source changed: its bytecode is compiled again when imported
            obj = self._object(entry[1])
            sha, data = _sha256(obj)
            if sha != entry[1]:
                obj.unlink(missing_ok=True)  # corrupt: never used, written again by the next save
                return False
            if not _fresh(data, interp.magic, st):
                if data[:4] != interp.magic or _HEADER.unpack_from(data)[1] != 0:
                    return False
                target.parent.mkdir(exist_ok=True)
                write_bytes(
                    target,
                    _HEADER.pack(interp.magic, 0, int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF)
                    + data[_HEADER.size :],
                )
                return True
            target.parent.mkdir(exist_ok=True)
            write_bytes(target, link=obj)
            return True
        except (OSError, struct.error):
            return False

    # ------------------------------------------------------------------ saving
    def save(
        self, venv: Path, digest: str, interp: Interpreter, users: set[str], stop: threading.Event | None = None
    ) -> int:
        """Record ``venv``'s shared cache for ``digest`` and its ``users`` (merged with what the
        store has), then :meth:`prune`; returns the files recorded (0 when another daemon holds
        the store or ``stop`` was set). Raises OSError when the store cannot be written."""
        (self.root / "imports").mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(self.root / ".lock"))
        try:
            lock.acquire(timeout=5)
        except Timeout:
            return 0
        try:
            old = self.index(digest)
            if old is not None and (old.get("tag") != interp.tag or old.get("magic") != interp.magic.hex()):
                old = None  # another interpreter's bytecode: start afresh
            files: dict[str, Any] = dict(old["files"]) if old is not None else {}
            for src, pyc in shared_cache(venv, interp.tag):
                if stop is not None and stop.is_set():
                    return 0
                entry = self._save_one(src, pyc, interp)
                if entry is not None:
                    files[os.path.relpath(src, venv)] = entry
            known = set(old["users"]) if old is not None else set()
            write_json(
                self._index_path(digest),
                {
                    "schema": SCHEMA,
                    "tag": interp.tag,
                    "magic": interp.magic.hex(),
                    "users": sorted(known | users),
                    "files": files,
                },
                indent=0,
            )
            self.prune()
            return len(files)
        finally:
            lock.release()

    def _save_one(self, src: str, pyc: str, interp: Interpreter) -> list[str] | None:
        try:
            st = os.stat(src)
            sha, data = _sha256(pyc)
            if not _fresh(data, interp.magic, st):
                return None  # stale or not the daemon's (timestamp, this interpreter) compile
            obj = self._object(sha)
            if not obj.exists():
                obj.parent.mkdir(parents=True, exist_ok=True)
                write_bytes(obj, data)
            return [_sha256(src)[0], sha]
        except OSError:
            return None

    def prune(self, keep: int = KEEP) -> int:
        """Keep the ``keep`` most recently used indexes and the objects they name (call holding
        the store's lock); returns the files removed."""
        base = self.root / "imports"
        indexes = sorted(base.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True) if base.is_dir() else []
        removed = 0
        for p in indexes[keep:]:
            p.unlink(missing_ok=True)
            removed += 1
        named: set[str] = set()
        for p in indexes[:keep]:
            idx = self.index(p.stem)
            named.update(e[1] for e in (idx or {}).get("files", {}).values() if isinstance(e, list) and len(e) == 2)
        objects = self.root / "objects"
        for shard in objects.iterdir() if objects.is_dir() else []:
            for obj in shard.iterdir():
                if obj.stem not in named:
                    obj.unlink(missing_ok=True)
                    removed += 1
        return removed
