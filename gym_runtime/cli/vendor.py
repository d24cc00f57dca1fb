"""``gym-runtime vendor PKG --platform linux/amd64|linux/arm64 --python 3.13``: a complete wheels/ closure.

``--platform`` defaults to ``GYM_RUNTIME_VENDOR_PLATFORM`` (the runtime images set their own
architecture's, docs/container.md); with neither, the command is a usage error.

Clears ``wheels/`` (existing wheels stay candidates), resolves every server plus the image pins
and ``pip`` for the target, downloads one wheel per distribution, checks versions and tags, and
prints what it vendored (see :mod:`gym_runtime.venvs.vendor`).
"""

from __future__ import annotations

import argparse
import json

from gym_runtime.cli.common import add_package_args
from gym_runtime.cli.validate import PLACEHOLDERS
from gym_runtime.errors import UsageError
from gym_runtime.settings import VENDOR_PLATFORMS, load_settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("vendor", help="build a complete wheels/ closure for a target platform")
    add_package_args(p)
    p.add_argument(
        "--platform",
        choices=list(VENDOR_PLATFORMS),
        help="target platform (default: GYM_RUNTIME_VENDOR_PLATFORM, set in the runtime images)",
    )
    p.add_argument("--python", default="3.13", help="target Python (default 3.13)")
    p.add_argument(
        "--glibc", default=None, help="target glibc (default 2.36: Debian 12 and newer, the runtime image included)"
    )
    p.add_argument("--json", action="store_true", help="print the vendored files as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gym_runtime.config import PolicyValues, build_config
    from gym_runtime.gym_release import choose_release
    from gym_runtime.package import check_package, parse_target
    from gym_runtime.venvs.vendor import vendor

    settings = load_settings()
    platform = args.platform or settings.vendor_platform
    if platform is None:
        raise UsageError(
            "vendor needs a target platform: give --platform linux/amd64 or linux/arm64",
            hint="or set GYM_RUNTIME_VENDOR_PLATFORM (the runtime images set it to their own)",
        )
    try:
        target = parse_target(platform, args.python, args.glibc)
    except ValueError as e:
        raise UsageError(str(e)) from None
    pkg, _violations = check_package(args.package)  # wheels/ may be missing or stale: it is rebuilt
    if pkg is None:
        raise UsageError(f"{args.package} is not an environment package", hint="run `gym-runtime validate` first")
    merged = build_config(
        pkg, args.overrides, PolicyValues(), defaults=PLACEHOLDERS, release=choose_release(pkg, settings)
    )
    done = vendor(merged, settings, target)
    if args.json:
        print(json.dumps([d.__dict__ for d in done], indent=2))
    else:
        for d in done:
            print(f"{d.filename}  ({d.source})")
        print(f"{len(done)} wheels for {target.describe()} in {pkg.root / 'wheels'}")
    return 0
