"""``gym-runtime prune [--wait SECONDS] [--json]``: shrink the uv cache without racing a build.

Runs ``uv cache prune`` (unused entries only) while holding the cache's maintenance lock
exclusively (:func:`gym_runtime.venvs.maintenance.prune_cache`, case C18): every build (a daemon's
start, ``gym-runtime build``) holds that lock shared, so the prune waits for running builds and no
build starts while it runs. After ``--wait`` seconds (default 600) of running builds it gives up
with exit 3 naming the lock. Venvs and the bytecode store are left alone (the daemon keeps the
store bounded itself, docs/runtime.md "Bytecode store").
"""

from __future__ import annotations

import argparse
import json

from gym_runtime.errors import EXIT_OK, BuildError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "prune",
        help="remove unused entries from the uv cache, waiting for running builds",
        description="Run `uv cache prune` while holding the uv cache's maintenance lock: it waits for "
        "running builds (a start, a `build`) and never races one. Run the venv's own "
        "`gym-runtime` (e.g. `.venv/bin/gym-runtime prune`): a `uv run` holds uv's lock on the "
        "cache while its command runs.",
    )
    p.add_argument(
        "--wait",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="how long to wait for running builds before giving up (default 600)",
    )
    p.add_argument("--json", action="store_true", help='print {"pruned": true, "uv_cache": ...}')
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gym_runtime.settings import load_settings
    from gym_runtime.venvs.maintenance import prune_cache
    from gym_runtime.venvs.store import cache_lock_path

    settings = load_settings()
    lock = cache_lock_path(settings.uv_cache_dir)
    if not prune_cache(settings, wait_s=max(0.0, args.wait)):
        raise BuildError(
            f"the uv cache was not pruned: builds held it for {args.wait:g}s",
            code="GR-BUILD-CACHE-BUSY",
            cause=f"a build holds {lock} (a daemon starting, or `gym-runtime build`)",
            hint="run `gym-runtime prune` again when the builds are done, or give a longer --wait",
        )
    cache = str(lock.parent)
    print(json.dumps({"pruned": True, "uv_cache": cache}) if args.json else f"pruned the uv cache at {cache}")
    return EXIT_OK
