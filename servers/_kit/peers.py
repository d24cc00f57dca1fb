"""HTTP calls from one server to another instance or to an upstream model endpoint.

One ``httpx.AsyncClient`` per server (``trust_env`` left on, so ``NO_PROXY`` / proxy variables
set by the sandbox apply). A connection failure or an error status becomes an
:class:`UpstreamError` naming the upstream (instance name or URL), which the app turns into HTTP
502. Cookies are kept per upstream in :class:`CookieJar` and sent back on the next call, as Gym's
agents do with session cookies.
"""

from __future__ import annotations

from typing import Any

import httpx


class UpstreamError(Exception):
    """A call to ``upstream`` (an instance name or an endpoint) at ``url`` failed. ``kind`` is the
    ``error.type`` of the 502 answer: ``upstream_error``, or ``bad_reward`` when a resources server
    answered ``/verify`` with an unusable reward (``_kit/rewards.py``)."""

    def __init__(self, upstream: str, url: str, message: str, status: int | None = None, body: Any = None,
                 kind: str = "upstream_error"):
        super().__init__(f"upstream {upstream} ({url}) {message}")
        self.upstream, self.url, self.status, self.body, self.kind = upstream, url, status, body, kind

    def details(self) -> dict[str, Any]:
        """Fields added to the 502 error body."""
        return {"upstream": self.upstream, "url": self.url, "upstream_status": self.status, "upstream_body": self.body}


class CookieJar:
    """Cookies one caller holds for one upstream (name -> value)."""

    def __init__(self, initial: dict[str, str] | None = None) -> None:
        self.values: dict[str, str] = dict(initial or {})

    def update(self, response: httpx.Response) -> None:
        """Keep every cookie the upstream set."""
        for name, value in response.cookies.items():
            self.values[name] = value

    def header(self) -> dict[str, str]:
        """The ``Cookie`` header to send (empty when there is none)."""
        if not self.values:
            return {}
        return {"cookie": "; ".join(f"{k}={v}" for k, v in self.values.items())}


def body_of(response: httpx.Response) -> Any:
    """The response body as JSON when it parses, else as text."""
    try:
        return response.json()
    except ValueError:
        return response.text


class Peers:
    """Async HTTP to upstreams; ``timeout`` in seconds for the whole call (None: no limit)."""

    def __init__(self, timeout: float | None = None, headers: dict[str, str] | None = None) -> None:
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=30.0), headers=headers)

    async def post(self, upstream: str, url: str, json: Any, jar: CookieJar | None = None,
                   headers: dict[str, str] | None = None, check: bool = True) -> httpx.Response:
        """POST ``json`` to ``url``; raises :class:`UpstreamError` if unreachable or (``check``) non-2xx."""
        sent = {**(jar.header() if jar else {}), **(headers or {})}
        try:
            response = await self.client.post(url, json=json, headers=sent)
        except httpx.HTTPError as exc:
            raise UpstreamError(upstream, url, f"is unreachable: {type(exc).__name__}: {exc}") from exc
        if jar is not None:
            jar.update(response)
        if check and response.status_code >= 400:
            raise UpstreamError(upstream, url, f"answered HTTP {response.status_code}",
                                status=response.status_code, body=body_of(response))
        return response

    async def json(self, upstream: str, url: str, json: Any, jar: CookieJar | None = None,
                   headers: dict[str, str] | None = None) -> Any:
        """POST and return the JSON body; a non-JSON success body is an :class:`UpstreamError`."""
        response = await self.post(upstream, url, json, jar, headers)
        try:
            return response.json()
        except ValueError as exc:
            raise UpstreamError(upstream, url, "answered a body that is not JSON", response.status_code,
                                response.text[:500]) from exc
