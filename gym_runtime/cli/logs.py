"""``gym-runtime logs INSTANCE [--tail N] [--follow] [--head URL]``: a server's log.

With a running daemon: asks the head server's ``/servers/{name}/logs`` for the last lines and the
log file (a server still building its venv says so); ``--follow`` then keeps printing what is
appended to that file (same host) and exits (status 0) once the daemon is gone, after printing what
it wrote last. With no running daemon (and no ``--head``): when the last venv build on this
``$GYM_RUNTIME_HOME`` (``last_build.json``, :mod:`gym_runtime.venvs.record`: the last run's own build,
or a later ``gym-runtime build``) failed building the instance's venv, what failed, uv's error lines
from *that* build's log and the log's path, and exit 3; else the last lines of the instance's log
from the last run (``last_run.json``), or of the newest older ``runs/*/logs/INSTANCE.log``, saying
which older run it is and when it was written. A build log is never attributed to a run that did
not build the instance. It lists the files that exist for the instance on stderr (its venv build
logs under ``$GYM_RUNTIME_HOME/logs/build/`` included) and never a run dir that does not exist;
exit 1 when there is no log at all. Every line it prints is cut to
:data:`~gym_runtime.supervise.lines.LINE_MAX_BYTES` bytes and a ``\r`` redraw counts as the line it
leaves (:class:`~gym_runtime.supervise.lines.Lines`), whatever the server wrote.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import deque
from pathlib import Path

from gym_runtime.cli.status import add_head_arg, get, head_url
from gym_runtime.errors import EXIT_RUNTIME, StartError, UserError
from gym_runtime.settings import load_settings
from gym_runtime.supervise.daemon_record import LAST_RUN, read_json, running
from gym_runtime.supervise.lines import Lines

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
        raise UserError(
            f"no server instance named {args.instance!r}",
            code="GR-LOGS-UNKNOWN",
            hint="instances: " + (", ".join(names) or "(none)"),
        )
    body = r.json()
    for line in body["lines"]:
        print(line)
    sys.stdout.flush()  # the tail shows now, also through a pipe, before any wait below
    while args.follow and body.get("log_file") is None:  # still building its venv: wait for its log
        time.sleep(ALIVE_EVERY_S)
        try:
            body = get(f"{base}/servers/{args.instance}/logs?tail={args.tail}").json()
        except StartError:  # the daemon stopped before the server had a log
            print(f"the daemon is gone ({base} does not answer) before {args.instance!r} had a log", file=sys.stderr)
            return 0
        for line in body["lines"] if body.get("log_file") else ():
            print(line)
        sys.stdout.flush()
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


def _print(lines: list[str]) -> None:
    if lines:
        sys.stdout.write("".join(line + "\n" for line in lines))
        sys.stdout.flush()


def _follow(path: Path, base: str) -> None:
    """Print the lines appended to ``path`` until the head server at ``base`` stops answering (then
    print the rest) or the user interrupts."""
    f = open(path, "rb")  # noqa: SIM115 (reopened on rotation)
    f.seek(0, 2)
    lines = Lines()
    checked = time.monotonic()
    try:
        while True:
            chunk = f.read(1 << 20)
            if chunk:
                _print(lines.feed(chunk))
                continue
            if path.exists() and path.stat().st_size < f.tell():  # rotated
                f.close()
                f = open(path, "rb")  # noqa: SIM115 - reopened on rotation, closed by the loop's finally
                continue
            if time.monotonic() - checked >= ALIVE_EVERY_S:
                if not _alive(base):
                    while chunk := f.read(1 << 20):
                        _print(lines.feed(chunk))
                    _print(lines.end())
                    print(f"the daemon is gone ({base} does not answer): end of {path}", file=sys.stderr)
                    return
                checked = time.monotonic()
            time.sleep(0.2)
    except KeyboardInterrupt:
        _print(lines.end())
        return
    finally:
        f.close()


def last_lines(path: Path, n: int) -> list[str]:
    """The last ``n`` lines of the log file ``path`` as :class:`~gym_runtime.supervise.lines.Lines`
    shows them (one pass over the file, memory bounded by ``n`` capped lines)."""
    kept: deque[str] = deque(maxlen=max(n, 0))
    lines = Lines()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            kept.extend(lines.feed(chunk))
    kept.extend(lines.end())
    return list(kept)


def _from_files(instance: str, tail: int, home: Path) -> int:
    """No running daemon: what the last run (or a later ``gym-runtime build``) left for ``instance``
    (module doc). Returns 3 when that was a failed venv build of ``instance``, else 0."""
    from gym_runtime.venvs.record import last_build

    last = read_json(home / LAST_RUN) or {}
    build = last_build(home)
    if build is not None and not (
        build.get("pid") == last.get("pid") or float(build.get("started_at") or 0) >= float(last.get("started_at") or 0)
    ):
        build = None  # an older build than the last run: it says nothing about that run
    entry = (build or {}).get("servers", {}).get(instance)
    if entry and build is not None and entry.get("status") in ("failed", "cancelled"):
        return _failed_build(instance, entry, build, last, home, tail)
    last_log = Path(last["logs_dir"]) / f"{instance}.log" if last.get("logs_dir") else None
    older = sorted(
        (p for p in (home / "runs").glob(f"*/logs/{instance}.log") if p != last_log), key=_mtime, reverse=True
    )
    build_logs = sorted((home / "logs" / "build").glob(f"{instance}-*.log"), key=_mtime, reverse=True)
    shown, what = (
        (last_log, "last run")
        if last_log is not None and last_log.is_file()
        else ((older[0], "older run") if older else (None, ""))
    )
    if shown is None and not build_logs:
        raise UserError(
            f"no running daemon (GYM_RUNTIME_HOME={home}) and no log file for {instance!r}",
            code="GR-LOGS-NO-DAEMON",
            hint="start it with `gym-runtime up PKG`, or pass --head URL "
            f"of a running daemon; looked in {home / 'runs'}/*/logs and {home / 'logs' / 'build'}",
        )
    err = sys.stderr
    print(f"no running daemon (GYM_RUNTIME_HOME={home}); log files for {instance!r}:", file=err)
    for p in ([shown] if shown is not None else []) + build_logs:
        print(f"  {p}  ({'venv build' if p in build_logs else what}, modified {_stamp(_mtime(p))})", file=err)
    if what == "last run":
        print(f"last {tail} lines of {shown}:", file=err)
    elif last:
        never = last.get("work_dir") and not Path(last["work_dir"]).is_dir()
        note = (
            f"the last run (pid {last.get('pid', '?')}, started {_stamp(last.get('started_at'))}) left no log "
            f"for {instance!r}" + (" (it stopped before creating its run directory)" if never else "")
        )
        if entry and entry.get("status") == "not built":
            note += f"; its venv builds failed before {instance!r}'s was done (see `gym-runtime logs` of those)"
        if what == "older run" and shown is not None:
            note += f".\nshowing the log of an older run, {shown.parent.parent} (last written {_stamp(_mtime(shown))}):"
        print(note, file=err)
    elif what == "older run" and shown is not None:
        print(f"showing the log of the run {shown.parent.parent} (last written {_stamp(_mtime(shown))}):", file=err)
    if shown is None:
        return 0
    _print(last_lines(shown, tail))
    return 0


def _failed_build(instance: str, entry: dict, build: dict, last: dict, home: Path, tail: int) -> int:
    """The failed (or cancelled) venv build of ``instance`` in the last run or ``gym-runtime build``:
    what failed on stderr, uv's error lines on stdout, the log named; exit 3 (a runtime failure)."""
    from gym_runtime.venvs.diagnose import uv_error_block

    err = sys.stderr
    if build.get("pid") == last.get("pid"):
        who = f"the last run (pid {last.get('pid', '?')}, started {_stamp(last.get('started_at'))})"
        if last.get("work_dir") and not Path(last["work_dir"]).is_dir():
            who += ", which stopped before creating its run directory,"
    else:
        who = (
            f"the last `gym-runtime {build.get('command', 'build')}` (pid {build.get('pid', '?')}, started "
            f"{_stamp(build.get('started_at'))})"
        )
    print(
        f"no running daemon (GYM_RUNTIME_HOME={home}); {who} "
        + ("was cancelled while building" if entry["status"] == "cancelled" else "failed building")
        + f" the venv of {instance!r}"
        + (f" at {entry['stage']}" if entry.get("stage") else "")
        + (f": [{entry['code']}] {entry['message']}" if entry.get("code") else ""),
        file=err,
    )
    log = Path(entry["log"]) if entry.get("log") else None
    if log is not None and log.is_file():
        text = log.read_text(encoding="utf-8", errors="replace")
        print(f"uv's error, from the failing build log {log}:", file=err)
        lines = uv_error_block(text).splitlines()
        for line in lines[-tail:] if tail > 0 else ():
            print(line)
    return EXIT_RUNTIME


def _stamp(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "at an unknown time"


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0
