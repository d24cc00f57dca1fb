"""``gym-runtime logs INSTANCE [--tail N] [--follow] [--head URL]``: a server's log.

With a running daemon: asks the head server's ``/servers/{name}/logs`` for the last lines and the
log file; ``--follow`` then keeps printing what is appended to that file (same host) and exits
(status 0) once the daemon is gone, after printing what it wrote last. With no running daemon (and
no ``--head``): prints the last lines of the instance's log from the last run on this
``$GYM_RUNTIME_HOME`` (``last_run.json``, else the newest ``runs/*/logs/INSTANCE.log``) and lists
the files that exist for it on stderr, its venv build logs (``$GYM_RUNTIME_HOME/logs/build/``)
included; exit 1 when there is none.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import deque
from pathlib import Path

import httpx

from gym_runtime.cli.status import add_head_arg, get, head_url
from gym_runtime.errors import UserError
from gym_runtime.settings import load_settings
from gym_runtime.supervise.daemon_record import LAST_RUN, read_json, running

ALIVE_EVERY_S = 1.0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("logs", help="print a server's log (last lines; --follow to keep reading)")
    p.add_argument("instance", metavar="INSTANCE", help="server instance name (see `gym-runtime status`)")
    p.add_argument("--tail", type=int, default=100, help="lines to show first (default 100)")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new lines until the daemon stops")
    add_head_arg(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    home = load_settings().home
    if not args.head and running(home) is None:
        return _from_files(args.instance, args.tail, home)
    base = head_url(args)
    r = get(f"{base}/servers/{args.instance}/logs?tail={args.tail}")
    if r.status_code == 404:
        names = [s["name"] for s in get(base + "/server_instances").json()]
        raise UserError(f"no server instance named {args.instance!r}", code="GR-LOGS-UNKNOWN",
                        hint="instances: " + (", ".join(names) or "(none)"))
    body = r.json()
    for line in body["lines"]:
        print(line)
    if args.follow:
        _follow(Path(body["log_file"]), base)
    return 0


def _alive(base: str) -> bool:
    try:
        httpx.get(base + "/", timeout=1.0, trust_env=False)
        return True
    except httpx.HTTPError:
        return False


def _follow(path: Path, base: str) -> None:
    """Print what is appended to ``path`` until the head server at ``base`` stops answering (then
    print the rest) or the user interrupts."""
    f = open(path, "rb")  # noqa: SIM115 (reopened on rotation)
    f.seek(0, 2)
    checked = time.monotonic()
    try:
        while True:
            chunk = f.read()
            if chunk:
                sys.stdout.write(chunk.decode(errors="replace"))
                sys.stdout.flush()
                continue
            if path.exists() and path.stat().st_size < f.tell():  # rotated
                f.close()
                f = open(path, "rb")  # noqa: SIM115
                continue
            if time.monotonic() - checked >= ALIVE_EVERY_S:
                if not _alive(base):
                    sys.stdout.write(f.read().decode(errors="replace"))
                    sys.stdout.flush()
                    print(f"the daemon is gone ({base} does not answer): end of {path}", file=sys.stderr)
                    return
                checked = time.monotonic()
            time.sleep(0.2)
    except KeyboardInterrupt:
        return
    finally:
        f.close()


def _from_files(instance: str, tail: int, home: Path) -> int:
    """No running daemon: the last run's log of ``instance`` and its build logs (module doc)."""
    runs = []
    last = read_json(home / LAST_RUN)
    if last and last.get("logs_dir"):
        runs.append(Path(last["logs_dir"]) / f"{instance}.log")
    runs += sorted((home / "runs").glob(f"*/logs/{instance}.log"), key=_mtime, reverse=True)
    server_log = next((p for p in runs if p.is_file()), None)
    build = sorted((home / "logs" / "build").glob(f"{instance}-*.log"), key=_mtime, reverse=True)
    found = ([server_log] if server_log else []) + build
    if not found:
        raise UserError(f"no running daemon (GYM_RUNTIME_HOME={home}) and no log file for {instance!r}",
                        code="GR-LOGS-NO-DAEMON", hint="start it with `gym-runtime up PKG`, or pass --head URL "
                        f"of a running daemon; looked in {home / 'runs'}/*/logs and {home / 'logs' / 'build'}")
    print(f"no running daemon (GYM_RUNTIME_HOME={home}); log files for {instance!r}:", file=sys.stderr)
    for p in found:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(_mtime(p)))
        print(f"  {p}  ({'last run' if p == server_log else 'venv build'}, modified {stamp})", file=sys.stderr)
    if server_log is not None:
        print(f"last {tail} lines of {server_log}:", file=sys.stderr)
        with open(server_log, encoding="utf-8", errors="replace") as f:
            for line in deque(f, maxlen=tail) if tail > 0 else ():
                print(line, end="")
    return 0


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0
