"""The ``gym-runtime`` argument parser: one sub-command per module under ``gym_runtime/cli/``.

Each module exposes ``register(subparsers)``; the parser it adds sets ``func(args) -> int``.
Usage errors print our ``error[GR-USAGE]`` block and exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from gym_runtime.errors import EXIT_USAGE

COMMANDS = [
    "validate",
    "config_cmd",
    "build",
    "prefetch",
    "vendor",
    "up",
    "status",
    "logs",
    "doctor",
    "dry_run",
    "prune",
]


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)  # `--sample 2` is a typo, never `--samples 2`
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:  # argparse's usage errors: exit 2 with our shape
        self.print_usage(sys.stderr)
        print(f"error[GR-USAGE]: {message}\nhint: run `{self.prog} --help`", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def make_parser() -> argparse.ArgumentParser:
    """The parser of every sub-command (importing their modules takes about a second)."""
    parser = _Parser(
        prog="gym-runtime", description="Bring up NeMo Gym reward environments: validate, config, build, up, dry-run."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in COMMANDS:
        importlib.import_module(f"gym_runtime.cli.{name}").register(sub)
    parser.set_defaults(_commands=sub.choices)  # each command's own parser, for its usage errors
    return parser


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse ``argv``; ``KEY=VALUE`` overrides may stand anywhere after the package, also
    after flags (``up PKG --flag X key=value``), for the commands that take overrides."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        strays = [a for a in extra if a.startswith("-") or "=" not in a]
        if strays or not hasattr(args, "overrides"):  # the command's own usage and --help
            command = getattr(args, "_commands", {}).get(getattr(args, "command", None), parser)
            command.error(f"unrecognized arguments: {' '.join(strays or extra)}")
        args.overrides = list(args.overrides or []) + extra
    return args
