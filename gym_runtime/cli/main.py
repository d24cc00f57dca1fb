"""``gym-runtime`` command line: argument parsing, dispatch, and the one place errors are printed.

Each sub-command lives in its own module under ``gym_runtime/cli/`` exposing
``register(subparsers)``; the parser it adds sets ``func(args) -> int``. User errors
(:class:`~gym_runtime.errors.GymRuntimeError`) are printed as one block on stderr, never with a
traceback; the exit code is the error's ``exit_code`` (README: 0 ok, 1 invalid input, 2 usage,
3 runtime failure). ``--json`` commands print the error as JSON on stdout as well.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from gym_runtime.cli import build, config_cmd, doctor, dry_run, logs, status, up, validate, vendor
from gym_runtime.errors import EXIT_INTERRUPTED, EXIT_RUNTIME, EXIT_USAGE, GymRuntimeError

COMMANDS = [validate, config_cmd, build, vendor, up, status, logs, doctor, dry_run]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's usage errors: exit 2 with our shape
        self.print_usage(sys.stderr)
        print(f"error[GR-USAGE]: {message}\nhint: run `{self.prog} --help`", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def make_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="gym-runtime", description="Bring up NeMo Gym reward environments: validate, "
                     "config, build, up, dry-run.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for mod in COMMANDS:
        mod.register(sub)
    return parser


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse ``argv``; ``KEY=VALUE`` overrides may stand anywhere after the package, also
    after flags (``up PKG --flag X key=value``), for the commands that take overrides."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        strays = [a for a in extra if a.startswith("-") or "=" not in a]
        if strays or not hasattr(args, "overrides"):
            parser.error(f"unrecognized arguments: {' '.join(strays or extra)}")
        args.overrides = list(args.overrides or []) + extra
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    parser = make_parser()
    args = parse_args(parser, argv)
    try:
        return int(args.func(args) or 0)
    except GymRuntimeError as e:
        if getattr(args, "json", False):
            print(json.dumps({"error": e.to_dict()}, indent=2))
        print(e.render(), file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_RUNTIME


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
