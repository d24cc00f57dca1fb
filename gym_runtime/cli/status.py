"""``gym-runtime status [--head URL] [--json]``: ask a running daemon's head server how it is doing.

Prints ``/health``, ``/server_instances`` (Gym's keys plus ours, :mod:`gym_runtime.head.instances`),
``/support_processes`` (stub model, Ray head) and every process of the environment by role and size
(``/processes``: servers, Ray, sandbox helpers, the daemon): tables, or JSON with ``--json``
(``servers``, ``support_processes``, ``processes``). During start-up the head server already
answers: the phase (``building venvs``...) and each server's state (its venv build, then
``starting``...). Exit 0 when the environment is ready, 3 when it
is starting or failed or the head server cannot be reached.
``--head`` defaults to the head server of the daemon running on this ``$GYM_RUNTIME_HOME``
(``daemon.json``, held by ``up`` while it runs; see :mod:`gym_runtime.supervise.daemon_record`).
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from gym_runtime.errors import EXIT_RUNTIME, StartError, UserError
from gym_runtime.settings import load_settings
from gym_runtime.supervise.daemon_record import RECORD, running

if TYPE_CHECKING:  # httpx loads only when a head server is asked
    import httpx


def add_head_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--head",
        metavar="URL",
        help="head server URL (default: the running daemon's, from "
        "$GYM_RUNTIME_HOME/daemon.json); `up` prints it in its ready line",
    )


def head_url(args: argparse.Namespace) -> str:
    """``--head`` or the running daemon's head URL; raises :class:`UserError` when neither exists."""
    if args.head:
        return args.head.rstrip("/")
    home = load_settings().home
    record = running(home)
    if record is None:
        raise UserError(
            f"no --head given and no running daemon recorded in {home / RECORD}",
            code="GR-HEAD-UNKNOWN",
            hint="pass --head http://host:port (the head_server of `up`'s ready line)",
        )
    if not record.get("head_server"):
        raise StartError(
            f"the daemon (pid {record.get('pid')}) is still reading its config: its head server "
            "serves right after that",
            code="GR-HEAD-STARTING",
            hint="try again in a moment",
        )
    return str(record["head_server"]).rstrip("/")


def get(url: str, timeout: float = 5.0) -> httpx.Response:
    """GET on the head server; raises :class:`StartError` ``GR-HEAD-UNREACHABLE`` when it does not answer."""
    import httpx

    try:
        return httpx.get(url, timeout=timeout, trust_env=False)
    except httpx.HTTPError as e:
        raise StartError(
            f"cannot reach the head server at {url}: {e}",
            code="GR-HEAD-UNREACHABLE",
            hint="is `gym-runtime up` running? pass the head_server URL from its ready line with --head",
        ) from None


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="show a running environment's health and servers")
    add_head_arg(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    base = head_url(args)
    health = get(base + "/health")
    servers = get(base + "/server_instances").json()
    support = get(base + "/support_processes").json()
    procs = get(base + "/processes")
    procs_body = procs.json() if procs.status_code == 200 else None
    body = health.json()
    if args.json:
        print(
            json.dumps(
                {
                    "head_server": base,
                    "health": body,
                    "servers": servers,
                    "support_processes": support,
                    "processes": procs_body,
                },
                indent=2,
            )
        )
    else:
        print(f"head server {base}: {body.get('status')}" + (f" ({body.get('phase')})" if "phase" in body else ""))
        width = max([24, *(len(s["process_name"]) for s in servers), *(len(s["name"]) for s in support)])
        for s in servers:
            print(_line(s["process_name"], f"{s.get('server_type')}/{s.get('name')}", s, width))
        for s in support:
            print(_line(s["name"], f"({s.get('kind')})", s, width))
        if procs_body is not None:
            _print_processes(procs_body)
    return 0 if health.status_code == 200 else EXIT_RUNTIME


def _line(name: str, what: str, s: dict, width: int = 24) -> str:
    """One server's line; ``width``: the name column's (the longest name's, so the columns align)."""
    up = s.get("uptime_seconds")
    return (
        f"  {name:<{width}} {s.get('state', '?'):<10} {s.get('url') or '-':<28} pid {s.get('pid') or '-':<8}"
        f" restarts {s.get('restarts', 0)}"
        + (f" up {up:.0f}s" if up else "")
        + f"  {what}"
        + (f"  node {s['node']} moves {s.get('moves', 0)}" if s.get("placement") == "ray" else "")
        + (f"  sandboxes {s['sandboxes']}" if s.get("sandboxes") else "")
        + (f"  error: {s['error']}" if s.get("error") else "")
    )


def _print_processes(body: dict) -> None:
    """Totals per role, then one line per process (role, member or component, pid, RSS, PSS)."""
    rows, by_role = body.get("processes", []), body.get("by_role", {})
    rss = sum(r.get("rss_mb") or 0 for r in rows)
    pss = [r.get("pss_mb") for r in rows]
    total_pss = f", PSS {sum(pss):.0f} MiB" if pss and None not in pss else ""
    print(f"processes: {len(rows)}, RSS {rss:.0f} MiB{total_pss}")
    for role, t in by_role.items():
        role_pss = f" (PSS {t['pss_mb']:.0f})" if t.get("pss_mb") is not None else ""
        print(f"  {role:<8} {t['processes']:>3} process(es) {t['rss_mb']:>8.1f} MiB{role_pss}")
        for r in rows:
            if r["role"] == role:
                what = " ".join(x for x in (r.get("member"), r.get("component")) if x)
                print(f"      {what:<40} pid {r['pid']:<8} {r['rss_mb']:>7.1f} MiB")
