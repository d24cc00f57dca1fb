"""uv cache maintenance that never races a build, and the local-filesystem check (case C18).

Builds hold a shared ``flock`` on the cache (:func:`gym_runtime.venvs.store.cache_lock`);
:func:`prune_cache` takes it exclusively, so it waits for running builds (or gives up after
``wait_s`` and says so). A cache on a network filesystem (NFS, CIFS, ...) gets a warning: uv's
cache locking is not reliable there.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from gym_runtime.errors import BuildError
from gym_runtime.settings import RuntimeSettings
from gym_runtime.venvs.store import cache_lock, cache_lock_path
from gym_runtime.venvs.uvrun import make_env, run_uv

NETWORK_FS = {"nfs", "nfs4", "cifs", "smb3", "smbfs", "fuse.sshfs", "9p", "lustre", "gpfs", "ceph", "glusterfs"}


def filesystem_type(path: Path, mounts: str = "/proc/mounts") -> str | None:
    """The filesystem type of the mount holding ``path`` (longest mount-point prefix)."""
    try:
        lines = Path(mounts).read_text().splitlines()
    except OSError:
        return None
    target = str(path.resolve())
    best, kind = "", None
    for ln in lines:
        parts = ln.split()
        if len(parts) >= 3:
            mp = parts[1].replace("\\040", " ")
            if (target == mp or target.startswith(mp.rstrip("/") + "/")) and len(mp) >= len(best):
                best, kind = mp, parts[2]
    return kind


def network_fs_warning(cache_dir: Path | None) -> str | None:
    """A warning when the uv cache lives on a network filesystem, else ``None``."""
    base = cache_lock_path(cache_dir).parent
    probe = base if base.exists() else base.parent
    kind = filesystem_type(probe)
    if kind in NETWORK_FS:
        return (
            f"the uv cache {base} is on a network filesystem ({kind}); parallel builds may corrupt it. "
            "Set GYM_RUNTIME_UV_CACHE_DIR to a local disk"
        )
    return None


def prune_cache(settings: RuntimeSettings, wait_s: float | None = None, cancel: threading.Event | None = None) -> bool:
    """Run ``uv cache prune`` holding the cache exclusively (``gym-runtime prune``); ``False`` when
    skipped after ``wait_s`` seconds of running builds. uv takes its own lock on the cache too, which
    every other uv process using it holds shared (``uv run`` for as long as its command runs): uv
    waits for it at most ``wait_s`` (``UV_LOCK_TIMEOUT``). Raises :class:`BuildError`:
    ``GR-BUILD-CACHE-BUSY`` when uv's lock stayed held (naming the likely holder),
    ``GR-BUILD-CACHE-PRUNE`` (naming the log) for any other uv failure."""
    started = time.monotonic()
    with cache_lock(settings.uv_cache_dir, exclusive=True, timeout_s=wait_s) as got:
        if not got:
            return False
        env = make_env(settings.environ, settings.uv_cache_dir).env
        if wait_s is not None:
            env["UV_LOCK_TIMEOUT"] = str(max(1, round(wait_s - (time.monotonic() - started))))
        log = settings.logs_dir / "build" / "cache-maintenance.log"
        res = run_uv(["cache", "prune"], env=env, log=log, cwd=settings.logs_dir, cancel=cancel)
        if res.returncode != 0 and "waiting for lock" in res.output:
            raise BuildError(
                "the uv cache was not pruned: another uv process holds uv's own lock on it",
                code="GR-BUILD-CACHE-BUSY",
                cause=_last_line(res.output, "waiting for lock"),
                hint="a `uv run` (or `./uvw run`) holds it for as long as the command it started "
                "runs, this one included: run the venv's own `gym-runtime prune` (e.g. "
                "`.venv/bin/gym-runtime prune`), or wait for the other uv process",
                log=str(log),
            )
        if res.returncode != 0:
            raise BuildError(
                f"`uv cache prune` failed (exit {res.returncode})",
                code="GR-BUILD-CACHE-PRUNE",
                cause=_last_line(res.output, ""),
                hint="see the log; a damaged cache can be removed whole with `uv cache clean`",
                log=str(log),
            )
        return True


def _last_line(output: str, containing: str) -> str | None:
    lines = [ln.strip() for ln in output.splitlines() if containing in ln and ln.strip()]
    return lines[-1] if lines else None
