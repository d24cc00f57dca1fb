"""``gym-runtime build PKG [KEY=VALUE ...] [--python X] [--json]``: plan and build every server venv.

Prints the plan notes (pins, replaced Gym SDK lines), then one line per server: built, rebuilt
or reused, seconds, venv path, Python, what changed since the server's last build (a rebuild:
a requirements line, a wheels/ file's sha256, the Python, a pin, uv's version), and any warning
(e.g. wheels/ bypassed by stage 1). ``--json`` has the same as ``reasons``. Rich progress
bars on a TTY, plain lines otherwise. SIGTERM/SIGINT cancel the builds (uv process groups are
killed; nothing half-built is kept). Exit 3 with one error block on a failed build.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from typing import Any

from gym_runtime.cli.common import add_package_args, add_policy_args, policy_from_args
from gym_runtime.cli.validate import PLACEHOLDERS
from gym_runtime.errors import BuildError
from gym_runtime.settings import PIN_MODES, load_settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("build", help="build (or reuse) one venv per server")
    add_package_args(p)
    add_policy_args(p)
    p.add_argument(
        "--python",
        help="interpreter for the server venvs: a version (3.13) or a path (a server's own python_version wins)",
    )
    p.add_argument(
        "--pin-mode", choices=PIN_MODES, help="how image pins are applied (default: GYM_RUNTIME_PIN_MODE or auto)"
    )
    p.add_argument("--jobs", type=int, default=None, help="parallel builds (default: CPU count)")
    p.add_argument("--json", action="store_true", help="print the plan and results as JSON")
    p.set_defaults(func=run)


def _signals(cancel: threading.Event) -> dict[int, Any]:
    old: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            old[sig] = signal.signal(sig, lambda *_: cancel.set())
    return old


def run(args: argparse.Namespace) -> int:
    from gym_runtime.config import build_config
    from gym_runtime.gym_release import choose_release
    from gym_runtime.inherited import normalise
    from gym_runtime.package import load_package
    from gym_runtime.venvs import build_venvs, plan_venvs
    from gym_runtime.venvs.record import record_build

    for note in normalise():  # builds run uv as up does: HOME, descriptors, signal state (gym_runtime/inherited.py)
        print(f"inherited: {note}", file=sys.stderr)
    settings = load_settings()
    if args.pin_mode:
        settings = settings.with_overrides(pin_mode=args.pin_mode)
    pkg = load_package(args.package)
    release = choose_release(pkg, settings)
    merged = build_config(pkg, args.overrides, policy_from_args(args), defaults=PLACEHOLDERS, release=release)
    started, names = time.time(), list(merged.instances)
    try:
        plan = plan_venvs(merged, settings, python=args.python)
    except BuildError as e:
        record_build(settings.home, names, started, error=e)
        raise
    if not args.json:
        print(release.describe(), file=sys.stderr)
        print(
            f"plan: {len(plan.venvs)} venv(s) for {len(plan.by_instance)} server(s); pin mode {plan.pin_mode}; "
            f"uv {plan.uv_version}",
            file=sys.stderr,
        )
        for note in plan.notes:
            print(f"  note: {note}", file=sys.stderr)
        for vp in plan.venvs:
            for note in vp.notes:
                print(f"  {', '.join(vp.instances)}: {note}", file=sys.stderr)
    cancel = threading.Event()
    old = _signals(cancel)
    try:
        venvs = build_venvs(plan, settings, progress=not args.json, cancel=cancel, max_workers=args.jobs)
    except BuildError as e:
        record_build(settings.home, names, started, error=e)  # what `gym-runtime logs` reads
        raise
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    record_build(settings.home, names, started, venvs=venvs)
    if args.json:
        out = {
            "gym_release": release.to_dict(),
            "plan": plan.to_dict(),
            **venvs.to_dict(),
            "servers": {n: venvs.for_instance(n).to_dict() for n in plan.by_instance},
        }
        print(json.dumps(out, indent=2))
        return 0
    for name in plan.by_instance:
        v = venvs.for_instance(name)
        vp = plan.for_instance(name)
        status = "reused" if v.reused else f"{v.status.split(' (')[0]} in {v.seconds:.1f}s"
        print(f"{name}: {status}  {v.path}  (Python {vp.python.version})")
        for why in v.reasons:
            print(f"  changed: {why}")
        for w in v.warnings:
            print(f"  warning: {w}")
    print(f"{venvs.built} built, {len(venvs.venvs) - venvs.built} reused")
    return 0
