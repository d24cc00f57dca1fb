"""``gym-runtime up PKG``: start, supervise and serve an environment until SIGTERM/SIGINT/SIGHUP.

stdout gets exactly ONE JSON line once every server answers (``{"status": "ready", "head_server",
"servers", "isolation", "startup_s", ...}``); human progress goes to stderr. Exit codes: see
:data:`EXIT_CODES` (also in ``up --help``). A second SIGINT/SIGTERM skips the grace period. SIGHUP
(the terminal went away) stops it as SIGTERM does, unless it came in ignored (``nohup``): see
:mod:`gym_runtime.inherited`, which also resets the rest of what the launcher left behind.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from gym_runtime.cli.common import (
    add_liveness_args,
    add_package_args,
    add_policy_args,
    liveness_from_args,
    policy_from_args,
    stdout_for_the_command,
)
from gym_runtime.errors import GymRuntimeError, UsageError
from gym_runtime.heap import return_free_heap
from gym_runtime.host import HOST_MODES, ROLLOUT_DEADLINE_S
from gym_runtime.inherited import normalise, stop_signals
from gym_runtime.settings import load_settings
from gym_runtime.supervise.daemon_record import DaemonRecord
from gym_runtime.supervise.options import SuperviseOptions

if TYPE_CHECKING:  # the daemon's machinery loads only when `up` runs (not for --help)
    from gym_runtime.host.mode import HostMode
    from gym_runtime.runtime.bringup import UpRequest

D = SuperviseOptions()
EXIT_CODES = """exit codes:
  0    stopped on request (SIGTERM, SIGINT, or SIGHUP unless started under nohup) after the
       ready line: a pod's normal end
  1    invalid input: package, config, flag or setting values
  2    usage: unknown or conflicting flags, missing arguments
  3    runtime failure: a venv build, a server that does not start or fails for good after
       ready (unless --keep-going), an unreachable or wrong policy endpoint, another daemon running,
       an unclean stop (a teardown step overran its deadline; the step is named)
  130  stopped by SIGTERM, SIGINT or SIGHUP before the ready line (config, venv builds, server start),
       a cancelled venv build included; everything started is stopped first
