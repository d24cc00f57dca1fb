"""HTTP calls from one server to another instance or to an upstream model endpoint.

One ``httpx.AsyncClient`` per server (``trust_env`` left on, so ``NO_PROXY`` / proxy variables
set by the sandbox apply). A connection failure or an error status becomes an
:class:`UpstreamError` naming the upstream (``role`` and instance name, e.g. "resources server
'code_lookup'", or a URL), which the app turns into HTTP 502. An error status's message carries
the upstream's own words (:func:`words_of`: its ``error.message``, vLLM's top-level ``message``, or
its text) up to :data:`MAX_WORDS` characters, so what vLLM said reaches the row error whole. A call
with no answer within its read deadline (``timeout``, per :class:`Peers` or per call) says "did not
answer within Ns". Calls are sent again as :mod:`_kit.retry` says (by default: only a call that
never arrived, for up to 30 s); a call that kept failing until its retry deadline is an
:class:`UpstreamError` of kind ``unavailable`` (``model_unavailable`` for a model endpoint) saying
how long it waited. An upstream's own 502 whose ``error.type`` is one of :data:`PROPAGATED` keeps
that type, so an agent reports the model server's ``model_unavailable``, ``tool_parser_missing``,
``bad_token_ids``, ``reasoning_field_rejected`` or a ``bad_reward`` as such. The status a server
answers an :class:`UpstreamError` with is its :attr:`~UpstreamError.answer_status`: the upstream's
own 400, 413 or 422 (:data:`ROW_STATUSES`: what was sent, the row's fields or its prompt, was
refused, so a trainer counts it as the row's data and does not retry it as infrastructure), else
502 (docs/rollouts.md, "Failure classes"). Cookies are kept per
upstream in :class:`CookieJar` and sent back on the next call, as Gym's agents do with session
cookies. The shared ``httpx.AsyncClient`` itself keeps none (:class:`_KeepNone`): a cookie that one
rollout's upstream set must never ride along on another rollout's call (httpx's own jar would add
it to every later request that carries no ``Cookie`` header of its own).
"""

from __future__ import annotations

import asyncio
import json
import time
from http.cookiejar import CookieJar as _StdCookieJar
from http.cookiejar import DefaultCookiePolicy
from typing import Any

import httpx

from _kit.retry import LOST, PEER_CONNECT, RetryRule

PROPAGATED = ("model_unavailable", "bad_reward", "tool_parser_missing", "bad_token_ids", "reasoning_field_rejected")
MAX_WORDS = 4000
# An upstream's error statuses that say the request itself (built from the row) was refused: its
# fields (400, 422) or its size (413). Any other failure of an upstream is answered 502.
ROW_STATUSES = frozenset({400, 413, 422})


class UpstreamError(Exception):
    """A call to ``upstream`` (an instance name or an endpoint) at ``url`` failed. ``kind`` is the
    ``error.type`` of the 502 answer: ``upstream_error``, ``bad_reward`` when a resources server
    answered ``/verify`` with an unusable reward (``_kit/rewards.py``), or one of :data:`PROPAGATED`.
    ``role`` names what the upstream is ("resources server", "model server") in the message;
    ``extra`` holds fields added to the error body (an agent's counters so far)."""

    def __init__(
        self,
        upstream: str,
        url: str,
        message: str,
        status: int | None = None,
        body: Any = None,
        kind: str = "upstream_error",
        role: str | None = None,
    ):
        who = f"{role} {upstream!r}" if role else f"upstream {upstream}"
        super().__init__(f"{who} ({url}) {message}")
        self.upstream, self.url, self.status, self.body, self.kind = upstream, url, status, body, kind
        self.extra: dict[str, Any] = {}

    @property
    def answer_status(self) -> int:
        """The HTTP status to answer this failure with: the upstream's own status when it is one of
        :data:`ROW_STATUSES` and the failure has no kind of its own (the row's data, which a trainer
        retries at most twice), else 502 (infrastructure: a server down, restarting, silent past
        its deadline, an endpoint unavailable or misconfigured, an answer that breaks the contract)."""
        if self.kind == "upstream_error" and self.status in ROW_STATUSES:
            return self.status
        return 502

    def details(self) -> dict[str, Any]:
        """Fields added to the error body."""
        return {
            "upstream": self.upstream,
            "url": self.url,
            "upstream_status": self.status,
            "upstream_body": self.body,
            **self.extra,
        }


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


