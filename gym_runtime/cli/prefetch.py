"""``gym-runtime prefetch PKG [KEY=VALUE ...]`` | ``gym-runtime prefetch --gym-release``: fill the caches a pod's first start reads, so that
start resolves nothing and learns no imports (NeMo Gym 0.7.0 has ``gym env prefetch``, which only
installs its per-server venvs: ``nemo_gym/cli/env.py`` ``prefetch``).

What it fills (docs/runtime.md, "Prefetch"): the uv cache (every wheel of every server venv's
closure), the recorded resolution of each venv plan (``$GYM_RUNTIME_HOME/resolutions/``: a rebuilt
venv installs exactly that, offline) and the bytecode store (``$GYM_RUNTIME_HOME/bytecode/``: what
each server and the private Ray head import at start-up, compiled by the daemon). The last one is
learned the only way it can be: the environment is brought up as ``up`` would bring it up (the
built-in stub model as policy unless ``--policy-base-url`` is given), once every server answers
the daemon waits until what they imported is compiled and saved, then stops it. No rollout runs.
With ``--drop-venvs`` the venvs this run built are removed at the end (an image that seeds only
the caches stays smaller; a later start rebuilds each venv offline from them); venvs it reused
are kept, another run may be using them.

``--gym-release`` (no PKG) fills the uv cache and the recorded resolution of the closure of the Gym
release the pins choose (``GYM_RUNTIME_PIN_NEMO_GYM``, default the current release): it builds the
venv of a Gym tree whose install file holds only Gym's SDK line (gym_runtime/gym_release/sdk_package.py),
the venv every such tree of a package shares. Nothing is started, so the bytecode store is not
filled: what a server imports is learned per server, by ``prefetch PKG``.

stdout: one line per filled cache (or one JSON object with ``--json``); stderr: start-up progress.
Exit 0 when everything was filled, 3 when the start failed or the bytecode was not saved within
``--learn-timeout`` seconds (the start's own errors, e.g. ``GR-BUILD-*``, ``GR-START-*``), 130 on
SIGTERM/SIGINT (everything started is stopped first), 1/2 for bad input and flags.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

from gym_runtime.cli.common import add_policy_args, policy_from_args, stdout_for_the_command
from gym_runtime.errors import EXIT_OK, StartError, UsageError
from gym_runtime.settings import load_settings
from gym_runtime.supervise.options import SuperviseOptions

LEARN_TIMEOUT_S = 300.0  # after ready: compiling ~3,700 files takes ~7 CPU s on an idle core


def register(sub: argparse._SubParsersAction) -> None:
    d = SuperviseOptions()
    p = sub.add_parser(
        "prefetch",
        help="fill the uv cache, recorded resolutions and bytecode store for a package",
        description="Fill the caches a first start reads (uv cache, recorded resolutions, bytecode "
        "store): build every server venv, start the environment once until every server answers, "
        "save what its processes imported, stop.",
    )
    p.add_argument(
        "package",
        metavar="PKG",
        nargs="?",
        help="environment package directory (holds nemo-environment.yaml); omit it with --gym-release",
    )
    p.add_argument("overrides", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides, optional")
    p.add_argument(
        "--gym-release",
        action="store_true",
        help="instead of a package: the closure of the Gym release "
        "the pins choose (GYM_RUNTIME_PIN_NEMO_GYM; uv cache and recorded resolution, no bytecode)",
    )
    add_policy_args(p)
    p.add_argument("--python", help="interpreter for server venvs (version or path), as for up")
    p.add_argument("--isolation", choices=["full", "partial", "none"], help="force a lower isolation level, as for up")
    p.add_argument(
        "--drop-venvs",
        action="store_true",
        help="remove the venvs this run built once the caches are "
        "filled (a later start rebuilds them offline from the caches)",
    )
    p.add_argument(
        "--work-dir", type=Path, metavar="DIR", help="run directory for logs (default $GYM_RUNTIME_HOME/runs/<time>)"
    )
    p.add_argument(
        "--ready-timeout",
        type=float,
        default=d.server_ready_timeout_s,
        metavar="S",
        help="per-server seconds until GET / answers (default %(default)s)",
    )
    p.add_argument(
        "--startup-timeout",
        type=float,
        default=d.startup_timeout_s,
        metavar="S",
        help="whole start-up, seconds (default %(default)s)",
    )
    p.add_argument(
        "--learn-timeout",
        type=float,
        default=LEARN_TIMEOUT_S,
        metavar="S",
        help="seconds after ready to compile and save what the processes imported (default %(default)g)",
    )
    p.add_argument("--json", action="store_true", help="print what was filled as one JSON object")
    p.set_defaults(func=run)


def _say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


async def prefetch(args: argparse.Namespace) -> dict[str, Any]:
    """Bring the environment up, wait for its bytecode to be saved, stop it; returns the report
    (``venvs``: path, plan digest, servers, built or reused, dropped; ``bytecode_saved``; the state paths filled).
    Raises the start's :class:`~gym_runtime.errors.GymRuntimeError`, and :class:`StartError`
    ``GR-PREFETCH-LEARN`` when the bytecode was not saved within ``--learn-timeout``."""
    import asyncio

    from gym_runtime.runtime.bringup import Environment, UpRequest
    from gym_runtime.supervise.daemon_record import DaemonRecord

    settings = load_settings()
    opts = SuperviseOptions(
        server_ready_timeout_s=args.ready_timeout, startup_timeout_s=args.startup_timeout, liveness_interval_s=0
    )
    req = UpRequest(
        args.package,
        list(args.overrides),
        policy_from_args(args),
        work_dir=args.work_dir,
        isolation=args.isolation,
        python=args.python,
        options=opts,
    )
    env = Environment(req, settings, _say)
    record = DaemonRecord(env.settings.home, env.work_dir, args.work_dir is not None, _say)
    record.claim()  # one daemon per state directory: another one may be saving to the same store
    loop = asyncio.get_running_loop()
    me = asyncio.current_task()
    assert me is not None
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, me.cancel)
    try:
        try:
            info = await env.start()
            _say(f"ready in {info['startup_s']:.2f}s; compiling and saving what the processes imported")
            t = time.monotonic()
            saved = await env.bytecode.settled(args.learn_timeout)
            learn_s = time.monotonic() - t
        finally:
            code = await env.stop()
        if not saved:
            raise StartError(
                f"the bytecode of {args.package} was not saved within --learn-timeout "
                f"{args.learn_timeout:g}s after ready",
                code="GR-PREFETCH-LEARN",
                hint="give a longer --learn-timeout (compiling is slow on a loaded host); the uv cache "
                "and the recorded resolutions are filled already",
                extra={"logs_dir": str(env.logs_dir)},
            )
        if code != 0:
            raise StartError(
                f"the environment of {args.package} did not stop cleanly (exit {code})",
                code="GR-PREFETCH-STOP",
                hint=f"see the server logs under {env.logs_dir}",
            )
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        record.release()
    venvs = await asyncio.to_thread(_venv_rows, env.placement.local_venvs(), args.drop_venvs)
    return {
        "package": str(Path(args.package).resolve()),
        "startup_s": info["startup_s"],
        "learn_s": round(learn_s, 3),
        "venvs": venvs,
        **_caches(settings),
        "bytecode_store": str(settings.bytecode_dir),
    }


def _venv_rows(venvs: list[Any], drop: bool, servers: list[str] | None = None) -> list[dict[str, Any]]:
    """The report's row of each built venv (``venvs/build.py`` ``Venv``): path, plan digest, servers
    (``servers`` instead of its instances when given), built or reused, dropped. With ``drop`` the
    venvs this run built are removed first (``--drop-venvs``; reused ones may be another run's)."""
    rows = []
    for v in venvs:
        dropped = bool(drop and not v.reused)
        if dropped:
            shutil.rmtree(v.path, ignore_errors=True)
        rows.append(
            {
                "path": str(v.path),
                "digest": v.digest,
                "servers": servers or list(v.instances),
                "status": v.status,
                "dropped": dropped,
            }
        )
    return rows


def _caches(settings: Any) -> dict[str, str]:
    return {"uv_cache": str(settings.uv_cache_dir or "uv's default"), "resolutions": str(settings.resolutions_dir)}


def release_closure(args: argparse.Namespace) -> dict[str, Any]:
    """Build the venv of the Gym SDK alone for the release the pins choose (module doc); returns
    the report (``gym_release``, ``venvs``, the state paths filled). Raises the build's
    :class:`~gym_runtime.errors.BuildError` (``GR-BUILD-*``)."""
    from gym_runtime.config import build_config
    from gym_runtime.gym_release import choose_release
    from gym_runtime.gym_release.sdk_package import write_sdk_package
    from gym_runtime.package import load_package
    from gym_runtime.venvs import build_venvs, plan_venvs

    settings = load_settings()
    root = write_sdk_package(settings.home / "prefetch" / "gym-sdk")
    pkg = load_package(root)
    release = choose_release(pkg, settings)
    _say(release.describe())
    merged = build_config(pkg, [], policy_from_args(args), release=release)
    t = time.monotonic()
    venvs = build_venvs(plan_venvs(merged, settings, python=args.python), settings, progress=False)
    rows = _venv_rows(venvs.venvs, args.drop_venvs, ["the Gym SDK alone"])
    return {
        "gym_release": release.to_dict(),
        "build_s": round(time.monotonic() - t, 3),
        "venvs": rows,
        **_caches(settings),
    }


def run(args: argparse.Namespace) -> int:
    import asyncio

    import uvloop  # the daemon's loop, as for `up`

    if bool(args.package) == args.gym_release:
        raise UsageError(
            "give either PKG or --gym-release",
            hint="`gym-runtime prefetch PKG` fills the caches of a "
            "package; `gym-runtime prefetch --gym-release` those of the Gym release's closure",
        )
    try:
        with stdout_for_the_command():  # stdout carries the report only
            report = release_closure(args) if args.gym_release else uvloop.run(prefetch(args))
    except asyncio.CancelledError:  # SIGTERM or SIGINT: the environment was stopped (main() says 130)
        raise KeyboardInterrupt("prefetch") from None
    if args.json:
        print(json.dumps(report, indent=2))
        return EXIT_OK
    for v in report["venvs"]:
        fate = "; removed (--drop-venvs)" if v["dropped"] else ""
        print(f"venv {', '.join(v['servers'])}: {v['status']}  {v['path']}{fate}")
    print(f"uv cache: {report['uv_cache']}")
    print(f"recorded resolutions: {report['resolutions']}")
    if "bytecode_store" in report:
        print(
            f"bytecode store: {report['bytecode_store']} (saved {report['learn_s']:.1f}s after a start of "
            f"{report['startup_s']:.1f}s)"
        )
    return EXIT_OK
