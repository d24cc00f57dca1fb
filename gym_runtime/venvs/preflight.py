"""Checks that run before any install, so an offline stage fails at once instead of hanging.

For venvs that get stage 2 (agents and resources servers of a wheels-format package, whose
``wheels/`` promises an offline-installable closure):

- two versions of one distribution vendored (``GR-BUILD-WHEELS-DUPLICATE``; when no file of it fits
  the interpreter at all, uv's tag diagnosis in stage 2 is the better report, case C12);
- a git or direct-URL requirement line (``GR-BUILD-NEEDS-NETWORK``, case C11), naming the line and
  the wheel in ``wheels/`` to use instead;
- an sdist in ``wheels/`` or a local path / editable requirement whose ``build-system.requires``
  has no wheel in ``wheels/`` (``GR-BUILD-SDIST-BACKEND``, case C10).

For every venv: a line of ``overrides.txt`` that is not a requirement (``GR-BUILD-OVERRIDE``, or
``GR-BUILD-NEEDS-NETWORK`` for a URL override of an offline venv; :mod:`gym_runtime.venvs.overrides`),
a line that is not a valid requirement (``GR-BUILD-REQUIREMENT``), and a local
path or editable line uv cannot install (``GR-BUILD-LOCAL-PATH``): it points at nothing, outside
the package, or at a directory that is not a Python project (no ``pyproject.toml``, ``setup.py``
or ``setup.cfg``). Lines pointing at the Gym SDK (``../..``) are not local paths: the pinned
``nemo-gym`` replaces them (:mod:`gym_runtime.package.requirements`). The checks of
one install file (:func:`source_checks`) are also what ``gym-runtime validate`` reports for each
server of a package (:func:`package_checks`), so a package that cannot build offline is invalid.

Hash mode: a requirements file with ``--hash`` turns it on (case C16); then each
installed pin needs a file in ``wheels/`` to hash (``GR-BUILD-HASH-PIN``), a hashed ``name==version``
line whose file in ``wheels/`` has another sha256 fails here (``GR-BUILD-HASH``: uv may serve a rebuilt
wheel's old bytes from its cache and never notice), and URL / path /
editable lines are refused (``GR-BUILD-HASH-LINE``). All problems are raised together as one
:class:`~gym_runtime.errors.BuildError` with a violation per problem.
"""

from __future__ import annotations

import re
import tarfile
import tomllib
import zipfile
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from gym_runtime.errors import BuildError, Violation
from gym_runtime.package import Package
from gym_runtime.package.requirements import InstallSource, ReqLine, local_path, read_install_source
from gym_runtime.venvs.overrides import FILE_NAME as OVERRIDES_FILE
from gym_runtime.venvs.overrides import override_checks, read_overrides
from gym_runtime.venvs.tags import fits
from gym_runtime.venvs.venv_plan import STAGE2_TYPES, PoolEntry, VenvPlan, read_pool_entries

DEFAULT_BACKEND = ["setuptools>=40.8.0"]  # pip/uv's assumption for a project without [build-system]
PROJECT_FILES = ("pyproject.toml", "setup.py", "setup.cfg")  # what makes a directory installable
ARCHIVES = (".whl", ".tar.gz", ".zip", ".tar.bz2")


def _servers(vp: VenvPlan) -> str:
    return ", ".join(vp.instances)


def build_requires_of(path: Path) -> list[str] | None:
    """``build-system.requires`` of an sdist archive or a project directory (``None``: unreadable)."""
    text: str | None = None
    try:
        if path.is_dir():
            f = path / "pyproject.toml"
            text = f.read_text() if f.is_file() else ""
        elif path.name.endswith(".tar.gz"):
            with tarfile.open(path) as tf:
                m = next(
                    (m for m in tf.getmembers() if m.name.count("/") == 1 and m.name.endswith("/pyproject.toml")), None
                )
                text = tf.extractfile(m).read().decode() if m else ""  # type: ignore[union-attr]  # a regular member: extractfile opens it
        elif path.name.endswith(".zip"):
            with zipfile.ZipFile(path) as zf:
                n = next((n for n in zf.namelist() if n.count("/") == 1 and n.endswith("/pyproject.toml")), None)
                text = zf.read(n).decode() if n else ""
    except (OSError, tarfile.TarError, zipfile.BadZipFile, UnicodeDecodeError):
        return None
    if text is None:
        return None
    try:
        data = tomllib.loads(text) if text else {}
    except tomllib.TOMLDecodeError:
        return None
    return list(data.get("build-system", {}).get("requires", DEFAULT_BACKEND))


