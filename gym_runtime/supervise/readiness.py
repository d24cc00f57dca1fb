"""Readiness probes (docs/architecture.md §7, NeMo Gym 0.4.0 `nemo_gym/cli/env.py`, readiness polling).

A server is ready when ``GET http://host:port/`` gets *any* HTTP answer (never from a log line,
case C24). A model endpoint answers when ``GET <base_url>/models`` gets any status, whatever the
base URL's path; a refused connection is retried, a name that does not resolve is reported at
once. What the answer must then be (an OpenAI root listing the policy model, case C35) is
:mod:`gym_runtime.policy.endpoint`.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

import httpx

from gym_runtime.config.url_secrets import mask_url
from gym_runtime.policy.endpoint import PROBE_TIMEOUT_S
from sandbox.opensandbox import NO_SERVER

REPORT_EVERY_S = 15.0
ENDPOINT_PHASE = "waiting for the policy model endpoint(s)"


@functools.cache
def _tls() -> ssl.SSLContext:
    return httpx.create_ssl_context(trust_env=False)


def probe_client() -> httpx.AsyncClient:
    """A client for the start-up's probes (servers, model endpoints, the policy probe): no proxy
    variables (``trust_env`` off), TLS verified against the CA bundle with the one context of this
    process. httpx makes a context per client, loading the bundle each time (~10 ms of CPU, three
    times on the start's path before)."""
    return httpx.AsyncClient(trust_env=False, verify=_tls())


async def answers(client: httpx.AsyncClient, url: str) -> bool:
    """True when ``url`` gives any HTTP response within the probe timeout."""
    return await probe(client, url) is None


async def probe(client: httpx.AsyncClient, url: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """One ``GET url``: None when it gets any HTTP response within ``timeout_s`` (default the probe
    timeout) from the server itself, else a short reason for the user (``"connection refused"``, ``"name does not
    resolve"``, ``"no answer within 2s"``, or the error's own text). The connection is closed after
    the answer (``Connection: close``): a server that serves one connection at a time (a stdlib
    ``HTTPServer``) would otherwise be held by the probe's idle keep-alive connection."""
    try:
        r = await client.get(url, timeout=timeout_s, headers={"connection": "close"})
        # an answer a relay in front of a sandboxed server gave in its stead (sandbox/opensandbox/relay.py)
        return f"no answer from the server ({r.headers[NO_SERVER]})" if NO_SERVER in r.headers else None
    except httpx.TimeoutException:
        return f"no answer within {timeout_s:g}s"
    except httpx.HTTPError as e:
        return _reason(e)


def _reason(exc: BaseException) -> str:
    """The innermost OS-level cause of ``exc`` in words, else its text (or its class name)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, socket.gaierror):
            return "name does not resolve"
        if isinstance(seen, ConnectionRefusedError) or getattr(seen, "errno", None) == errno.ECONNREFUSED:
            return "connection refused"
        if isinstance(seen, OSError) and seen.strerror:
            return seen.strerror[0].lower() + seen.strerror[1:]
        seen = seen.__cause__ or seen.__context__
    text = str(exc)
    if "connection refused" in text.lower():
        return "connection refused"
    return text or type(exc).__name__


async def report_endpoint_wait(
    client: httpx.AsyncClient,
    waiting: Callable[[], list[str]],
    say: Callable[[str], None],
    last: dict[str, str],
    every_s: float = REPORT_EVERY_S,
) -> None:
    """Report a wait for model endpoints (run as a task; cancel it when the start-up ends).

    While ``waiting()`` (the base URLs the start-up waits for now, empty while it waits for
    something else) is not empty, probes each URL (:func:`model_probe_url`) about every second,
    keeps its last failed probe's reason in ``last`` (URL -> reason), and calls ``say`` with one
    line naming the URLs and their reasons at the start of the wait and then every ``every_s`` s. An endpoint that answers
    is not reported (the supervisor's own probe marks it ready)."""
    said_at: float | None = None
    while True:
        urls = waiting()
        failed = {}
        for url in urls:
            reason = await probe(client, model_probe_url(url))
            if reason is not None:
                failed[url] = last[url] = reason
        if failed and (said_at is None or time.monotonic() - said_at >= every_s):
            said_at = time.monotonic()
            say(
                f"{ENDPOINT_PHASE}: " + "; ".join(f"GET {mask_url(model_probe_url(u))}: {r}" for u, r in failed.items())
            )
        await asyncio.sleep(1.0 if urls else 0.1)


async def wait_http(client: httpx.AsyncClient, url: str, deadline: float) -> bool:
    """Poll ``url`` (every 50 ms, slowing to 500 ms) until it answers or ``deadline`` (monotonic)."""
    delay = 0.05
    while True:
        if await answers(client, url):
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(min(delay, max(deadline - time.monotonic(), 0)))
        delay = min(delay * 1.5, 0.5)


async def wait_tcp(host: str, port: int, deadline: float) -> bool:
    """Poll until a TCP connection to host:port succeeds or ``deadline`` (monotonic) passes."""
    while True:
        try:
            _, w = await asyncio.wait_for(asyncio.open_connection(host, port), PROBE_TIMEOUT_S)
            w.close()
            return True
        except (TimeoutError, OSError):
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.1)


async def wait_log(log: Any, text: str, deadline: float) -> bool:
    """Poll a :class:`~gym_runtime.supervise.logs.LogSink` until a line containing ``text`` was
    written since the member's last start note, or ``deadline`` (monotonic). Only for processes
    that announce readiness this way and serve no HTTP (the Ray head)."""
    while True:
        log.drain_now()
        if any(text in line for line in log.since_start(200)):
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.1)


def model_base_urls(data: dict[str, Any]) -> list[str]:
    """Every ``*base_url`` (string or list) under ``responses_api_models`` instances, deduplicated
    without the trailing ``/`` (Gym's ``wait_for_model_endpoints``)."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if str(k).endswith("base_url"):
                    for u in v if isinstance(v, list) else [v]:
                        if isinstance(u, str) and u.rstrip("/") not in found:
                            found.append(u.rstrip("/"))
                else:
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    for value in data.values():
        if isinstance(value, dict) and "responses_api_models" in value:
            walk(value["responses_api_models"])
    return found


def policy_models(data: dict[str, Any]) -> dict[str, tuple[str, str | None]]:
    """Policy endpoint base URL (no trailing ``/``) -> ``(policy_model_name, policy_api_key)``
    from the merged config's top-level policy values; empty when there is no model name."""
    urls, name, key = data.get("policy_base_url"), data.get("policy_model_name"), data.get("policy_api_key")
    if not isinstance(name, str) or not name:
        return {}
    return {
        u.rstrip("/"): (name, key if isinstance(key, str) else None)
        for u in (urls if isinstance(urls, list) else [urls])
        if isinstance(u, str)
    }


def model_probe_url(base_url: str) -> str:
    """``<base>/models``, whatever the base URL's path (Gym probes it only under ``/v1``)."""
    return base_url.rstrip("/") + "/models"
