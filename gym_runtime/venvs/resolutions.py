"""Recorded resolutions: what stage 1 installed for a venv plan, replayed offline when the same plan
is built again (docs/architecture.md §5, "Rebuilding a plan").

A venv is named by its plan digest (the install file, pins, interpreter, uv, index settings, local
inputs). A kept venv is reused for years without resolving again; a venv of the same plan rebuilt
after it was removed (a fresh pod with the uv cache on a volume) would otherwise resolve against the
index anew, paying one HTTP revalidation per distribution (~6 s for NeMo Gym's ~180, against 0.6 s
to link the same set from the uv cache) and possibly getting newer releases than the venv it
replaces. So the distributions stage 1 installed are recorded per plan digest under
``$GYM_RUNTIME_HOME/resolutions/<digest24>.json``::

    {"digest": "<plan digest>", "python": "3.12.1", "recorded_at": "2026-11-30T21:00:00+0000",
     "installed": {"<canonical name>": "<version>", ...}}

and a rebuild of that plan first runs stage 1 with ``--offline`` and these versions as constraints
(``-c``: a local or direct-URL requirement still comes from where it names). When uv cannot do it
offline (the cache was pruned), stage 1 runs as usual against the index, and the venv log says why.
Remove the file (or the whole directory) to resolve a plan anew. Only the :data:`KEEP` most
recently used records stay. A record that does not parse, names another digest or holds a name or
version :mod:`packaging` rejects is ignored (nothing here is trusted to be well formed).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from packaging.utils import InvalidName, canonicalize_name
from packaging.version import InvalidVersion, Version

from gym_runtime.files import write_json

KEEP = 64  # records kept, most recently used first (a record is ~5 KiB)


def record_path(root: Path, digest: str) -> Path:
    """Where the record for plan ``digest`` lives under ``root`` (``settings.resolutions_dir``)."""
    return root / f"{digest[:24]}.json"


def recorded(root: Path, digest: str) -> dict[str, str] | None:
    """The recorded ``{name: version}`` for plan ``digest``, or None (no record, or one that is not
    well formed: see the module doc). Marks the record as used (its mtime) for :func:`record`'s
    pruning."""
    path = record_path(root, digest)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    installed = data.get("installed") if isinstance(data, dict) and data.get("digest") == digest else None
    if not isinstance(installed, dict) or not installed:
        return None
    try:
        ok = all(
            isinstance(n, str)
            and isinstance(v, str)
            and canonicalize_name(n, validate=True) == n
            and Version(v) is not None
            for n, v in installed.items()
        )
    except (InvalidName, InvalidVersion):
        ok = False
    if not ok:
        return None
    try:
        os.utime(path)
    except OSError:
        pass
    return dict(installed)


def record(root: Path, digest: str, python: str, installed: dict[str, str], keep: int = KEEP) -> Path:
    """Record what stage 1 installed for plan ``digest`` (atomically), then keep the ``keep`` most
    recently used records. Returns the record's path; raises ``OSError`` when it cannot be written."""
    path = record_path(root, digest)
    root.mkdir(parents=True, exist_ok=True)
    write_json(
        path,
        {
            "digest": digest,
            "python": python,
            "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "installed": dict(sorted(installed.items())),
        },
        indent=1,
    )
    records = sorted(root.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in records[keep:]:
        old.unlink(missing_ok=True)
    return path


def constraints_text(installed: dict[str, str], source: Path) -> str:
    """The constraints file for an offline replay of ``installed`` (recorded at ``source``)."""
    head = f"# the resolution recorded for this plan ({source}); replayed offline by gym-runtime\n"
    return head + "".join(f"{name}=={version}\n" for name, version in sorted(installed.items()))