def words_of(body: Any) -> str:
    """What an error answer says, for a message: ``error.message`` (OpenAI, vLLM, the built-in
    servers), a top-level ``message`` (vLLM before v0.7), a string ``error`` or ``detail``, else the
    body as text; cut at :data:`MAX_WORDS` characters (it is upstream output)."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and error.get("message") is not None:
        text = str(error["message"])
    elif isinstance(body, dict) and isinstance(body.get("message"), str):
        text = body["message"]
    elif isinstance(body, dict) and isinstance(error or body.get("detail"), str):
        text = str(error or body.get("detail"))
    else:
        text = body if isinstance(body, str) else json.dumps(body)
    return text if len(text) <= MAX_WORDS else text[:MAX_WORDS] + "..."


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

    def __init__(
        self,
        timeout: float | None = None,
        headers: dict[str, str] | None = None,
        retry: RetryRule = PEER_CONNECT,
        gave_up: str = "unavailable",
    ) -> None:
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=30.0), headers=headers, cookies=_StdCookieJar(policy=_KeepNone())
        )
        self.timeout, self.retry, self.gave_up = timeout, retry, gave_up

    async def post(
        self,
        upstream: str,
        url: str,
        json: Any,
        jar: CookieJar | None = None,
        headers: dict[str, str] | None = None,
        check: bool = True,
        *,
        role: str | None = None,
        timeout: float | None = None,
        deadline_name: str | None = None,
        content: bytes | None = None,
    ) -> httpx.Response:
        """POST ``json`` (or the raw bytes ``content``, sent as they are) to ``url``, retried by
        :attr:`retry`; raises :class:`UpstreamError` if unreachable, silent past the read deadline
        (``timeout`` seconds, else the :class:`Peers` default; ``deadline_name`` is the config key
        that sets it, named in the message) or (``check``) non-2xx."""
        sent = {**(jar.header() if jar else {}), **(headers or {})}
        rule, t0, attempt = self.retry, time.monotonic(), 0
        read_s = timeout if timeout is not None else self.timeout
        limit = httpx.Timeout(read_s, connect=30.0) if timeout is not None else httpx.USE_CLIENT_DEFAULT
        while True:
            failure: str | None = None
            try:
                response = await (
                    self.client.post(url, content=content, headers=sent, timeout=limit)
                    if content is not None
                    else self.client.post(url, json=json, headers=sent, timeout=limit)
                )
            except httpx.ReadTimeout as exc:
                said = f" ({deadline_name})" if deadline_name else ""
                raise UpstreamError(upstream, url, f"did not answer within {read_s:g}s{said}", role=role) from exc
            except httpx.HTTPError as exc:
                if not rule.retriable_error(exc):
                    what = "closed the connection before it answered" if isinstance(exc, LOST) else "is unreachable"
                    raise UpstreamError(upstream, url, f"{what}: {type(exc).__name__}: {exc}", role=role) from exc
                failure = f"{type(exc).__name__}: {exc}"
            else:
                if not rule.retriable_status(response.status_code):
                    break
                failure = f"HTTP {response.status_code}: {response.text[:200]}"
            waited = time.monotonic() - t0
            delay = rule.delay(attempt)
            attempt += 1
            if waited + delay > rule.deadline_s:
                raise UpstreamError(
                    upstream,
                    url,
                    f"stayed unavailable for {waited:.1f}s ({attempt} attempt"
                    f"{'s' if attempt != 1 else ''}, last: {failure}); gave up at its retry "
                    f"deadline of {rule.deadline_s:g}s",
                    kind=self.gave_up,
                    role=role,
                )
            await asyncio.sleep(delay)
        if jar is not None:
            jar.update(response)
        if check and response.status_code >= 400:
            body = body_of(response)
            raise UpstreamError(
                upstream,
                url,
                f"answered HTTP {response.status_code}: {words_of(body)}",
                status=response.status_code,
                body=body,
                kind=_kind_of(body),
                role=role,
            )
        return response

    async def json(
        self,
        upstream: str,
        url: str,
        json: Any,
        jar: CookieJar | None = None,
        headers: dict[str, str] | None = None,
        **how: Any,
    ) -> Any:
        """POST (``how``: :meth:`post`'s keywords) and return the JSON body; a non-JSON success
        body is an :class:`UpstreamError`."""
        response = await self.post(upstream, url, json, jar, headers, **how)
        try:
            return response.json()
        except ValueError as exc:
            raise UpstreamError(
                upstream,
                url,
                "answered a body that is not JSON",
                response.status_code,
                response.text[:500],
                role=how.get("role"),
            ) from exc