with --host-mode, a start-up that fails (or a server that fails for good after ready) does not
end the process: the head server answers GET /health 503 {"status": "failed", "error"} until
SIGTERM/SIGINT, and the exit code is then the error's (1 or 3); a global config that cannot be
read exits 1 at once"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "up",
        help="start, supervise and serve an environment (prints one JSON line when ready)",
        description="Start, supervise and serve an environment until SIGTERM, SIGINT or SIGHUP (not SIGHUP "
        "under nohup). stdout gets one JSON line when every server is ready; progress goes to stderr.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_package_args(p)
    add_policy_args(p)
    p.add_argument("--head-host", default="127.0.0.1", help="head server address (default 127.0.0.1)")
    p.add_argument("--head-port", type=int, default=None, help="head server port (default: a free port)")
    p.add_argument("--ray-address", metavar="ADDR", help="Ray cluster: host:port (GCS), 'auto' or 'local'")
    p.add_argument(
        "--placement",
        choices=["local", "ray"],
        default="local",
        help="where servers run: this host (default), or nodes of the --ray-address cluster chosen by "
        "Ray from each instance's placement: block (docs/scale-out.md)",
    )
    p.add_argument(
        "--sandbox-backend",
        choices=["local", "opensandbox"],
        default=None,
        help="where servers are sandboxed: local (namespaces on this host, the default) or opensandbox "
        "(the operator's OpenSandbox server, OPENSANDBOX_*); default GYM_RUNTIME_SANDBOX_BACKEND or local",
    )
    p.add_argument(
        "--max-concurrent-rollouts",
        type=int,
        metavar="N",
        help="rollouts in flight per POST "
        "/rollouts/run batch unless its body gives concurrency (default: 32 per agent replica)",
    )
    p.add_argument(
        "--work-dir", metavar="DIR", help="run directory: logs, server homes (default $GYM_RUNTIME_HOME/runs/<time>)"
    )
    p.add_argument("--require-isolation", action="store_true", help="fail unless full isolation is available")
    p.add_argument("--isolation", choices=["full", "partial", "none"], help="force a lower isolation level")
    p.add_argument("--python", help="interpreter for server venvs (version or path)")
    p.add_argument("--stub-seed", type=int, default=0, metavar="N", help="seed of the built-in stub model")
    h = p.add_argument_group('host mode (docs/runtime.md, "Host mode")')
    h.add_argument(
        "--host-mode",
        choices=HOST_MODES,
        help="serve as NMP's sandboxed Gym host: the Gym global "
        "config from NMP_GYM_GLOBAL_CONFIG (or NHX_GYM_GLOBAL_CONFIG), the head server bound at once in "
        "the port range and answering GET /health (starting | ready | failed) from the first moment, "
        "POST /rollouts/run answers joined on _rowidx; a failure keeps /health answering failed",
    )
    h.add_argument(
        "--head-port-range",
        metavar="LOW-HIGH",
        help="with --host-mode: the head server's port is the "
        "first free one of this range (default: the global config's port_range_low-port_range_high, "
        "else 5000-5999); --head-port takes one port instead",
    )
    h.add_argument(
        "--heartbeat-interval",
        type=float,
        default=15.0,
        metavar="S",
        help="seconds between the "
        "spaces a running POST /rollouts/run batch writes before its JSON (default %(default)g)",
    )
    h.add_argument(
        "--rollout-deadline",
        type=float,
        metavar="S",
        help="seconds after which a /rollouts/run batch "
        "stops and answers with the rows that finished, unless its body gives deadline_s (default: "
        f"{ROLLOUT_DEADLINE_S:g} with --host-mode, else 3600)",
    )
    g = p.add_argument_group("supervision")
    g.add_argument(
        "--ready-timeout", type=float, default=D.server_ready_timeout_s, help="per-server seconds (default %(default)s)"
    )
    g.add_argument(
        "--startup-timeout",
        type=float,
        default=D.startup_timeout_s,
        help="whole start-up, seconds (default %(default)s)",
    )
    g.add_argument(
        "--model-endpoint-timeout",
        type=float,
        default=D.model_endpoint_timeout_s,
        help="policy endpoint /models deadline, seconds; 0 skips the check (default %(default)s)",
    )
    g.add_argument(
        "--max-restarts",
        type=int,
        default=D.max_restarts,
        help="restarts per server before failing; a restart after its node's loss (placement ray) is not counted (default %(default)s)",
    )
    g.add_argument(
        "--shutdown-grace", type=float, default=D.shutdown_grace_s, help="TERM -> KILL seconds (default %(default)s)"
    )
    g.add_argument("--keep-going", action="store_true", help="keep the other servers up when one fails for good")
    add_liveness_args(g)
    p.set_defaults(func=run)


def request_from_args(args: argparse.Namespace) -> UpRequest:
    from gym_runtime.runtime.bringup import UpRequest

    opts = SuperviseOptions(
        server_ready_timeout_s=args.ready_timeout,
        startup_timeout_s=args.startup_timeout,
        model_endpoint_timeout_s=args.model_endpoint_timeout,
        max_restarts=args.max_restarts,
        shutdown_grace_s=args.shutdown_grace,
        keep_going=args.keep_going,
        probe_policy=args.probe_policy,
        **liveness_from_args(args),
    )
    if args.heartbeat_interval <= 0 or (args.rollout_deadline is not None and args.rollout_deadline <= 0):
        raise UsageError("--heartbeat-interval and --rollout-deadline must be > 0 seconds")
    return UpRequest(
        args.package,
        list(args.overrides),
        policy_from_args(args),
        args.head_host,
        args.head_port,
        args.ray_address,
        Path(args.work_dir) if args.work_dir else None,
        args.require_isolation,
        args.isolation,
        args.python,
        args.stub_seed,
        opts,
        args.placement,
        args.max_concurrent_rollouts,
        host_mode_from_args(args),
        args.heartbeat_interval,
        args.rollout_deadline,
        sandbox_backend=args.sandbox_backend,
    )


