"""HTTP calls from one server to another instance or to an upstream model endpoint.

One ``httpx.AsyncClient`` per server (``trust_env`` left on, so ``NO_PROXY`` / proxy variables
set by the sandbox apply). A connection failure or an error status becomes an
:class:`UpstreamError` naming the upstream (instance name or URL), which the app turns into HTTP
502. Calls are sent again as :mod:`_kit.retry` says (by default: only a call that never arrived,
for up to 30 s); a call that kept failing until its retry deadline is an :class:`UpstreamError` of
kind ``unavailable`` (``model_unavailable`` for a model endpoint) saying how long it waited. An
upstream's own 502 whose ``error.type`` is one of :data:`PROPAGATED` keeps that type, so an agent
reports the model server's ``model_unavailable`` or a ``bad_reward`` as such. Cookies are kept per
upstream in :class:`CookieJar` and sent back on the next call, as Gym's agents do with session
cookies. The shared ``httpx.AsyncClient`` itself keeps none (:class:`_KeepNone`): a cookie that one
rollout's upstream set must never ride along on another rollout's call (httpx's own jar would add
it to every later request that carries no ``Cookie`` header of its own).
"""

from __future__ import annotations

import asyncio
import time
from http.cookiejar import CookieJar as _StdCookieJar
from http.cookiejar import DefaultCookiePolicy
from typing import Any

import httpx

from _kit.retry import PEER_CONNECT, RetryRule

PROPAGATED = ("model_unavailable", "bad_reward")


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


def _kind_of(body: Any) -> str:
    error = body.get("error") if isinstance(body, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    return kind if kind in PROPAGATED else "upstream_error"


class _KeepNone(DefaultCookiePolicy):
    """A cookie policy that stores nothing: cookies are carried per caller (:class:`CookieJar`)."""

    def set_ok(self, cookie: Any, request: Any) -> bool:
        return False


class Peers:
    """Async HTTP to upstreams; ``timeout`` in seconds for each attempt (None: no limit);
    ``retry``: the default :class:`~_kit.retry.RetryRule`; ``gave_up``: the error kind of a call
    that kept failing until its retry deadline."""

    def __init__(self, timeout: float | None = None, headers: dict[str, str] | None = None,
                 retry: RetryRule = PEER_CONNECT, gave_up: str = "unavailable") -> None:
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=30.0), headers=headers,
                                        cookies=_StdCookieJar(policy=_KeepNone()))
        self.retry, self.gave_up = retry, gave_up

    async def post(self, upstream: str, url: str, json: Any, jar: CookieJar | None = None,
                   headers: dict[str, str] | None = None, check: bool = True,
                   content: bytes | None = None) -> httpx.Response:
        """POST ``json`` (or the raw bytes ``content``, sent as they are) to ``url``, retried by
        :attr:`retry`; raises :class:`UpstreamError` if unreachable or (``check``) non-2xx."""
        sent = {**(jar.header() if jar else {}), **(headers or {})}
        rule, t0, attempt = self.retry, time.monotonic(), 0
        while True:
            failure: str | None = None
            try:
                response = await (self.client.post(url, content=content, headers=sent) if content is not None
                                  else self.client.post(url, json=json, headers=sent))
            except httpx.HTTPError as exc:
                if not rule.retriable_error(exc):
                    raise UpstreamError(upstream, url, f"is unreachable: {type(exc).__name__}: {exc}") from exc
                failure = f"{type(exc).__name__}: {exc}"
            else:
                if not rule.retriable_status(response.status_code):
                    break
                failure = f"HTTP {response.status_code}: {response.text[:200]}"
            waited = time.monotonic() - t0
            delay = rule.delay(attempt)
            attempt += 1
            if waited + delay > rule.deadline_s:
                raise UpstreamError(upstream, url, f"stayed unavailable for {waited:.1f}s ({attempt} attempt"
                                    f"{'s' if attempt != 1 else ''}, last: {failure}); gave up at its retry "
                                    f"deadline of {rule.deadline_s:g}s", kind=self.gave_up)
            await asyncio.sleep(delay)
        if jar is not None:
            jar.update(response)
        if check and response.status_code >= 400:
            body, kind = body_of(response), _kind_of(body_of(response))
            said = f": {str(body['error'].get('message'))[:1000]}" if kind != "upstream_error" else ""
            raise UpstreamError(upstream, url, f"answered HTTP {response.status_code}{said}",
                                status=response.status_code, body=body, kind=kind)
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
