"""``gym-runtime up PKG``: start, supervise and serve an environment until SIGTERM/SIGINT.

stdout gets exactly ONE JSON line once every server answers (``{"status": "ready", "head_server",
"servers", "isolation", "startup_s", ...}``); human progress goes to stderr. Exit codes: see
:data:`EXIT_CODES` (also in ``up --help``). A second SIGINT/SIGTERM skips the grace period.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from gym_runtime.cli.common import (add_liveness_args, add_package_args, add_policy_args, liveness_from_args,
                                    policy_from_args, stdout_for_the_command)
from gym_runtime.settings import load_settings
from gym_runtime.supervise.daemon_record import DaemonRecord
from gym_runtime.supervise.options import SuperviseOptions

if TYPE_CHECKING:  # the daemon's machinery loads only when `up` runs (not for --help)
    from gym_runtime.supervise.bringup import UpRequest

D = SuperviseOptions()
EXIT_CODES = """exit codes:
  0    stopped on request (SIGTERM or SIGINT) after the ready line: a pod's normal end
  1    invalid input: package, config, flag or setting values
  2    usage: unknown or conflicting flags, missing arguments
  3    runtime failure: a venv build, a server that does not start or fails for good after
       ready (unless --keep-going), an unreachable or wrong policy endpoint, another daemon running,
       an unclean stop (a teardown step overran its deadline; the step is named)
  130  stopped by SIGTERM or SIGINT before the ready line (config, venv builds, server start),
       a cancelled venv build included; everything started is stopped first"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("up", help="start, supervise and serve an environment (prints one JSON line when ready)",
                       description="Start, supervise and serve an environment until SIGTERM/SIGINT. stdout gets "
                       "one JSON line when every server is ready; progress goes to stderr.",
                       epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_package_args(p)
    add_policy_args(p)
    p.add_argument("--head-host", default="127.0.0.1", help="head server address (default 127.0.0.1)")
    p.add_argument("--head-port", type=int, default=None, help="head server port (default: a free port)")
    p.add_argument("--ray-address", metavar="ADDR", help="Ray cluster: host:port (GCS), 'auto' or 'local'")
    p.add_argument("--placement", choices=["local", "ray"], default="local",
                   help="where servers run: this host (default), or nodes of the --ray-address cluster chosen by "
                   "Ray from each instance's placement: block (docs/scale-out.md)")
    p.add_argument("--max-concurrent-rollouts", type=int, metavar="N", help="rollouts in flight per POST "
                   "/rollouts/run batch unless its body gives concurrency (default: 32 per agent replica)")
    p.add_argument("--work-dir", metavar="DIR", help="run directory: logs, server homes (default "
                   "$GYM_RUNTIME_HOME/runs/<time>)")
    p.add_argument("--require-isolation", action="store_true", help="fail unless full isolation is available")
    p.add_argument("--isolation", choices=["full", "partial", "none"], help="force a lower isolation level")
    p.add_argument("--python", help="interpreter for server venvs (version or path)")
    p.add_argument("--stub-seed", type=int, default=0, metavar="N", help="seed of the built-in stub model")
    g = p.add_argument_group("supervision")
    g.add_argument("--ready-timeout", type=float, default=D.server_ready_timeout_s, help="per-server seconds (default %(default)s)")
    g.add_argument("--startup-timeout", type=float, default=D.startup_timeout_s, help="whole start-up, seconds (default %(default)s)")
    g.add_argument("--model-endpoint-timeout", type=float, default=D.model_endpoint_timeout_s,
                   help="policy endpoint /models deadline, seconds; 0 skips the check (default %(default)s)")
    g.add_argument("--max-restarts", type=int, default=D.max_restarts, help="restarts per server before failing (default %(default)s)")
    g.add_argument("--shutdown-grace", type=float, default=D.shutdown_grace_s, help="TERM -> KILL seconds (default %(default)s)")
    g.add_argument("--keep-going", action="store_true", help="keep the other servers up when one fails for good")
    add_liveness_args(g)
    p.set_defaults(func=run)


def request_from_args(args: argparse.Namespace) -> UpRequest:
    from gym_runtime.supervise.bringup import UpRequest

    opts = SuperviseOptions(server_ready_timeout_s=args.ready_timeout, startup_timeout_s=args.startup_timeout,
                            model_endpoint_timeout_s=args.model_endpoint_timeout, max_restarts=args.max_restarts,
                            shutdown_grace_s=args.shutdown_grace, keep_going=args.keep_going,
                            probe_policy=args.probe_policy, **liveness_from_args(args))
    return UpRequest(args.package, list(args.overrides), policy_from_args(args), args.head_host, args.head_port,
                     args.ray_address, Path(args.work_dir) if args.work_dir else None, args.require_isolation,
                     args.isolation, args.python, args.stub_seed, opts, args.placement, args.max_concurrent_rollouts)


# A second stop signal within this many seconds of the first is the same request delivered twice:
# a terminal's Ctrl-C reaches the whole process group, and `uv run` forwards it to us as well (a
# person pressing Ctrl-C again takes longer).
DUPLICATE_SIGNAL_S = 0.25


def _progress(msg: str) -> None:
    """One progress line on stderr. Once nobody reads stderr (the launcher went away and its pipe
    broke, or it closed it) the line is dropped, never raised: a stop requested after that must
    still run (the servers' own logs keep their output)."""
    try:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)
    except (OSError, ValueError):  # BrokenPipeError and the like; ValueError: stderr itself closed
        pass


async def serve(req: UpRequest, out: TextIO) -> int:
    """Run the daemon on this loop until stopped, the ready line going to ``out``; returns the exit
    code. Raises
    :class:`~gym_runtime.errors.StartError` ``GR-DAEMON-RUNNING`` when another daemon holds the
    state directory (see :mod:`gym_runtime.supervise.daemon_record`)."""
    import asyncio

    from gym_runtime.supervise.bringup import Environment

    env = Environment(req, load_settings(), _progress)
    record = DaemonRecord(env.settings.home, env.work_dir, req.work_dir is not None, _progress)
    record.claim()
    env.on_head = record.head
    loop = asyncio.get_running_loop()
    signals: list[float] = []  # when each stop signal arrived (monotonic)
    stops: list[asyncio.Task] = []

    def on_signal(sig: int) -> None:
        now = time.monotonic()
        if signals and now - signals[0] < DUPLICATE_SIGNAL_S:
            return  # the same Ctrl-C delivered twice (terminal -> process group, and `uv run` forwarding it)
        signals.append(now)
        _progress(f"{signal.Signals(sig).name}: stopping" + (" now (second signal)" if len(signals) > 1 else ""))
        stops.append(loop.create_task(env.stop(fast=len(signals) > 1)))

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        start = loop.create_task(env.start())
        try:
            info = await start
        except BaseException as e:
            await env.stop()
            if signals:
                _progress(f"stopped during start-up (phase: {env.phase})")
                return 130
            raise e from None
        print(json.dumps(info), file=out, flush=True)
        record.ready(info)
        _progress(f"ready in {info['startup_s']:.2f}s; head server {info['head_server']}; supervising "
                  "(SIGTERM/SIGINT to stop)")
        await env.supervisor.wait_stopped()
        code = await env.stop()
        return code
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        record.release()


def run(args: argparse.Namespace) -> int:
    import uvloop  # the daemon's loop: its transports cost the sandbox forwards ~40 % less CPU (docs/performance.md)

    req = request_from_args(args)
    with stdout_for_the_command() as out:  # stdout carries the ready line only (module doc)
        return uvloop.run(serve(req, out))
