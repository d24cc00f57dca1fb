"""Arguments shared by several sub-commands: the package, overrides, the job's policy values."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, TextIO

from gym_runtime.errors import SettingsError, Violation

if TYPE_CHECKING:  # the config package (OmegaConf) loads only when a command runs
    from gym_runtime.config.merge import PolicyValues


def add_package_args(p: argparse.ArgumentParser, overrides: bool = True) -> None:
    p.add_argument("package", metavar="PKG", help="environment package directory (holds nemo-environment.yaml)")
    if overrides:
        # default=[]: argparse counts a ``*`` positional without a default as required, so a
        # missing PKG was reported as "required: PKG, KEY=VALUE"
        p.add_argument(
            "overrides",
            nargs="*",
            default=[],
            metavar="KEY=VALUE",
            help="config overrides (OmegaConf dotlist), optional",
        )


def add_policy_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("policy model (the job's values; also GYM_RUNTIME_POLICY_* variables)")
    g.add_argument(
        "--policy-base-url",
        action="append",
        metavar="URL",
        help="OpenAI-compatible /v1 endpoint of the policy model; repeat for replicas",
    )
    g.add_argument("--policy-model-name", metavar="NAME", help="served model name")
    g.add_argument(
        "--policy-api-key-env",
        metavar="VAR",
        help="name of the environment variable holding the API key (keys never go on a command line)",
    )
    g.add_argument(
        "--probe-policy",
        action="store_true",
        help="before ready, probe each policy endpoint with a two-turn conversation offering a tool "
        "(and asking for token ids where the config does) and check tools, token ids, "
        "uses_reasoning_parser and reasoning_field against what it returns",
    )


def add_liveness_args(g: argparse._ArgumentGroup) -> None:
    """The liveness probe after ready (``SuperviseOptions.liveness_*``, supervise/wedged.py)."""
    from gym_runtime.supervise.options import SuperviseOptions as D

    g.add_argument(
        "--liveness-interval",
        type=float,
        default=D.liveness_interval_s,
        metavar="S",
        help="after ready, GET / of every server every S seconds; 0 turns the probe off (default %(default)g)",
    )
    g.add_argument(
        "--liveness-timeout",
        type=float,
        default=D.liveness_timeout_s,
        metavar="S",
        help="deadline of each liveness probe (default %(default)g)",
    )
    g.add_argument(
        "--liveness-misses",
        type=int,
        default=D.liveness_misses,
        metavar="N",
        help="misses in a row after which a server is wedged and restarted (default %(default)s)",
    )


def liveness_from_args(args: argparse.Namespace) -> dict:
    """The ``SuperviseOptions`` keywords of :func:`add_liveness_args`' flags; :class:`UsageError`
    for a negative interval, a non-positive timeout or fewer than one miss."""
    from gym_runtime.errors import UsageError

    if args.liveness_interval < 0 or args.liveness_timeout <= 0 or args.liveness_misses < 1:
        raise UsageError(
            "--liveness-interval must be >= 0, --liveness-timeout > 0 and --liveness-misses >= 1; got "
            f"{args.liveness_interval:g}, {args.liveness_timeout:g}, {args.liveness_misses}"
        )
    return {
        "liveness_interval_s": args.liveness_interval,
        "liveness_timeout_s": args.liveness_timeout,
        "liveness_misses": args.liveness_misses,
    }


def policy_from_args(args: argparse.Namespace) -> PolicyValues:
    """Flags win over ``GYM_RUNTIME_POLICY_*``; raises :class:`SettingsError` when the variable named by
    ``--policy-api-key-env`` is unset or empty."""
    from gym_runtime.config.merge import PolicyValues

    env = PolicyValues.from_environ()
    urls = args.policy_base_url
    base: str | list[str] | None = (urls[0] if len(urls) == 1 else list(urls)) if urls else env.base_url
    key = env.api_key
    if args.policy_api_key_env:
        key = os.environ.get(args.policy_api_key_env)
        if not key:  # an empty key is never what a job meant (same rule as ${oc.env:...}, config/resolve.py)
            state = "is not set" if key is None else "is set but empty"
            raise SettingsError(
                f"--policy-api-key-env names {args.policy_api_key_env}, which {state}",
                hint=f"export {args.policy_api_key_env}=<key> first",
            )
    origin = "flags" if (urls or args.policy_model_name or args.policy_api_key_env) else "environment"
    return PolicyValues(base, key, args.policy_model_name or env.model_name, origin=origin)


def print_warnings(warnings: list[Violation]) -> None:
    """Config warnings on stderr, one ``warning[CODE] file: key: message`` block each."""
    for w in warnings:
        print("warning" + w.render(), file=sys.stderr)


@contextlib.contextmanager
def stdout_for_the_command() -> Iterator[TextIO]:
    """Keep stdout for the command's own output (``up``'s ready line, ``dry-run``'s report): yields the
    real stdout, and while the block runs ``sys.stdout`` is stderr, so what a library prints there
    goes to stderr (a Ray driver prints cluster events such as "(raylet) The node ... has been
    marked dead" to stdout whatever ``log_to_driver`` says: Ray 2.60 ``_private/worker.py``
    ``listen_error_messages``)."""
    out, sys.stdout = sys.stdout, sys.stderr
    try:
        yield out
    finally:
        sys.stdout = out