def missing_backend(requires: list[str], pool: Sequence[PoolEntry]) -> list[str]:
    """The build requirements no wheel in ``pool`` satisfies."""
    missing = []
    for r in requires:
        try:
            req = Requirement(r)
        except InvalidRequirement:
            missing.append(r)
            continue
        name = canonicalize_name(req.name)
        if not any(
            f.is_wheel and f.name == name and req.specifier.contains(Version(f.version), prereleases=True) for f in pool
        ):
            missing.append(r)
    return missing


def source_checks(source: InstallSource, rel_file: str, pool: Sequence[PoolEntry], *, offline: bool) -> list[Violation]:
    """What an install file's text and the pool's file names tell without installing anything.

    Always: lines that are not valid requirements (``GR-BUILD-REQUIREMENT``). When the server
    installs offline from ``wheels/`` (``offline``): git / direct-URL lines (``GR-BUILD-NEEDS-NETWORK``,
    case C11) and local path / editable projects whose ``build-system.requires`` has no wheel in
    ``pool`` (``GR-BUILD-SDIST-BACKEND``, case C10 variant b). Shared by the build's preflight and
    ``gym-runtime validate`` (:func:`package_checks`); ``rel_file`` names the file in violations.
    """
    out: list[Violation] = []
    for ln in source.lines:
        if ln.error:
            out.append(
                Violation(
                    "GR-BUILD-REQUIREMENT",
                    f"`{ln.text}` is not a valid requirement: {ln.error}",
                    file=rel_file,
                    key=f"line {ln.lineno}",
                    hint="write a PEP 508 requirement "
                    "(`name[extras]>=version`, `name @ URL`), a local path, or a pip option line",
                )
            )
        elif problem := local_path_problem(source, ln):
            out.append(
                Violation(
                    "GR-BUILD-LOCAL-PATH",
                    f"`{ln.text}` {problem}",
                    file=rel_file,
                    key=f"line {ln.lineno}",
                    hint="ship the project inside the package and point at "
                    "it relative to the server directory, require it by name (an index or wheels/), "
                    "or point at the Gym SDK with `-e nemo-gym[dev] @ ../../` (installed as the "
                    "pinned nemo-gym)",
                )
            )
    if not offline:
        return out
    for ln in source.lines:
        if ln.kind in ("url", "vcs"):
            have = [f for f in pool if ln.name and f.name == ln.name]
            use = (
                f"wheels/ has {have[0].path.name}: use `{ln.name}=={have[0].version}`"
                if have
                else f"vendor a wheel for {ln.name or 'it'} into wheels/ and require it by version"
            )
            out.append(
                Violation(
                    "GR-BUILD-NEEDS-NETWORK",
                    f"`{ln.text}` needs network ({ln.kind} requirement), "
                    "but this package installs offline from wheels/",
                    file=rel_file,
                    key=f"line {ln.lineno}",
                    hint=use,
                )
            )
    for ln in source.lines:
        if ln.kind in ("path", "editable") and ln.target and not ln.gym_sdk and not local_path_problem(source, ln):
            p = _resolve(source, ln)
            out += _backend_check(
                f"`{ln.text}` ({source.where(ln)}) is a local project",
                p,
                rel_file,
                ln.name,
                pool,
                key=f"line {ln.lineno}",
            )
    return out


def _resolve(source: InstallSource, ln: ReqLine) -> Path:
    p = Path(local_path(ln.target or "")).expanduser()
    return p if p.is_absolute() else (source.file.parent / p).resolve()


