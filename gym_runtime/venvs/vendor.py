"""``vendor``: build a complete ``wheels/`` closure for a target platform and Python.

The closure covers every server's install file (Gym's SDK line replaced by the pinned
``nemo-gym``) under every server's ``overrides.txt``, the image pins (``nemo-gym``, ``ray[default]``, ``openai``) and ``pip`` (needed to
seed a venv offline, NMP's two-stage dependency install). Resolution is uv's cross-platform
``uv pip compile --python-version X.Y --python-platform <arch>-manylinux_2_<glibc>``; files are
then taken from the old ``wheels/`` (kept as candidates, e.g. a fork build, case C09) or the
index, choosing for each ``name==version`` the wheel with the most specific tag the target
accepts (every manylinux tag up to the target glibc). ``wheels/`` is cleared first (in an
``adapter-wheels-v1`` package the wheels already there are the environment itself, so they are
kept as requirements and the closure is completed around them); at the end each distribution has
one version and every file's tags are checked against the target.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import httpx
from packaging.tags import compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename

from gym_runtime.config import MergedConfig
from gym_runtime.errors import BuildError
from gym_runtime.package.requirements import SDK_NAME, read_install_source
from gym_runtime.package.wheels import Target, incompatible_wheels, read_wheelhouse
from gym_runtime.settings import RuntimeSettings
from gym_runtime.venvs.index import default_index, project_files
from gym_runtime.venvs.overrides import read_overrides
from gym_runtime.venvs.uvrun import make_env, run_uv


@dataclass(frozen=True)
class Vendored:
    """One vendored file: distribution, version, file name, where it came from."""

    name: str
    version: str
    filename: str
    source: str


def _ordered_tags(target: Target) -> list[str]:
    plats = target.platform_tags()
    return [
        str(t)
        for t in [*cpython_tags(target.python, platforms=plats), *compatible_tags(target.python, platforms=plats)]
    ]


def _rank(filename: str, order: dict[str, int]) -> int | None:
    ranks = [order[str(t)] for t in parse_wheel_filename(filename)[3] if str(t) in order]
    return min(ranks) if ranks else None


def requirement_lines(merged: MergedConfig, settings: RuntimeSettings) -> tuple[list[str], list[str]]:
    """Every server's install lines (SDK line replaced) and ``pip``, plus the image pins as the
    venvs will get them: installed in full (mode ``gym``, or ``auto`` when some server uses the
    Gym SDK) or only as constraints (``auto`` otherwise: nothing drags nemo-gym, ray and openai
    into a closure whose servers never import them). The pins are those of the Gym release the
    environment runs (``merged.release``, :meth:`~gym_runtime.gym_release.GymRelease.pins`).
    Returns ``(requirements, constraints)``."""
    pinned = merged.release.pins(settings)[0] if merged.release is not None else settings.pins
    sdk = f"{SDK_NAME}=={pinned[SDK_NAME]}" if SDK_NAME in pinned else SDK_NAME
    lines: list[str] = []
    seen: set[Path] = set()
    uses_sdk = False
    for inst in merged.instances.values():
        f = inst.server_dir.install_file
        if f in seen:
            continue
        seen.add(f)
        src = read_install_source(f, server=inst.name)
        uses_sdk = uses_sdk or src.uses_gym_sdk
        for ln in src.lines:
            if ln.kind in ("url", "vcs", "path", "editable") and not ln.gym_sdk:
                raise BuildError(
                    f"{inst.name}: `{ln.text}` ({src.where(ln)}) cannot be vendored as a wheel from an index",
                    code="GR-VENDOR-LINE",
                    hint="require it by name==version",
                )
            if ln.kind != "option":
                text = ln.sdk_requirement(sdk) if ln.takes_sdk_pin else ln.text.split(" --hash")[0]
                lines.append(text if ln.kind != "include" else src.render(sdk).splitlines()[ln.lineno - 1])
    lines += _adapter_wheels(merged)
    pins = [] if settings.pin_mode == "none" else [f"{req}=={v}" for req, v in pinned.items()]
    if settings.pin_mode == "gym" or uses_sdk:
        return lines + pins + ["pip"], []
    return lines + ["pip"], [p.replace("[default]", "") for p in pins]


def _adapter_wheels(merged: MergedConfig) -> list[str]:
    """``name==version`` of every wheel already in an ``adapter-wheels-v1`` package's ``wheels/``: there
    the vendored environment (and e.g. its verifiers build) *is* the package's content, named by
    ``vf_env_id`` rather than by any install file and published nowhere, so its closure is completed
    around it instead of being cleared."""
    pkg = merged.package
    if pkg.format != "adapter-wheels-v1" or pkg.wheels_dir is None or not pkg.wheels_dir.is_dir():
        return []
    found = (parse_wheel_filename(w.name) for w in sorted(pkg.wheels_dir.glob("*.whl")))
    return [f"{name}=={version}" for name, version, _, _ in found]


def override_lines(merged: MergedConfig) -> list[str]:
    """Every server's ``overrides.txt`` lines (:mod:`gym_runtime.venvs.overrides`), for the one
    resolution of the closure: stage 1 and stage 2 install under them, so the vendored versions
    must be the ones they force (two servers overriding one distribution differently cannot
    share one ``wheels/``; uv says so)."""
    out: list[str] = []
    seen: set[Path] = set()
    for inst in merged.instances.values():
        f = inst.server_dir.install_file
        if f in seen:
            continue
        seen.add(f)
        ov = read_overrides(read_install_source(f, server=inst.name), server=inst.name)
        out += [t for t in (ov.requirements if ov else []) if t not in out]
    return out


def vendor(
    merged: MergedConfig, settings: RuntimeSettings, target: Target, *, wheels_dir: Path | None = None
) -> list[Vendored]:
    """Rebuild ``wheels_dir`` (default: the package's ``wheels/``); return what was vendored.

    Raises :class:`BuildError` (``GR-VENDOR-*``) when resolution fails, a file for the target
    cannot be found, or the result breaks a wheelhouse rule.
    """
    out_dir = wheels_dir or merged.package.root / "wheels"
    uv_env = make_env(settings.environ, settings.uv_cache_dir)
    index = default_index(uv_env.honoured)
    order = {t: i for i, t in enumerate(_ordered_tags(target))}
    with tempfile.TemporaryDirectory(prefix="gym-runtime-vendor-") as d:
        tmp = Path(d)
        old = tmp / "old"
        old.mkdir()
        if out_dir.is_dir():
            for f in out_dir.glob("*.whl"):
                shutil.copy2(f, old / f.name)
        reqs, constraints = requirement_lines(merged, settings)
        (tmp / "all.txt").write_text("\n".join(reqs) + "\n")
        (tmp / "constraints.txt").write_text("\n".join(constraints) + "\n")
        (tmp / "overrides.txt").write_text("\n".join(override_lines(merged)) + "\n")
        platform = f"{target.arch}-manylinux_{target.glibc[0]}_{target.glibc[1]}"
        log = settings.logs_dir / "vendor.log"
        res = run_uv(
            [
                "pip",
                "compile",
                "--no-header",
                "--no-annotate",
                "--no-python-downloads",
                "--python-version",
                f"{target.python[0]}.{target.python[1]}",
                "--python-platform",
                platform,
                "--only-binary",
                ":all:",
                "--find-links",
                str(old),
                "--constraint",
                str(tmp / "constraints.txt"),
                "--overrides",
                str(tmp / "overrides.txt"),
                str(tmp / "all.txt"),
                "-o",
                str(tmp / "resolved.txt"),
            ],
            env=uv_env.env,
            log=log,
            cwd=tmp,
        )
        if res.returncode != 0:
            raise BuildError(
                f"cannot resolve the closure for {target.describe()}",
                code="GR-VENDOR-RESOLVE",
                cause="\n".join(res.output.strip().splitlines()[-25:]) or None,
                log=log,
                hint="the image pins (GYM_RUNTIME_PIN_*) and the servers' requirements must be "
                "satisfiable together for the target Python",
            )
        pins = [
            ln.split(";")[0].strip()
            for ln in (tmp / "resolved.txt").read_text().splitlines()
            if "==" in ln and not ln.lstrip().startswith("#")
        ]
        staged = tmp / "new"
        staged.mkdir()
        done = [_fetch(p, old, index, order, staged, target) for p in pins]
        if out_dir.exists():
            shutil.rmtree(out_dir)
        shutil.copytree(staged, out_dir)
    wheels, violations = read_wheelhouse(out_dir, out_dir.parent)
    violations += incompatible_wheels(wheels, target, out_dir.parent)
    if violations:
        raise BuildError("the vendored closure breaks wheelhouse rules", violations=violations, code="GR-VENDOR-CHECK")
    return done


def _fetch(pin: str, old: Path, index: str, order: dict[str, int], dest: Path, target: Target) -> Vendored:
    name, _, version = pin.partition("==")
    name = canonicalize_name(name.split("[")[0])
    local = [
        f
        for f in old.glob("*.whl")
        if parse_wheel_filename(f.name)[0] == name
        and str(parse_wheel_filename(f.name)[1]) == version
        and _rank(f.name, order) is not None
    ]
    if local:
        kept = min(local, key=lambda f: _rank(f.name, order) or 0)
        shutil.copy2(kept, dest / kept.name)
        return Vendored(name, version, kept.name, "wheels/ (kept)")
    files = [
        f
        for f in project_files(index, name)
        if f.filename.endswith(".whl")
        and f.version == version
        and not f.yanked
        and _rank(f.filename, order) is not None
    ]
    if not files:
        raise BuildError(
            f"no wheel of {name}=={version} for {target.describe()} on {index}",
            code="GR-VENDOR-NO-WHEEL",
            hint="pick another version, or build the wheel for the target",
        )
    best = min(files, key=lambda f: _rank(f.filename, order) or 0)
    data = (
        Path(best.url.removeprefix("file://")).read_bytes()
        if best.url.startswith("file:")
        else httpx.get(best.url, timeout=120, follow_redirects=True).raise_for_status().content
    )
    if best.sha256 and hashlib.sha256(data).hexdigest() != best.sha256:
        raise BuildError(f"{best.filename}: sha256 differs from the index's", code="GR-VENDOR-HASH")
    (dest / best.filename).write_bytes(data)
    return Vendored(name, version, best.filename, index)
