"""Readiness probes (DESIGN.md §7, reference/nemo_gym_runtime.md §3.5).

A server is ready when ``GET http://host:port/`` gets *any* HTTP answer (never from a log line,
case C24). A model endpoint is ready when ``GET <base_url>/models`` (URL ending in ``/v1``) or
``GET <base_url>`` answers with any status; a refused connection is retried, a name that does
not resolve is reported at once.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

PROBE_TIMEOUT_S = 2.0


async def answers(client: httpx.AsyncClient, url: str) -> bool:
    """True when ``url`` gives any HTTP response within the probe timeout."""
    try:
        await client.get(url, timeout=PROBE_TIMEOUT_S)
        return True
    except httpx.HTTPError:
        return False


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
        except (OSError, asyncio.TimeoutError):
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.1)


async def wait_log(log: Any, text: str, deadline: float) -> bool:
    """Poll a :class:`~gym_runtime.supervise.logs.LogSink` until a line containing ``text`` was
    written since the member's last start note, or ``deadline`` (monotonic). Only for processes
    that announce readiness this way and serve no HTTP (the Ray head)."""
    while True:
        log.drain_now()
        lines = log.tail(200)
        starts = [i for i, line in enumerate(lines) if line.startswith("[gym-runtime") and "] start #" in line]
        if any(text in line for line in lines[(starts[-1] if starts else 0):]):
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


def model_probe_url(base_url: str) -> str:
    """``<base>/models`` when the base ends in ``/v1``, else the base itself."""
    base = base_url.rstrip("/")
    return base + "/models" if base.endswith("/v1") else base
