"""What the last venv build on this state directory did, per server: ``$GYM_RUNTIME_HOME/last_build.json``.

Written by every build (``gym-runtime build``, and ``up`` / ``dry-run`` / the Python API before
they start servers), success or failure: the process id, the command, when it started, and per
server instance ``status`` (``built``, ``rebuilt``, ``reused``, ``failed``, ``cancelled``, ``not
built``) with, for a failure, the stage, the error code and message and the failing step's log.
``gym-runtime logs INSTANCE`` reads it to show the failing build log of *that* server and *that*
run (the daemon record's pid says which run a build belonged to), never a log attributed by time.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from gym_runtime.errors import BuildCancelledError, BuildError
from gym_runtime.files import write_json

LAST_BUILD = "last_build.json"
_COMMANDS = ("build", "up", "dry-run")


def _failures(err: BuildError) -> list[dict[str, Any]]:
    if err.code == "GR-BUILD-MANY":
        return list(err.extra.get("failures", []))
    return [{**err.to_dict(), **err.extra}]


def record_build(
    home: Path, instances: list[str], started_at: float, *, venvs: Any = None, error: BuildError | None = None
) -> None:
    """Write ``last_build.json`` for a build of ``instances`` that ended with ``venvs`` (a
    :class:`~gym_runtime.venvs.VenvSet`) or ``error``. Errors writing it are ignored (the build's
    own outcome is what matters)."""
    servers: dict[str, dict[str, Any]] = {}
    if venvs is not None:
        for name in instances:
            v = venvs.for_instance(name)
            servers[name] = {"status": v.status.split(" (")[0], "venv": str(v.path)}
    elif error is not None:
        for f in _failures(error):
            for name in f.get("servers") or [f.get("server")]:
                if name:
                    servers[name] = {
                        "status": "failed",
                        "stage": f.get("stage"),
                        "code": f.get("code"),
                        "message": f.get("message"),
                        "log": f.get("log"),
                    }
        rest = "cancelled" if isinstance(error, BuildCancelledError) else "not built"
        servers.update({n: {"status": rest} for n in instances if n not in servers})
    command = next((a for a in sys.argv[1:] if a in _COMMANDS), "python")
    data = {
        "pid": os.getpid(),
        "command": command,
        "started_at": started_at,
        "finished_at": time.time(),
        "servers": servers,
        **({"error": {"code": error.code, "message": error.message}} if error else {}),
    }
    try:
        home.mkdir(parents=True, exist_ok=True)
        write_json(home / LAST_BUILD, data, indent=2)
    except OSError:
        pass


def last_build(home: Path) -> dict[str, Any] | None:
    """The last build's record, or None."""
    try:
        data = json.loads((home / LAST_BUILD).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("servers"), dict) else None