def local_path_problem(source: InstallSource, ln: ReqLine) -> str | None:
    """Why uv cannot install local path / editable line ``ln`` of ``source`` (``None``: it can, or
    the line is no local path). The package root is two levels above the server directory
    (``{server_type}/{implementation}/``); a path must stay inside it, since nothing outside
    travels with the package."""
    if ln.kind not in ("path", "editable") or ln.gym_sdk or not ln.target or "://" in local_path(ln.target):
        return None
    path = _resolve(source, ln)
    root = source.file.parent.parent.parent.resolve()
    shown = ln.target if len(ln.target) < 60 else "its path"
    if path != root and root not in path.parents:
        return f"points outside the package ({shown} resolves to {path}), which does not travel with it"
    where = path.relative_to(root).as_posix() if path != root else "the package root"
    if not path.exists():
        return f"points at {where}, which does not exist in the package"
    if path.is_dir() and not any((path / f).is_file() for f in PROJECT_FILES):
        return f"points at {where}, a directory that is not a Python project (no {', '.join(PROJECT_FILES)})"
    if path.is_file() and not path.name.endswith(ARCHIVES):
        return f"points at {where}, a file that is neither a wheel nor an sdist"
    return None


def _backend_check(
    what: str, path: Path, file: str, name: str | None, pool: Sequence[PoolEntry], key: str | None = None
) -> list[Violation]:
    requires = build_requires_of(path)
    missing = missing_backend(requires, pool) if requires is not None else []
    if not missing:
        return []
    return [
        Violation(
            "GR-BUILD-SDIST-BACKEND",
            f"{what}; building it offline needs {', '.join(missing)}, which is not in wheels/",
            file=file,
            key=key,
            hint=f"ship a wheel for {name or path.name} in wheels/, or add the build backend's wheel "
            f"({', '.join(missing)}) to wheels/",
        )
    ]


def _offline_checks(vp: VenvPlan) -> list[Violation]:
    out: list[Violation] = []
    versions: dict[str, set[str]] = defaultdict(set)
    for f in vp.pool:
        versions[f.name].add(f.version)
    for name, vs in sorted(versions.items()):
        if len(vs) > 1 and any(fits(f.path.name, vp.python) for f in vp.pool_of(name)):
            files = ", ".join(f.path.name for f in vp.pool_of(name))
            out.append(
                Violation(
                    "GR-BUILD-WHEELS-DUPLICATE",
                    f"wheels/ vendors {len(vs)} versions of {name} "
                    f"({files}); the offline stage would install conflicting pins",
                    file="wheels/",
                    hint="keep one resolved version per distribution (`gym-runtime vendor` writes exactly one)",
                )
            )
    for f in vp.pool:
        if not f.is_wheel:
            out += _backend_check(f"wheels/{f.path.name} is a source distribution", f.path, "wheels/", f.name, vp.pool)
    return out


def package_checks(package: Package) -> list[Violation]:
    """:func:`source_checks` for every server directory of ``package``, for ``gym-runtime validate``:
    fast and offline (install files and ``wheels/`` file names are read, nothing is resolved or
    hashed). Agents and resources servers of a wheels format install offline (docs/architecture.md §5, stage 2).
    An install file that cannot be read or parsed is a ``GR-BUILD-INSTALL-FILE`` violation."""
    out: list[Violation] = []
    pool = read_pool_entries(package.wheels_dir)
    for (stype, impl), sdir in sorted(package.server_dirs.items()):
        rel = package.rel(sdir.install_file)
        try:
            source = read_install_source(sdir.install_file, server=f"{stype}/{impl}")
        except BuildError as e:
            out.append(Violation(e.code, e.message + (f": {e.cause}" if e.cause else ""), file=rel, hint=e.hint))
            continue
        offline = package.wheels_dir is not None and stype in STAGE2_TYPES
        out += source_checks(source, rel, pool, offline=offline)
        try:
            ov = read_overrides(source, server=f"{stype}/{impl}")
        except BuildError as e:
            out.append(
                Violation(
                    e.code,
                    e.message + (f": {e.cause}" if e.cause else ""),
                    file=package.rel(sdir.install_file.parent / OVERRIDES_FILE),
                    hint=e.hint,
                )
            )
            continue
        if ov is not None:
            out += override_checks(ov, package.rel(ov.file), offline=offline)
    return out


