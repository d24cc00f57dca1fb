"""``gym-runtime config PKG [KEY=VALUE ...]``: the merged, resolved configuration with secrets masked,
and for each server instance the secret keys it receives (names only, docs/architecture.md §4).
A value that holds no key is shown as it is, never masked: unset (``null``, ``''``) or, for a base URL
given without a key, ``policy_api_key: EMPTY`` (said in a comment), so ``****`` always means a key is set.

With ``GYM_RUNTIME_SERVER_ENV`` set, also the variables each server instance is passed (names only,
and whether each is set here; docs/architecture.md §7.1).

Says which Gym release the environment runs (``gym_release`` with ``--json``: ``GymRelease.to_dict()``;
a ``# gym release: ...`` comment otherwise). Also says, for each list a later file replaced whole (lists are never merged item by item,
docs/environment-packages.md), which file won and which it replaced (case C19), and prints the
config warnings (``GR-CONFIG-TRUTHY``...) on stderr. Per server instance it says where its block
came from (docs/environment-packages.md, "Composition"): the file that defined it, the template it
inherits and that template's file, or the composition step that generated it, and every key of it
that a file set over another file's value (``overridden``: the file in effect and the ones it replaced). Sandbox-provider
blocks are shown as ``up`` gives them on this host (``GYM_RUNTIME_SANDBOX_PROVIDER``), each change said.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from gym_runtime.cli.common import add_package_args, add_policy_args, policy_from_args, print_warnings

if TYPE_CHECKING:
    from gym_runtime.config.sources import Sources


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
    from gym_runtime.supervise import passthrough
    from gym_runtime.task_sandboxes.bringup import choose_providers

    settings = load_settings()
    pkg = load_package(args.package)
    release = choose_release(pkg, settings)
    policy = policy_from_args(args)  # a base URL without a key gets `EMPTY`, as at `up`
    merged = build_config(
        pkg, args.overrides, policy, defaults=policy.with_overrides(args.overrides).keyless_defaults(), release=release
    )
    passthrough.check(settings, merged.instances)
    passed = passthrough.describe(settings, merged.instances)
    providers: list[str] = []  # what `up` does to sandbox-provider blocks on this host (docs/runtime.md)
    choose_providers(merged, settings, providers.append)
    masked: list[str] = []
    data = merged.redacted(masked)
    replaced = list(merged.sources.replaced_lists.values())
    print_warnings(merged.warnings)
    if args.json:
        servers = [
            {
                "name": i.name,
                "server_type": i.server_type,
                "implementation": i.implementation,
                "server_dir": str(i.server_dir.path),
                "origin": i.server_dir.origin,
                "source": i.source,
                **provenance(merged.sources, i.name),
                "secrets": merged.secrets.keys_for(i.name, merged.data),
                "passed_env": passed[i.name],
            }
            for i in merged.instances.values()
        ]
        print(
            json.dumps(
                {
                    "config": data,
                    "gym_release": release.to_dict(),
                    "servers": servers,
                    "masked": masked,
                    "replaced_lists": [r.to_dict() for r in replaced],
                    "overridden": [r.to_dict() for r in merged.sources.overridden.values()],
                    "warnings": [w.to_dict() for w in merged.warnings],
                    "sandbox_providers": providers,
                },
                indent=2,
            )
        )
    else:
        print(merged.to_yaml(), end="")
        print("# " + release.describe())
        if merged.sources.of("policy_api_key") == "default":  # the keyless default, shown as it is (redact.py)
            print(
                f"# policy_api_key: no key given, so {KEYLESS_API_KEY} (what OpenAI clients send to an endpoint "
                "without a key); pass --policy-api-key-env VAR to send one"
            )
        if masked:
            print("# masked secrets: " + ", ".join(masked))
        for name, inst in merged.instances.items():
            print(f"# {name} receives: " + (", ".join(merged.secrets.keys_for(name, merged.data)) or "no secrets"))
            prov = provenance(merged.sources, name)
            if prov["inherits"] or prov["overridden"] or "generated" in prov:
                print(f"# {name}: {describe(prov, inst.source)}")
            if passed[name]:
                print(f"# {name} is passed (GYM_RUNTIME_SERVER_ENV): {passthrough.summary(passed[name])}")
        for r in replaced:
            print(
                f"# list {r.key}: the list from {r.winner} is in effect; it replaced the list from "
                f"{', then '.join(r.replaced)} (a later file replaces a list, it never adds to it)"
            )
        for note in providers:
            print(f"# {note}")
    return 0


def provenance(sources: Sources, name: str) -> dict[str, Any]:
    """Where instance ``name``'s block came from: ``inherits`` (``[{"key", "template", "file"}]``,
    every block under it that took a template), ``generated`` (the composition step that made it,
    when one did) and ``overridden`` (``[{"key", "winner", "replaced"}]``: values and lists a file
    set over another file's)."""

    def mine(key: str) -> bool:
        return key == name or key.startswith((name + ".", name + "["))

    out: dict[str, Any] = {
        "inherits": [{"key": k, "template": t, "file": f} for k, (t, f) in sources.inherits.items() if mine(k)],
        "overridden": [
            r.to_dict() for table in (sources.overridden, sources.replaced_lists) for k, r in table.items() if mine(k)
        ],
    }
    origin = sources.of(name) or ""
    if origin.startswith("generated: "):
        out["generated"] = origin.removeprefix("generated: ")
    return out


def describe(prov: dict[str, Any], source: str | None) -> str:
    """One line for a human from :func:`provenance`."""
    parts = [f"generated ({prov['generated']})" if "generated" in prov else f"from {source}"]
    parts += [f"{i['key']} inherits {i['template']} ({i['file']})" for i in prov["inherits"]]
    parts += [f"{o['key']}: {o['winner']} won over {', '.join(o['replaced'])}" for o in prov["overridden"]]
    return "; ".join(parts)
