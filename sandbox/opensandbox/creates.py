"""Many sandbox creates at once (docs/runtime.md, "Sandbox backends": "Many sandboxes at once").

A training blend is tens of servers, so tens of creates when a run starts. Three rules keep the
operator's OpenSandbox server and this daemon out of each other's way:

- :class:`CreateGate`: at most ``in_flight`` creates at once and at most ``per_second`` started per
  second (``GYM_RUNTIME_OPENSANDBOX_CREATES_IN_FLIGHT`` / ``..._CREATES_PER_S``);
- :func:`outcome`: a create the server failed with its own 5xx (500, 502, 503, 504) or that timed
  out on the client after it was sent (a gateway's 504 is a 5xx too) is tried again after :func:`backoff_s` (:data:`TRIES`
  tries in all); any other failure (4xx, nothing listening) is the error of the start;
- :func:`adoptable`: before trying again a create whose answer did not come back, the run's sandboxes carrying the server's labels
  (:meth:`.spec.RunLabels.metadata`) are listed, every :data:`ADOPT_EVERY_S` for up to
  :data:`ADOPT_WAIT_S`: a create that timed out (a gateway's 504, the client's own timeout) may
  have made its sandbox all the same, or be making it still, and that one is used instead of
  making a second one (as allenai/open-instruct's sandbox pool does on GKE).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

TRIES = 4  # tries of one server's create in all (the first and three more)
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 8.0
ADOPT_WAIT_S = 20.0  # how long the sandbox of a create that timed out is looked for (the server may still be making it)
ADOPT_EVERY_S = 2.0
ENDED = ("Failed", "Terminated", "Stopping", "Stopped")  # sandbox states (opensandbox-server 1.1.1) never running again


class CreateGate:
    """At most ``in_flight`` holders of :meth:`slot` at once, and their starts at least
    ``1 / per_second`` seconds apart (a steady rate, no burst). ``max_seen``: the most holders
    seen at once (for tests and benches). ``clock``/``sleep``: monotonic seconds and its sleep."""

    def __init__(
        self,
        in_flight: int,
        per_second: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        if in_flight < 1 or not per_second > 0:
            raise ValueError(f"in_flight={in_flight} and per_second={per_second} must be >= 1 and > 0")
        self.in_flight, self.per_second = in_flight, per_second
        self._slots = asyncio.Semaphore(in_flight)
        self._pace = asyncio.Lock()
        self._next = 0.0
        self._clock, self._sleep = clock, sleep
        self.holders = 0
        self.max_seen = 0

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one of the ``in_flight`` places for one create, taken no sooner than the rate allows."""
        async with self._slots:
            async with self._pace:
                wait = self._next - self._clock()
                if wait > 0:
                    await self._sleep(wait)
                self._next = max(self._next, self._clock()) + 1.0 / self.per_second
            self.holders += 1
            self.max_seen = max(self.max_seen, self.holders)
            try:
                yield
            finally:
                self.holders -= 1


def outcome(exc: BaseException, code: str) -> str:
    """What to do after a create raised ``exc`` (an exception of the ``opensandbox`` SDK) that
    :func:`.failures.translate` made error ``code``: ``"adopt"`` when its answer did not come back
    (a client timeout after the request was sent, ``SandboxTimeoutException``, or a gateway's 504:
    the sandbox may exist, look for it before trying again); ``"retry"`` for the server's own
    failure (``GR-OSB-SERVER``: another 5xx such as 500, 502, 503, or a sandbox that did not become
    ready and was deleted by the SDK); ``"fail"`` for anything else (a refusal, a 4xx, a 5xx naming
    a setting such as a missing image, a server nobody answers for)."""
    from opensandbox.exceptions import SandboxApiException, SandboxTimeoutException

    if isinstance(exc, SandboxTimeoutException):
        return "adopt"
    if code != "GR-OSB-SERVER":
        return "fail"
    status = exc.status_code or 0 if isinstance(exc, SandboxApiException) else None
    if status == 504:
        return "adopt"
    return "fail" if status is not None and status < 500 else "retry"


def backoff_s(attempt: int, rand: Callable[[], float] = random.random) -> float:
    """Seconds to wait before try ``attempt + 1`` (``attempt`` counts from 0): 1, 2, 4, 8 s at
    most, each with up to a quarter more at random so creates failed together spread out."""
    base = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2**attempt)
    return base * (1.0 + 0.25 * rand())


def adoptable(infos: Iterable[Any], known: Iterable[str]) -> tuple[str | None, list[str]]:
    """Which sandbox among ``infos`` (the SDK's ``SandboxInfo`` listed by one server's labels) to
    use instead of creating one, and which are strays to delete: of those not among ``known`` (the
    run's sandboxes in use) and not in a state they never leave (:data:`ENDED`), the first
    ``Running`` one (else the first) is used and the others (creates of that server timed out more
    than once, each made one) are strays. ``(None, [])`` when there is none."""
    taken = set(known)
    found = [i for i in infos if i.id not in taken and str(getattr(i.status, "state", "")) not in ENDED]
    found.sort(key=lambda i: str(getattr(i.status, "state", "")) != "Running")
    return (found[0].id, [i.id for i in found[1:]]) if found else (None, [])
