"""``gym-runtime config PKG [KEY=VALUE ...]``: the merged, resolved configuration with secrets masked,
and for each server instance the secret keys it receives (names only, docs/architecture.md §4).
A value that holds no key is shown as it is, never masked: unset (``null``, ``''``) or, for a base URL
given without a key, ``policy_api_key: EMPTY`` (said in a comment), so ``****`` always means a key is set.

Says which Gym release the environment runs (``gym_release`` with ``--json``: ``GymRelease.to_dict()``;
a ``# gym release: ...`` comment otherwise). Also says, for each list a later file replaced whole (lists are never merged item by item,
docs/environment-packages.md), which file won and which it replaced (case C19), and prints the
config warnings (``GR-CONFIG-TRUTHY``...) on stderr.
"""

from __future__ import annotations

import argparse
import json

from gym_runtime.cli.common import add_package_args, add_policy_args, policy_from_args, print_warnings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("config", help="print the merged configuration (secrets masked)")
    add_package_args(p)
    add_policy_args(p)
    p.add_argument("--json", action="store_true", help="print JSON: config, server instances, masked keys")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gym_runtime.config import build_config
    from gym_runtime.config.redact import KEYLESS_API_KEY
    from gym_runtime.gym_release import choose_release
    from gym_runtime.package import load_package
    from gym_runtime.settings import load_settings

    pkg = load_package(args.package)
    release = choose_release(pkg, load_settings())
    policy = policy_from_args(args)  # a base URL without a key gets `EMPTY`, as at `up`
    merged = build_config(pkg, args.overrides, policy, defaults=policy.with_overrides(args.overrides).keyless_defaults(),
                          release=release)
    masked: list[str] = []
    data = merged.redacted(masked)
    replaced = list(merged.sources.replaced_lists.values())
    print_warnings(merged.warnings)
    if args.json:
        servers = [{"name": i.name, "server_type": i.server_type, "implementation": i.implementation,
                    "server_dir": str(i.server_dir.path), "origin": i.server_dir.origin, "source": i.source,
                    "secrets": merged.secrets.keys_for(i.name, merged.data)}
                   for i in merged.instances.values()]
        print(json.dumps({"config": data, "gym_release": release.to_dict(), "servers": servers, "masked": masked,
                          "replaced_lists": [r.to_dict() for r in replaced],
                          "warnings": [w.to_dict() for w in merged.warnings]}, indent=2))
    else:
        print(merged.to_yaml(), end="")
        print("# " + release.describe())
        if merged.sources.of("policy_api_key") == "default":  # the keyless default, shown as it is (redact.py)
            print(f"# policy_api_key: no key given, so {KEYLESS_API_KEY} (what OpenAI clients send to an endpoint "
                  "without a key); pass --policy-api-key-env VAR to send one")
        if masked:
            print("# masked secrets: " + ", ".join(masked))
        for name in merged.instances:
            print(f"# {name} receives: " + (", ".join(merged.secrets.keys_for(name, merged.data)) or "no secrets"))
        for r in replaced:
            print(f"# list {r.key}: the list from {r.winner} is in effect; it replaced the list from "
                  f"{', then '.join(r.replaced)} (a later file replaces a list, it never adds to it)")
    return 0