def host_mode_from_args(args: argparse.Namespace) -> HostMode | None:
    """``--host-mode``'s :class:`~gym_runtime.host.mode.HostMode` (None without it); the global
    config is read here, so one that cannot be read ends ``up`` at once (``GR-HOST-CONFIG``, exit 1).
    Raises :class:`UsageError` for ``--head-port-range`` without ``--host-mode`` or not LOW-HIGH."""
    from gym_runtime.host.global_config import parse_port_range, read_host_job
    from gym_runtime.host.mode import HostMode

    if args.host_mode is None:
        if args.head_port_range is not None:
            raise UsageError(
                "--head-port-range is for --host-mode only", hint="add --host-mode nmp, or use --head-port"
            )
        return None
    job = read_host_job(os.environ)
    try:
        port_range = parse_port_range(args.head_port_range) if args.head_port_range else job.port_range
    except ValueError as e:
        raise UsageError(f"--head-port-range: {e}", hint="e.g. --head-port-range 5000-5999") from None
    return HostMode(args.host_mode, job, port_range)


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

    from gym_runtime.runtime.bringup import Environment

    env = Environment(req, load_settings(), _progress)
    record = DaemonRecord(env.settings.home, env.work_dir, req.work_dir is not None, _progress)
    record.claim()
    env.on_head = record.head
    if req.host is not None:  # the launcher learns the head server's address at once (module doc)

        def on_head(url: str) -> None:
            record.head(url)
            _line(out, {"status": "starting", "head_server": url})

        env.on_head = on_head
    loop = asyncio.get_running_loop()
    signals: list[float] = []  # when each stop signal arrived (monotonic)
    stops: list[asyncio.Task] = []
    stop_requested = asyncio.Event()

    def on_signal(sig: int) -> None:
        now = time.monotonic()
        if signals and now - signals[0] < DUPLICATE_SIGNAL_S:
            return  # the same Ctrl-C delivered twice (terminal -> process group, and `uv run` forwarding it)
        signals.append(now)
        stop_requested.set()
        _progress(f"{signal.Signals(sig).name}: stopping" + (" now (second signal)" if len(signals) > 1 else ""))
        stops.append(loop.create_task(env.stop(fast=len(signals) > 1)))

    stop_on = stop_signals()  # SIGTERM, SIGINT, and SIGHUP unless it came in ignored (gym_runtime/inherited.py)
    for sig in stop_on:
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        start = loop.create_task(env.start())
        try:
            info = await start
        except BaseException as e:
            if req.host is not None and not signals and isinstance(e, GymRuntimeError) and env.head is not None:
                return await _hold_failed(env, e, out, stop_requested)
            await env.stop()
            if signals:
                _progress(f"stopped during start-up (phase: {env.phase})")
                return 130
            raise e from None
        print(json.dumps(info), file=out, flush=True)
        return_free_heap()
        record.ready(info)
        _progress(
            f"ready in {info['startup_s']:.2f}s; head server {info['head_server']}; supervising "
            f"({'/'.join(s.name for s in stop_on)} to stop)"
        )
        await env.supervisor.wait_stopped()
        failure = env.supervisor.failure
        if req.host is not None and not signals and failure is not None:
            return await _hold_failed(env, failure, out, stop_requested)
        code = await env.stop()
        return code
    finally:
        for sig in stop_on:
            loop.remove_signal_handler(sig)
        record.release()


def _line(out: TextIO, obj: dict) -> None:
    """One JSON line on stdout (host mode: ``starting``, then ``ready`` or ``failed``)."""
    try:
        print(json.dumps(obj), file=out, flush=True)
    except (OSError, ValueError):  # nobody reads stdout any more: the head server still says it
        pass


async def _hold_failed(env, error: GymRuntimeError, out: TextIO, stop_requested) -> int:
    """Host mode after a failure for good: stop everything but the head server, which answers
    ``/health`` with ``failed`` and ``error``'s block until a stop signal; returns the error's exit
    code (module doc)."""
    await env.fail(error)
    print(error.render(), file=sys.stderr, flush=True)
    _line(out, {"status": "failed", "head_server": env.head.url, "error": error.to_dict()})
    _progress(f"failed in phase {env.failed_phase!r}; GET /health answers failed with this error until SIGTERM/SIGINT")
    await stop_requested.wait()
    await env.close_head()
    return error.exit_code


def run(args: argparse.Namespace) -> int:
    import uvloop  # the daemon's loop: its transports cost the sandbox forwards ~40 % less CPU (docs/performance-history.md)

    for note in normalise():  # what the launcher left behind, made into what the daemon relies on
        _progress(f"inherited: {note}")
    req = request_from_args(args)
    with stdout_for_the_command() as out:  # stdout carries the ready line only (module doc)
        return uvloop.run(serve(req, out))
