"""``gym-runtime`` command line: dispatch, and the one place errors are printed.

Each sub-command lives in its own module under ``gym_runtime/cli/`` (the parser:
:mod:`gym_runtime.cli.parser`). This module imports nothing but ``sys`` at load time, and the
console script imports only it: everything else is imported inside :func:`main`, so a Ctrl-C
during the first second (imports) ends with one line and exit 130, never a traceback. User errors
(:class:`~gym_runtime.errors.GymRuntimeError`) are printed as one block on stderr, never with a
traceback; the exit code is the error's ``exit_code`` (README: 0 ok, 1 invalid input, 2 usage,
3 runtime failure). ``--json`` commands print the error as JSON on stdout as well.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code. A Ctrl-C at any point
    (also while the command modules are still being imported) prints one line and returns 130."""
    try:
        return _run(argv)
    except KeyboardInterrupt:
        try:
            print("interrupted", file=sys.stderr)
        except (OSError, ValueError):  # stderr's terminal went away (SIGHUP's case)
            pass
        return 130  # errors.EXIT_INTERRUPTED; not imported here, see the module doc


def _run(argv: list[str] | None) -> int:
    _without_httpx_cli()
    import json

    from gym_runtime.inherited import standard_descriptors

    standard_descriptors()  # before anything opens a file that would take a closed 0, 1 or 2
    from gym_runtime.cli.parser import make_parser, parse_args
    from gym_runtime.errors import EXIT_RUNTIME, GymRuntimeError

    args = parse_args(make_parser(), argv)
    try:
        return int(args.func(args) or 0)
    except GymRuntimeError as e:
        if getattr(args, "json", False):
            print(json.dumps({"error": e.to_dict()}, indent=2))
        print(e.render(), file=sys.stderr)
        return e.exit_code
    except BrokenPipeError:
        return EXIT_RUNTIME


def _without_httpx_cli() -> None:
    """Keep httpx's own command line out of this process. ``import httpx`` (0.28) imports
    ``httpx._main`` whenever click, rich and pygments are installed, as they are here (uvicorn
    needs click, this CLI rich): ~90 modules and ~5 MiB of the daemon's memory for a command line
    it never runs (docs/performance.md, "Where the memory goes now"). ``None`` in
    ``sys.modules`` makes that import raise ``ImportError`` (the import system's reference,
    "The module cache"), which httpx catches: its ``httpx.main`` is then the stub that says the CLI
    cannot run; nothing else of httpx changes. Rich stays importable for this CLI's own output."""
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]  # None: the import system's "halt"


def console() -> None:
    """The console script: :func:`main`, then exit. Once the command is done, SIGINT is ignored: at
    interpreter exit Python puts back the default action of the handlers it installed, so a Ctrl-C
    landing there would kill the process with no message instead of the exit code just decided.

    The exit is the fast one every server venv gets (:mod:`gym_runtime.venvs.exit_hook`):
    ``gc.freeze`` registered with ``atexit`` before anything else runs, so after every other handler,
    and finalization's collections skip the heap the command leaves (the daemon's: ~90,000 objects,
    1.3 s of one core after a stop at load average 18, 0.2 s with the freeze). The daemon's own
    teardown has closed its logs, records and processes by then; stream flushing and ``atexit``
    handlers are unchanged."""
    import atexit
    import gc
    import signal

    atexit.register(gc.freeze)
    code = main()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _drop_unread_streams()
    sys.exit(code)


def _drop_unread_streams() -> None:
    """Point stdout and stderr at ``/dev/null`` when what is left in them cannot be written (the
    reader went away): otherwise the interpreter's last flush fails and the exit code becomes 120
    instead of the command's (Python docs, ``signal``, "Note on SIGPIPE")."""
    import os

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, stream.fileno())
                os.close(devnull)
            except (OSError, ValueError):
                pass


if __name__ == "__main__":  # pragma: no cover
    console()
