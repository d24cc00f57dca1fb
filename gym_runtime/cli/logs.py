"""``gym-runtime logs INSTANCE [--tail N] [--follow] [--head URL]``: a server's log from a running daemon.

Asks the head server's ``/servers/{name}/logs`` for the last lines and the log file; ``--follow``
then keeps printing what is appended to that file (same host) until interrupted.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from gym_runtime.cli.status import add_head_arg, get, head_url
from gym_runtime.errors import UserError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("logs", help="print a server's log (last lines; --follow to keep reading)")
    p.add_argument("instance", metavar="INSTANCE", help="server instance name (see `gym-runtime status`)")
    p.add_argument("--tail", type=int, default=100, help="lines to show first (default 100)")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new lines")
    add_head_arg(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    r = get(f"{head_url(args)}/servers/{args.instance}/logs?tail={args.tail}")
    if r.status_code == 404:
        names = [s["name"] for s in get(head_url(args) + "/server_instances").json()]
        raise UserError(f"no server instance named {args.instance!r}", code="GR-LOGS-UNKNOWN",
                        hint="instances: " + (", ".join(names) or "(none)"))
    body = r.json()
    for line in body["lines"]:
        print(line)
    if not args.follow:
        return 0
    path = Path(body["log_file"])
    with open(path, "rb") as f:
        f.seek(0, 2)
        try:
            while True:
                chunk = f.read()
                if chunk:
                    sys.stdout.write(chunk.decode(errors="replace"))
                    sys.stdout.flush()
                else:
                    if path.stat().st_size < f.tell():  # rotated
                        f.close()
                        f = open(path, "rb")  # noqa: SIM115
                    time.sleep(0.2)
        except KeyboardInterrupt:
            return 0
