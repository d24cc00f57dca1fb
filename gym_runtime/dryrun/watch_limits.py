"""The kernel's per-user inotify limits, in words a user can act on (``dry-run --watch``, docs/rollouts.md).

``watchfiles`` (notify underneath) cannot set an inotify watch once the user who runs it holds
``fs.inotify.max_user_instances`` inotify instances (``inotify_init1`` fails with ``EMFILE``,
"Too many open files") or ``fs.inotify.max_user_watches`` watches (``inotify_add_watch`` fails
with ``ENOSPC``, "No space left on device"): every editor window, language server and other watcher
of the same uid holds some (inotify(7), "/proc interfaces"). :func:`exhausted` turns such an error
into the one line the watch says before it polls instead.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

# the setting, the /proc files whose smallest value is the limit that applies (the host's, and the
# user namespace's own), and what ran out
_LIMITS = {
    errno.EMFILE: (
        "fs.inotify.max_user_instances",
        ("/proc/sys/fs/inotify/max_user_instances", "/proc/sys/user/max_inotify_instances"),
        "inotify instances",
    ),
    errno.ENOSPC: (
        "fs.inotify.max_user_watches",
        ("/proc/sys/fs/inotify/max_user_watches", "/proc/sys/user/max_inotify_watches"),
        "inotify watches",
    ),
}
POLL_S = 0.3  # how often the polling watch looks at the trees (watchfiles' poll_delay_ms)


def _errno(exc: BaseException) -> int | None:
    """The errno of ``exc``: an :class:`OSError`'s own, else the ``(os error N)`` notify writes."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return exc.errno
    found = re.search(r"\(os error (\d+)\)", str(exc))
    return int(found.group(1)) if found else None


def _limit(files: tuple[str, ...]) -> int | None:
    values = []
    for f in files:
        try:
            values.append(int(Path(f).read_text().split()[0]))
        except (OSError, ValueError, IndexError):
            continue
    return min(values) if values else None


def held_instances() -> int:
    """How many inotify instances the processes of this uid hold that this process may look at
    (``/proc/<pid>/fd`` links to ``anon_inode:inotify``); a lower bound where others are hidden."""
    uid, count = os.getuid(), 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                count += os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:inotify"
            except OSError:
                continue
    return count


def exhausted(exc: BaseException | None) -> str | None:
    """The warning for a watcher that failed because this user's inotify instances or watches are
    used up (module doc): names the setting, its value, what this uid holds and the ``sysctl`` that
    raises it; ``None`` for any other error."""
    code = _errno(exc) if exc is not None else None
    if code not in _LIMITS:
        return None
    setting, files, what = _LIMITS[code]
    limit = _limit(files)
    held = f"; this user holds {held_instances()}" if code == errno.EMFILE else ""
    raise_to = max(512, 2 * limit) if code == errno.EMFILE and limit else max(524288, 2 * (limit or 0))
    return (
        f"warning: this user's {what} are used up ({setting} = {limit if limit is not None else 'unknown'}{held}): "
        f"watching by polling every {POLL_S:g} s instead (edits are seen, a little later); to watch with inotify "
        f"again close other watchers (editor windows, language servers) or raise the limit: "
        f"sudo sysctl {setting}={raise_to}"
    )
