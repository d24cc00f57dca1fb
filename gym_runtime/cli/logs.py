"""``gym-runtime logs INSTANCE [--tail N] [--follow] [--head URL]``: a server's log.

With a running daemon: asks the head server's ``/servers/{name}/logs`` for the last lines and the
log file; ``--follow`` then keeps printing what is appended to that file (same host) and exits
(status 0) once the daemon is gone, after printing what it wrote last. With no running daemon (and
no ``--head``): prints the last lines of the instance's log from the last run on this
``$GYM_RUNTIME_HOME`` (``last_run.json``); when that run failed building the instance's venv (its
run dir was never created), the tail of the failing build log (uv's error); else the newest
``runs/*/logs/INSTANCE.log``, saying which older run it is and when it was written. It lists the
files that exist for the instance on stderr, its venv build logs (``$GYM_RUNTIME_HOME/logs/build/``)
included, and never a run dir that does not exist; exit 1 when there is no log at all.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import deque
from pathlib import Path

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
        names = [s["process_name"] for s in get(base + "/server_instances").json()]
        names += [s["name"] for s in get(base + "/support_processes").json()]
        raise UserError(f"no server instance named {args.instance!r}", code="GR-LOGS-UNKNOWN",
                        hint="instances: " + (", ".join(names) or "(none)"))
    body = r.json()
    for line in body["lines"]:
        print(line)
    if args.follow:
        _follow(Path(body["log_file"]), base)
    return 0


def _alive(base: str) -> bool:
    import httpx

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
    """No running daemon: the last run's log of ``instance`` (else its failing venv build log when
    that run failed building it, else an older run's log, named as such) and its build logs
    (module doc)."""
    last = read_json(home / LAST_RUN) or {}
    last_log = Path(last["logs_dir"]) / f"{instance}.log" if last.get("logs_dir") else None
    older = sorted((p for p in (home / "runs").glob(f"*/logs/{instance}.log") if p != last_log),
                   key=_mtime, reverse=True)
    build = sorted((home / "logs" / "build").glob(f"{instance}-*.log"), key=_mtime, reverse=True)
    since = float(last.get("started_at") or 0) - 1
    failed = next((p for p in build if _mtime(p) >= since and _build_failed(p)), None) if last else None
    shown, what = _pick(last_log, failed, older)
    if shown is None and not build:
        raise UserError(f"no running daemon (GYM_RUNTIME_HOME={home}) and no log file for {instance!r}",
                        code="GR-LOGS-NO-DAEMON", hint="start it with `gym-runtime up PKG`, or pass --head URL "
                        f"of a running daemon; looked in {home / 'runs'}/*/logs and {home / 'logs' / 'build'}")
    err = sys.stderr
    print(f"no running daemon (GYM_RUNTIME_HOME={home}); log files for {instance!r}:", file=err)
    for p in ([shown] if shown is not None and shown not in build else []) + build:
        label = "venv build, failed" if p == failed else "venv build" if p in build else what
        print(f"  {p}  ({label}, modified {_stamp(_mtime(p))})", file=err)
    if what == "last run":
        print(f"last {tail} lines of {shown}:", file=err)
    elif last:
        never = last.get("work_dir") and not Path(last["work_dir"]).is_dir()
        note = (f"the last run (pid {last.get('pid', '?')}, started {_stamp(last.get('started_at'))}) left no log "
                f"for {instance!r}" + (" (it stopped before creating its run directory)" if never else ""))
        if what == "failed build":
            note += f"; it failed building the venv of {instance!r}.\nlast {tail} lines of the build log {shown}:"
        elif what == "older run":
            note += (f".\nshowing the log of an older run, {shown.parent.parent} (last written "
                     f"{_stamp(_mtime(shown))}):")
        print(note, file=err)
    elif what == "older run":
        print(f"showing the log of the run {shown.parent.parent} (last written {_stamp(_mtime(shown))}):", file=err)
    if shown is None:
        return 0
    with open(shown, encoding="utf-8", errors="replace") as f:
        for line in deque(f, maxlen=tail) if tail > 0 else ():
            print(line, end="")
    return 0


def _pick(last_log: Path | None, failed: Path | None, older: list[Path]) -> tuple[Path | None, str]:
    """The log to show and what it is: ``last run`` | ``failed build`` | ``older run`` (or None)."""
    if last_log is not None and last_log.is_file():
        return last_log, "last run"
    if failed is not None:
        return failed, "failed build"
    return (older[0], "older run") if older else (None, "")


def _build_failed(log: Path) -> bool:
    """True when the last uv command recorded in a build log (``[exit status N after Xs]``,
    venvs/uvrun.py) exited non-zero or was cancelled."""
    with open(log, encoding="utf-8", errors="replace") as f:
        ends = [ln for ln in deque(f, maxlen=400) if ln.startswith("[exit status ")]
    return bool(ends) and not ends[-1].startswith("[exit status 0 ")


def _stamp(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "at an unknown time"


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0
