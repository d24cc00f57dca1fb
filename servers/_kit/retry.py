"""When a call from one built-in server to another, or to the policy endpoint, is sent again.

The rule (docs/reliability.md, "Retries and deadlines"): a call is retried only when the request
cannot have been processed, or when processing it twice does no harm, and only until a deadline;
past the deadline the caller gets one error naming the upstream, how long it waited and why.

* **Never delivered** (the connection was refused or could not be opened: the upstream is not
  listening, e.g. a server the daemon is restarting): always safe to send again.
* **Lost after sending** (the connection broke before an answer, e.g. vLLM killed while it
  generated) and **gateway statuses** (429, 502, 503, 504: a proxy or a vLLM still loading answers
  for an engine that is not serving): retried only for calls that do nothing but compute an answer
  (a chat completion). A tool call, ``/seed_session`` or ``/verify`` may have changed the resources
  server's state, so they are never sent twice: the row fails instead, naming the server.

Backoff: ``first_s`` doubled after each attempt up to ``max_s``, each delay scaled by a random
factor in [0.5, 1] so that a few hundred rollouts waiting for one endpoint do not retry in step.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import httpx

GATEWAY_STATUSES = frozenset({429, 502, 503, 504})
# httpx errors raised before any byte of the request reached a listening server
NOT_DELIVERED = (httpx.ConnectError, httpx.ConnectTimeout)
# httpx errors raised once the request may have been received (the connection broke afterwards)
LOST = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)


@dataclass(frozen=True)
class RetryRule:
    """How one kind of call is retried. ``deadline_s``: seconds from the first attempt after which
    no new attempt starts (0: never retry); ``idempotent``: also retry :data:`LOST` connections
    and :data:`GATEWAY_STATUSES`; ``first_s`` / ``max_s``: backoff bounds in seconds."""

    deadline_s: float
    idempotent: bool = False
    first_s: float = 0.25
    max_s: float = 5.0
    statuses: frozenset[int] = field(default=GATEWAY_STATUSES)

    def retriable_error(self, exc: httpx.HTTPError) -> bool:
        """True when a failed attempt with this exception may be sent again."""
        return isinstance(exc, NOT_DELIVERED) or (self.idempotent and isinstance(exc, LOST))

    def retriable_status(self, status: int) -> bool:
        """True when an answer with this HTTP status may be asked for again."""
        return self.idempotent and status in self.statuses

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (0-based)."""
        return min(self.max_s, self.first_s * (2**attempt)) * random.uniform(0.5, 1.0)


# A call that only reaches a peer of the environment: sent again only when it never arrived,
# e.g. while the daemon restarts that peer (its restart backoff is at most 8 s, docs/runtime.md).
PEER_CONNECT = RetryRule(deadline_s=30.0)
