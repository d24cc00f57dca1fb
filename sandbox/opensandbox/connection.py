"""How gym-runtime reaches the operator's OpenSandbox server (docs/runtime.md, "Sandbox backends").

Built by ``gym_runtime.settings`` from ``OPENSANDBOX_DOMAIN``, ``OPENSANDBOX_API_KEY``,
``OPENSANDBOX_PROTOCOL`` and ``GYM_RUNTIME_OPENSANDBOX_{IMAGE,CPU,DAEMON_HOST,EGRESS,OUTAGE_S,CREATES_IN_FLIGHT,CREATES_PER_S,TASK_IMAGES,VOLUME}``;
nothing here reads the environment. The API key is left out of ``repr`` and :meth:`describe`,
so no log line, error or ``doctor`` output carries it; it reaches the server only as the
``OPEN-SANDBOX-API-KEY`` header the ``opensandbox`` SDK sends.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class OpenSandboxConnection:
    """``domain``: ``host:port`` of the lifecycle server; ``protocol``: ``http`` | ``https``;
    ``image``: the image server sandboxes run (None: not configured, refused at start);
    ``cpu``: CPUs per server sandbox (a string as the server's ``resourceLimits`` takes it);
    ``daemon_host``: the IP address sandboxes reach this daemon at (its head server and the relays
    in front of every server listen there); ``egress``: ``enforced`` (every sandbox gets the
    allowlist as its ``networkPolicy``) or ``unenforced`` (none is sent: for a server without an
    egress sidecar, said loudly at start); ``task_images``: the images task sandboxes may run
    (:class:`gym_runtime.task_sandboxes.approval.ApprovedImages`; None: nothing approved);
    ``outage_s``: how long a server that needs a new sandbox waits for the lifecycle server to
    answer again before it fails (seconds; the sandboxes' TTL, ``spec.TTL_S``, by default: past it
    the sandboxes that outlived the outage expire too); ``creates_in_flight`` / ``creates_per_s``:
    the bound on sandbox creates (at most that many at once, started at most that many per second:
    :class:`~.creates.CreateGate`); ``create_timeout_s``: how long one create request may take
    before it counts as timed out (then its sandbox is looked for by its labels: :mod:`.creates`);
    ``volume``: the claim name of the volume mounted at ``state_root`` (the daemon's
    ``GYM_RUNTIME_HOME``), None for host paths (:mod:`.delivery`)."""

    domain: str
    api_key: str | None = field(default=None, repr=False)
    protocol: str = "http"
    image: str | None = None
    cpu: str = "1"
    daemon_host: str | None = None
    egress: str = "enforced"
    task_images: Any = None
    outage_s: float = 600.0
    creates_in_flight: int = 8
    creates_per_s: float = 4.0
    create_timeout_s: float = 60.0
    volume: str | None = None
    state_root: Path | None = None

    @property
    def url(self) -> str:
        """The server's base URL (``http://host:port``), for messages."""
        return f"{self.protocol}://{self.domain}"

    def describe(self) -> dict[str, Any]:
        """JSON-ready facts for ``doctor`` and the ready line: no key, only whether one is set."""
        return {
            "server": self.url,
            "api_key": "set" if self.api_key else "not set",
            "image": self.image,
            "cpu": self.cpu,
            "daemon_host": self.daemon_host,
            "egress": self.egress,
            "outage_s": self.outage_s,
            "creates_in_flight": self.creates_in_flight,
            "creates_per_s": self.creates_per_s,
            "task_images": self.task_images.describe() if self.task_images is not None else "nothing (unset)",
            "delivery": "shared volume" if self.volume else "host paths",
            "volume": {"claim": self.volume, "mounted_at": str(self.state_root)} if self.volume else None,
        }

    def sdk_config(self, request_timeout_s: float = 30.0) -> Any:
        """The SDK's ``ConnectionConfig`` (opensandbox 1.1.1, ``opensandbox/config/connection.py``)."""
        from opensandbox.config import ConnectionConfig

        return ConnectionConfig(
            domain=self.domain,
            api_key=self.api_key,
            protocol=self.protocol,
            request_timeout=timedelta(seconds=request_timeout_s),
        )
