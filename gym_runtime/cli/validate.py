"""``gym-runtime validate PKG``: every package rule, one line per violation, machine-readable with --json.

Beyond the layout (docs/architecture.md §3) it checks what no packager validator does: wheel tags against
a target (``--platform linux/amd64 --python 3.13``), the configuration (merge, server
instances, references), and what the venv builder's preflight knows statically about each
server's install file (:func:`gym_runtime.venvs.preflight.package_checks`: unparseable files and
lines; in a wheels format, URL / git lines and local projects that cannot install offline, cases
C10b, C11). With ``--platform --python`` and a wheels format, also the proof stage 2 runs before
any install: ``wheels/`` alone holds each agent's and resources server's whole closure for that
target (uv's resolver, offline; :func:`gym_runtime.venvs.closure.package_proof`); nothing is built
or downloaded. Policy values the job supplies at start (``policy_base_url`` etc.) are filled with
placeholders when neither the package nor the flags give them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gym_runtime.cli.common import add_package_args, add_policy_args, policy_from_args, print_warnings
from gym_runtime.errors import EXIT_INVALID, EXIT_OK, GymRuntimeError, PackageInvalidError, UsageError, Violation

if TYPE_CHECKING:
    from gym_runtime.config import MergedConfig

PLACEHOLDERS = {
    "policy_base_url": "http://127.0.0.1:8000/v1",
    "policy_api_key": "placeholder",
    "policy_model_name": "placeholder",
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="check an environment package against every rule")
    add_package_args(p)
    add_policy_args(p)
    p.add_argument(
        "--platform",
        choices=["linux/amd64", "linux/arm64"],
        help="also check every vendored wheel installs on this platform",
    )
    p.add_argument(
        "--python",
        default=None,
        help="the job's interpreter (a version or a path), checked as `build` "
        "would use it; with --platform, the target's Python version instead (default 3.13)",
    )
    p.add_argument(
        "--glibc",
        default=None,
        help="target glibc for --platform (default 2.36: Debian 12 and newer, the runtime image included)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="also print a failure as JSON on stdout: "
        '{"valid": false, "format": ..., "name": ..., "error": {"code", "message", "violations", "hint"}} '
        "(the error block stays on stderr; success always prints "
        '{"valid": true, "format": ..., "name": ...})',
    )
    p.set_defaults(func=run)


def collect(args: argparse.Namespace) -> tuple[dict, list[Violation]]:
    """Run every check; return the summary fields and all violations (never raises for bad input)."""
    from gym_runtime.config import build_config
    from gym_runtime.gym_release import choose_release
    from gym_runtime.gym_release.imports import check_imports, skipped_note
    from gym_runtime.package import check_package, parse_target
    from gym_runtime.package.wheels import metadata_mismatches
    from gym_runtime.settings import load_settings
    from gym_runtime.venvs.closure import package_proof
    from gym_runtime.venvs.index_options import package_index_notes
    from gym_runtime.venvs.preflight import package_checks
    from gym_runtime.venvs.python_choice import python_problems, target_python_problems

    target = None
    if args.platform:
        try:
            target = parse_target(args.platform, args.python or "3.13", args.glibc)
        except ValueError as e:
            raise UsageError(str(e)) from None
    settings = load_settings()
    pkg, violations = check_package(args.package, target)
    summary: dict = {"format": pkg.format if pkg else None, "name": pkg.name if pkg else None}
    if pkg is not None:
        violations += package_checks(pkg) + metadata_mismatches(pkg.wheels, pkg.root)
    release = None
    if pkg is not None:
        try:
            release = choose_release(pkg, settings)
            summary["release"] = release
        except GymRuntimeError as e:  # GR-SDK-SKEW: the vendored SDK and the pin disagree
            violations += _violations_of(e)
    if pkg is not None and release is not None and not any(v.code.startswith("GR-PKG-CONFIG") for v in violations):
        try:
            merged = build_config(pkg, args.overrides, policy_from_args(args), defaults=PLACEHOLDERS, release=release)
            from gym_runtime.package.odd_names import name_warnings
            from gym_runtime.package.sqlite_wal import wal_warnings

            trees = _package_trees(merged)
            summary["warnings"] = (
                merged.warnings
                + wal_warnings(pkg.root, trees)
                + name_warnings(pkg.root, trees)
                + package_index_notes(pkg)
            )
            # what `build` would refuse before any install: the SDK's imports, each server's Python
            found, source, checked = check_imports(pkg, release)
            violations += found
            if not checked:
                summary["notes"] = [skipped_note(source)]
            violations += (
                target_python_problems(merged, target.python)
                if target is not None
                else python_problems(merged, settings, args.python)
            )
            if target is not None and not any((v.file or "").startswith("wheels") for v in violations):
                # the proof stage 2 runs first, for the target (a broken wheels/ is reported above)
                violations += package_proof(merged, settings, target)
        except GymRuntimeError as e:
            violations += _violations_of(e)
    return summary, violations


def _package_trees(merged: MergedConfig) -> list[tuple[str, Path]]:
    """``(instance names joined by ',', tree)`` for each server tree of the package the config runs."""
    trees: dict[Path, list[str]] = {}
    for inst in merged.instances.values():
        if inst.server_dir.origin == "package":
            trees.setdefault(Path(inst.server_dir.path), []).append(inst.name)
    return [(",".join(names), tree) for tree, names in trees.items()]


def _violations_of(e: GymRuntimeError) -> list[Violation]:
    return e.violations or [Violation(e.code, e.message, hint=e.hint)]


def run(args: argparse.Namespace) -> int:
    """Print the result; returns 0 (valid) or 1 (invalid). A failure is the error block on stderr
    and, with ``--json``, ``{"valid": false, "format", "name", "error": {...}}`` on stdout: the error
    object every command prints (``GymRuntimeError.to_dict``, README "Exit codes")."""
    summary, violations = collect(args)
    warnings = summary.pop("warnings", [])
    notes = summary.pop("notes", [])
    print_warnings(warnings)
    release = summary.pop("release", None)
    if release is not None:
        summary["gym_release"] = release.to_dict()
        if not args.json:
            print(release.describe(), file=sys.stderr)
    if not args.json:
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
    if not violations:
        print(
            json.dumps(
                {
                    "valid": True,
                    "format": summary["format"],
                    "name": summary["name"],
                    **({"gym_release": summary["gym_release"]} if release is not None else {}),
                    **({"notes": notes} if notes else {}),
                    **({"warnings": [w.to_dict() for w in warnings]} if warnings else {}),
                }
            )
        )
        return EXIT_OK
    err = PackageInvalidError(
        f"environment package {args.package} is invalid",
        violations=violations,
        hint="fix each problem, then run `gym-runtime validate` again",
    )
    if args.json:
        print(json.dumps({"valid": False, **summary, "error": err.to_dict()}, indent=2))
    print(err.render(), file=sys.stderr)
    return EXIT_INVALID