def _hash_checks(vp: VenvPlan) -> list[Violation]:
    out: list[Violation] = []
    for p in vp.pins:
        if p.as_constraint:
            continue
        if not any(f.version == p.version for f in vp.pool_of(p.name)):
            out.append(
                Violation(
                    "GR-BUILD-HASH-PIN",
                    f"{vp.rel_file} uses --hash, so every installed "
                    f"requirement needs a hash, but the injected pin {p.requirement} ({p.origin}) "
                    "has no file in wheels/ to hash",
                    file=vp.rel_file,
                    hint=f"ship {p.name}=={p.version} in wheels/, or set GYM_RUNTIME_PIN_MODE=none",
                )
            )
    for ln in vp.source.lines:
        m = re.match(r"^[^=<>!~;\s]+\s*==\s*([^\s;,]+)", ln.text)
        files = [f for f in vp.pool_of(ln.name) if m and f.version == m.group(1)] if ln.name and ln.hashes else []
        if files and not any(h.removeprefix("sha256:") == f.sha256 for f in files for h in ln.hashes):
            got = ", ".join(f"wheels/{f.path.name} (computed sha256:{f.sha256})" for f in files)
            out.append(
                Violation(
                    "GR-BUILD-HASH",
                    f"hash mismatch for {ln.name}: {got} does not match "
                    f"{vp.source.where(ln)} (expected {', '.join(ln.hashes)})",
                    file=vp.rel_file,
                    key=f"line {ln.lineno}",
                    hint="the file was rebuilt or replaced: update the "
                    f"--hash in {vp.rel_file}, or restore the original file",
                )
            )
        if ln.kind in ("url", "vcs", "path", "editable") and not ln.gym_sdk:
            out.append(
                Violation(
                    "GR-BUILD-HASH-LINE",
                    f"`{ln.text}` cannot be hash-checked ({ln.kind} "
                    "requirement), and the file uses --hash (require-hashes mode)",
                    file=vp.rel_file,
                    key=f"line {ln.lineno}",
                    hint="require it by name==version with a --hash, from an index or wheels/",
                )
            )
    return out


def preflight(plans: list[VenvPlan], package_format: str) -> None:
    """Run every check on every plan; raise one :class:`BuildError` listing all problems."""
    problems: list[tuple[VenvPlan, Violation]] = []
    for vp in plans:
        found = (_offline_checks(vp) if vp.stage2 else []) + source_checks(
            vp.source, vp.rel_file, vp.pool, offline=vp.stage2
        )
        found += _hash_checks(vp) if vp.hash_mode else []
        if vp.overrides is not None:
            found += override_checks(vp.overrides, vp.rel_overrides or OVERRIDES_FILE, offline=vp.stage2)
        problems += [(vp, v) for v in found]
    if not problems:
        return
    vp, first = problems[0]
    violations = [
        Violation(v.code, f"{_servers(p)}: {v.message}", file=v.file, key=v.key, hint=v.hint) for p, v in problems
    ]
    line = f"{first.file} {first.key}: " if first.key else ""
    msg = (
        f"{_servers(vp)}: {line}{first.message}"
        if len(problems) == 1
        else f"{len(problems)} problems would make the venv builds fail ({package_format} package)"
    )
    raise BuildError(
        msg,
        violations=violations if len(problems) > 1 else None,
        hint=first.hint
        if len(problems) == 1
        else "fix each problem (`gym-runtime validate PKG` lists them all without building), then run again",
        code=first.code if len(problems) == 1 else "GR-BUILD-PREFLIGHT",
        extra={
            "server": vp.instances[0],
            "servers": list(vp.instances),
            "stage": "preflight",
            "file": first.file,
            "key": first.key,
        },
    )
