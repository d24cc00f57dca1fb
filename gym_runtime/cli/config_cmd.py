"""``gym-runtime config PKG [KEY=VALUE ...]``: the merged, resolved configuration with secrets masked,
and for each server instance the secret keys it receives (names only, docs/architecture.md §4).
A value that holds no key is shown as it is, never masked: unset (``null``, ``''``) or, for a base URL
given without a key, ``policy_api_key: EMPTY`` (said in a comment), so ``****`` always means a key is set.

Also says, for each list a later file replaced whole (lists are never merged item by item,
docs/environment-packages.md), which file won and which it replaced (case C19), and prints the
config warnings (``GR-CONFIG-TRUTHY``...) on stderr. Sandbox-provider blocks are shown as ``up``
gives them on this host (``GYM_RUNTIME_SANDBOX_PROVIDER``), each change said.
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
    from gym_runtime.package import load_package
    from gym_runtime.settings import load_settings
    from gym_runtime.task_sandboxes.bringup import choose_providers

    pkg = load_package(args.package)
    policy = policy_from_args(args)  # a base URL without a key gets `EMPTY`, as at `up`
    merged = build_config(pkg, args.overrides, policy, defaults=policy.with_overrides(args.overrides).keyless_defaults())
    providers: list[str] = []  # what `up` does to sandbox-provider blocks on this host (docs/runtime.md)
    choose_providers(merged, load_settings(), providers.append)
    masked: list[str] = []
    data = merged.redacted(masked)
    replaced = list(merged.sources.replaced_lists.values())
    print_warnings(merged.warnings)
    if args.json:
        servers = [{"name": i.name, "server_type": i.server_type, "implementation": i.implementation,
                    "server_dir": str(i.server_dir.path), "origin": i.server_dir.origin, "source": i.source,
                    "secrets": merged.secrets.keys_for(i.name, merged.data)}
                   for i in merged.instances.values()]
        print(json.dumps({"config": data, "servers": servers, "masked": masked,
                          "replaced_lists": [r.to_dict() for r in replaced],
                          "warnings": [w.to_dict() for w in merged.warnings], "sandbox_providers": providers},
                         indent=2))
    else:
        print(merged.to_yaml(), end="")
        if merged.sources.of("policy_api_key") == "default":  # the keyless default, shown as it is (redact.py)
            print(f"# policy_api_key: no key given, so {KEYLESS_API_KEY} (what OpenAI clients send to an endpoint "
                  "without a key); pass --policy-api-key-env VAR to send one")
        if masked:
            print("# masked secrets: " + ", ".join(masked))
        for name in merged.instances:
            print(f"# {name} receives: " + (", ".join(merged.secrets.keys_for(name, merged.data)) or "no secrets"))
        for note in providers:
            print(f"# {note}")
        for r in replaced:
            print(f"# list {r.key}: the list from {r.winner} is in effect; it replaced the list from "
                  f"{', then '.join(r.replaced)} (a later file replaces a list, it never adds to it)")
    return 0
