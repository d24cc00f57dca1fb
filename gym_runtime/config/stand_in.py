"""What the profile standing in for a release of an unknown line cannot honour, refused before a build.

A release newer than every line the runtime knows (:attr:`~gym_runtime.gym_release.GymRelease.stand_in`:
0.8.0 while the newest known line is 0.7) runs under the newest profile, with the pins of its own
wheel. What NeMo Gym changed after 0.7.0 and that profile does not do is refused here, all at once,
in one ``GR-GYM-STAND-IN`` error naming each file and key and the fix (docs/runtime.md, "Gym releases"):

- a top-level ``sidecar:`` block (Gym runs an HTTP/2 PING sidecar and points model base URLs at it;
  the stand-in runs none, so the block would only reach the servers' config);
- a server tree's own ``.python-version`` that its config block does not match with a
  ``python_version`` (Gym bounds that server's interpreter by the file; the stand-in reads the key);
- a vendored ``nemo_gym`` wheel without a module the profile's servers are started through
  (``nemo_gym.server_utils`` and the server bases, moved under ``nemo_gym.server_runtime`` after 0.7.0).
"""

from __future__ import annotations

import zipfile
from typing import TYPE_CHECKING, Any

from gym_runtime.errors import UserError, Violation
from gym_runtime.known_releases import RELEASES

if TYPE_CHECKING:
    from gym_runtime.config.instances import ServerInstance
    from gym_runtime.config.sources import Sources
    from gym_runtime.gym_release.base import GymRelease
    from gym_runtime.package import Package

CODE = "GR-GYM-STAND-IN"


class StandInError(UserError):
    """A release of an unknown line asks for what the profile standing in for it cannot do (exit 1)."""

    code = CODE


def stand_in_problems(
    release: GymRelease, raw: dict[str, Any], sources: Sources, instances: dict[str, ServerInstance], package: Package
) -> list[Violation]:
    """One violation per thing the stand-in profile cannot honour (module doc); ``[]`` for a release
    of a known line. ``raw``: the merged config before interpolation."""
    if not release.stand_in:
        return []
    who = f"the {release.line} profile standing in for nemo-gym {release.version}"
    out: list[Violation] = []
    if "sidecar" in raw:
        out.append(
            Violation(
                CODE,
                f"a `sidecar:` block: nemo-gym {release.version} would run an HTTP/2 PING sidecar in front of the "
                f"model base URLs; {who} runs none",
                file=sources.of("sidecar"),
                key="sidecar",
                hint="remove the block (model calls then go to their base URLs directly)",
            )
        )
    for inst in instances.values():
        pv = inst.server_dir.path / ".python-version"
        if inst.server_dir.origin != "package" or not pv.is_file() or inst.config.get("python_version") is not None:
            continue
        wanted = next(iter(pv.read_text(errors="replace").split()), "")
        key = f"{inst.name}.{inst.server_type}.{inst.implementation}.python_version"
        out.append(
            Violation(
                CODE,
                f"server {inst.name} has its own .python-version ({wanted or 'empty'}): nemo-gym {release.version} "
                f"bounds its interpreter by it; {who} does not read the file",
                file=package.rel(pv),
                key=key,
                hint=f"set `{key}` to a Python version that meets {wanted or 'the file'} in the server's config, "
                "or remove the file",
            )
        )
    out += _moved_modules(release, package)
    return out


def _moved_modules(release: GymRelease, package: Package) -> list[Violation]:
    from gym_runtime.gym_release.choose import vendored_sdk

    wheel = vendored_sdk(package)
    if wheel is None:
        return []
    try:
        with zipfile.ZipFile(wheel.path) as z:
            names = set(z.namelist())
    except (OSError, zipfile.BadZipFile):
        return []
    missing = [
        m
        for m in release.preload_modules
        if f"{m.replace('.', '/')}.py" not in names and f"{m.replace('.', '/')}/__init__.py" not in names
    ]
    if not missing:
        return []
    return [
        Violation(
            CODE,
            f"nemo-gym {release.version} has no {', '.join(missing)}: the {release.line} profile starts its "
            "servers through these modules (NeMo Gym moved them under nemo_gym.server_runtime after 0.7.0)",
            file=f"wheels/{wheel.filename}",
            hint=f"run it with a gym-runtime that knows line {release.release_line}, or vendor nemo-gym "
            f"{RELEASES[-1].version} into wheels/ instead",
        )
    ]


def refuse_what_stand_in_cannot_honour(
    release: GymRelease, raw: dict[str, Any], sources: Sources, instances: dict[str, ServerInstance], package: Package
) -> None:
    """Raise :class:`StandInError` carrying every :func:`stand_in_problems` violation, if any."""
    problems = stand_in_problems(release, raw, sources, instances, package)
    if not problems:
        return
    raise StandInError(
        f"nemo-gym {release.version} is of release line {release.release_line}, which this runtime does not know; "
        f"the {release.line} profile stands in for it and cannot honour {len(problems)} thing"
        f"{'s' if len(problems) > 1 else ''} the package asks for",
        violations=problems,
        hint=f"fix each as its hint says, or run the package under a release this runtime knows (vendor "
        f"nemo-gym {RELEASES[-1].version} into wheels/ instead of {release.version}, or, without a vendored "
        f"wheel, set GYM_RUNTIME_PIN_NEMO_GYM={RELEASES[-1].version})",
    )
