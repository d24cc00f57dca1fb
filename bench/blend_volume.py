"""``bench/blend.py --volume``: its ``opensandbox`` runs in the shared-volume delivery mode
(docs/runtime.md, "Delivery modes") on a named volume of the bench's OpenSandbox server."""

from __future__ import annotations

import contextlib
from pathlib import Path

from tests.helpers.opensandbox.volume import named_volume, put_interpreter


def on_volume(stack: contextlib.ExitStack, server, env: dict[str, str], python: str) -> tuple[Path, str]:
    """Make a named volume on ``server`` (an ``OpenSandboxServer``; the volume is removed when
    ``stack`` closes), put ``python``'s installation on it and point the daemon's environment ``env``
    (changed in place) at it: ``GYM_RUNTIME_HOME`` its mount point on this host,
    ``GYM_RUNTIME_OPENSANDBOX_VOLUME`` its name. Returns the mount point and the interpreter's path
    on the volume (the runs' ``--python``); a run's ``--work-dir`` must be under the mount point."""
    claim, home = stack.enter_context(named_volume(server, "gym-blend"))
    on = put_interpreter(python, home)
    env |= {"GYM_RUNTIME_HOME": str(home), "GYM_RUNTIME_OPENSANDBOX_VOLUME": claim}
    print(f"shared volume {claim} at {home}; interpreter {on}", flush=True)
    return home, on
