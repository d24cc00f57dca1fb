"""Drive a running daemon with rollouts and watch what it holds (bench/load.py and the reliability tests).

* :func:`example_rows`: the bundled example's dataset rows, repeated to any count;
* :func:`run_batch`: one ``POST /rollouts/run`` (head server), results and per-row latencies;
* :func:`run_direct`: the same rows POSTed to their agents' ``/run`` directly (no head server),
  latencies measured by the client;
* :func:`unanswered`: rows with neither a usable reward nor a row error (lost rows);
* :func:`footprint`: the daemon's RSS, open file descriptors (its namespace holder's pool of
  unbound sockets left out) and TCP connections;
* :func:`restarts`: restarts of every supervised process, from the head server.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example_rows(n: int, name: str = "native-quickstart") -> list[dict]:
    """``n`` rows cycling through ``examples/<name>.jsonl`` (each tagged ``load_i``)."""
    base = [json.loads(line) for line in (EXAMPLES / f"{name}.jsonl").read_text().splitlines() if line.strip()]
    return [{**base[i % len(base)], "load_i": i} for i in range(n)]


@dataclass
class BatchRun:
    """``results[i]`` answers row ``i``; ``latency_s[i]`` its wall seconds; ``wall_s`` the whole batch."""

    results: list[dict]
    latency_s: list[float | None]
    wall_s: float


def run_batch(head: str, rows: list[dict], concurrency: int | None = None, timeout: float = 1800) -> BatchRun:
    """``POST {head}/rollouts/run`` and parse the (heartbeat-prefixed) answer."""
    body: dict = {"examples": rows}
    if concurrency is not None:
        body["concurrency"] = concurrency
    t0 = time.monotonic()
    r = httpx.post(head + "/rollouts/run", json=body, timeout=timeout, trust_env=False)
    wall = time.monotonic() - t0
    r.raise_for_status()
    answer = json.loads(r.text)
    if "results" not in answer:
        raise AssertionError(f"/rollouts/run answered no results: {r.text[:2000]}")
    return BatchRun(answer["results"], answer["latency_s"], wall)


async def _direct(agents: dict[str, str], rows: list[dict], concurrency: int, timeout: float) -> BatchRun:
    sem = asyncio.Semaphore(concurrency)
    results: list[dict] = [{}] * len(rows)
    latency: list[float | None] = [None] * len(rows)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(trust_env=False, timeout=timeout, limits=limits) as client:

        async def one(i: int, row: dict) -> None:
            async with sem:
                t = time.monotonic()
                try:
                    r = await client.post(agents[row["agent_ref"]["name"]] + "/run", json=row)
                    results[i] = (
                        r.json()
                        if r.status_code < 400
                        else {"error": {"code": f"HTTP {r.status_code}", "message": r.text[:500]}}
                    )
                except (httpx.HTTPError, ValueError) as e:
                    results[i] = {"error": {"code": type(e).__name__, "message": str(e)}}
                latency[i] = time.monotonic() - t

        t0 = time.monotonic()
        await asyncio.gather(*(one(i, row) for i, row in enumerate(rows)))
    return BatchRun(results, latency, time.monotonic() - t0)


def run_direct(agents: dict[str, str], rows: list[dict], concurrency: int, timeout: float = 600) -> BatchRun:
    """POST each row to ``agents[row's agent]/run`` (the ready line's server URLs), at most
    ``concurrency`` at once; an error status or a failed call is a row ``{"error": ...}``."""
    return asyncio.run(_direct(agents, rows, concurrency, timeout))


def unanswered(results: list[dict], expected: int) -> list[int]:
    """Indexes of rows with neither a finite ``reward`` nor an ``error`` with a code (and of
    rows missing at the end of ``results``)."""
    lost = list(range(len(results), expected))
    for i, r in enumerate(results):
        reward = r.get("reward") if isinstance(r, dict) else None
        error = r.get("error") if isinstance(r, dict) else None
        has_reward = isinstance(reward, (int, float)) and not isinstance(reward, bool) and math.isfinite(reward)
        if not has_reward and not (isinstance(error, dict) and error.get("code")):
            lost.append(i)
    return lost


_SOCKET_TABLES = ("tcp", "tcp6", "udp", "udp6", "raw", "raw6", "unix", "netlink", "packet")


def _table_inodes(pid: int) -> set[str]:
    """Inodes of every socket in the network namespace of ``pid`` (its ``/proc/<pid>/net`` tables)."""
    inodes: set[str] = set()
    for table in _SOCKET_TABLES:
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        col = {"unix": 6, "netlink": 9, "packet": 8}.get(table, 9)  # the inode column of each table
        inodes.update(f[col] for f in (ln.split() for ln in lines) if len(f) > col)
    return inodes


def unbound_sockets(pid: int) -> int:
    """How many of ``pid``'s socket fds are in no socket table of its own network namespace or of
    any descendant's: sockets neither bound nor connected, i.e. the sandbox's namespace holder pool
    of ready TCP sockets (``NetnsHolder.socket``, 32 per refill), which rises and falls with the
    connections made and is no leak."""
    p = psutil.Process(pid)
    seen: dict[str, int] = {}
    for q in [p, *p.children(recursive=True)]:
        try:
            seen.setdefault(os.readlink(f"/proc/{q.pid}/ns/net"), q.pid)
        except OSError:
            continue
    known = set().union(*(_table_inodes(q) for q in seen.values()))
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] not in known:
            count += 1
    return count


def footprint(pid: int) -> dict[str, float]:
    """The process's own ``rss_mb``, open file descriptors ``fds`` (not counting unbound sockets:
    :func:`unbound_sockets`) and TCP ``connections`` (in its own network namespace)."""
    p = psutil.Process(pid)
    return {
        "rss_mb": round(p.memory_info().rss / 2**20, 1),
        "fds": p.num_fds() - unbound_sockets(pid),
        "connections": len(p.net_connections("tcp")),
    }


def builds_quiet(head: str, quiet_s: float = 2.0, limit_s: float = 120.0, poll_s: float = 0.2) -> float:
    """Wait until the daemon at ``head`` has run no build process (the bytecode compiles a start
    whose servers learned their imports runs after ready, docs/runtime.md) for ``quiet_s``: their
    pipes are the daemon's fds, so a footprint taken while they run is not a baseline. Returns the
    seconds until the last build process ended (``limit_s`` when they never stopped)."""
    t0 = quiet = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        rows = httpx.get(head + "/processes", timeout=10, trust_env=False).json().get("processes", [])
        if any(r.get("role") == "build" for r in rows):
            quiet = time.monotonic()
        elif time.monotonic() - quiet >= quiet_s:
            return quiet - t0
        time.sleep(poll_s)
    return time.monotonic() - t0


def restarts(head: str) -> dict[str, int]:
    """``{name: restarts}`` of every server instance and support process of the daemon at ``head``."""
    out = {}
    for route in ("/server_instances", "/support_processes"):
        for s in httpx.get(head + route, timeout=30, trust_env=False).json():
            out[s.get("process_name") or s.get("name")] = s.get("restarts", 0)
    return out


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` by nearest rank (0.0 when empty)."""
    data = sorted(v for v in values if v is not None)
    if not data:
        return 0.0
    return data[min(len(data) - 1, max(0, math.ceil(q * len(data)) - 1))]


def instance(head: str, name: str) -> dict:
    """The ``/server_instances`` (or ``/support_processes``) entry of ``name``."""
    for route in ("/server_instances", "/support_processes"):
        for s in httpx.get(head + route, timeout=30, trust_env=False).json():
            if name in (s.get("process_name"), s.get("name")):
                return s
    raise KeyError(name)


def wait_state(head: str, name: str, state: str, timeout: float = 60) -> dict:
    """Poll until ``name``'s ``state`` is ``state``; its entry (AssertionError after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        entry = instance(head, name)
        if entry.get("state") == state:
            return entry
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} is {entry.get('state')!r}, not {state!r}, after {timeout}s: {entry}")
        time.sleep(0.1)
