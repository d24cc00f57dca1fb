"""``dry-run`` takes the start-up deadlines ``up`` takes (``--ready-timeout``, ``--startup-timeout``):
a slow host (a runtime image under emulation: servers take minutes to import FastAPI) runs the
README's job with longer ones instead of failing GR-START-TIMEOUT at the 180 s default."""

from __future__ import annotations

from gym_runtime.cli.dry_run import request_from_args
from gym_runtime.cli.parser import make_parser
from gym_runtime.supervise.options import SuperviseOptions


def options(*flags: str) -> SuperviseOptions:
    args = make_parser().parse_args(["dry-run", "pkg", "--dataset", "rows.jsonl", *flags])
    return request_from_args(args).runtime_kwargs["options"]


def test_the_defaults_are_ups() -> None:
    assert options() == SuperviseOptions()


def test_deadlines_and_the_policy_probe_reach_the_supervisor() -> None:
    got = options("--ready-timeout", "1800", "--startup-timeout", "3600", "--probe-policy")
    assert (got.server_ready_timeout_s, got.startup_timeout_s, got.probe_policy) == (1800.0, 3600.0, True)
