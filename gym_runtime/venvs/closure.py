"""Prove, offline, that ``wheels/`` holds a server's whole closure (wheels formats, docs/architecture.md §5).

Stage 2 installs the vendored closure with the index off. Run after stage 1, a gap in
``wheels/`` hides behind what stage 1 already took from the index (the build passes while the
package could never start offline), and with no index stage 1 fails first with a misleading
error. So before either install stage, uv's own resolver answers the question on ``wheels/``
alone: ``uv pip compile --no-index --offline --find-links wheels/`` of the server's install file
and the injected pins under its ``overrides.txt``, for the venv's interpreter (a build) or for ``--python-version`` /
``--python-platform`` (``gym-runtime validate --platform --python``, nothing is built).

When uv says no, the report names the project missing (or whose versions or tags do not fit), the
chain that needs it (``example_arithmetic -> uvicorn -> h11``, from the ``Requires-Dist`` of the
vendored wheels, markers evaluated for the target) and the fix (``gym-runtime vendor``).
"""

from __future__ import annotations

import re
import tempfile
import threading
import zipfile
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from packaging.metadata import Metadata
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from gym_runtime.config import MergedConfig, ServerInstance
from gym_runtime.errors import Violation
from gym_runtime.package.requirements import SDK_NAME, InstallSource, read_install_source
from gym_runtime.package.wheels import Target
from gym_runtime.settings import RuntimeSettings
from gym_runtime.venvs.overrides import Overrides, read_overrides
from gym_runtime.venvs.uvrun import UvResult, make_env, run_uv

_NAME = r"`?([A-Za-z0-9][A-Za-z0-9._\-]*)(?:\[[^\]]*\])?`?"
_ARCH = {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}


@dataclass(frozen=True)
class ClosureTarget:
    """What the closure must install on: ``python`` (``3.13``), ``platform`` (``linux/amd64``),
    and how uv is told: ``interpreter`` (a build: the venv's own Python) or ``uv_platform``
    (``x86_64-manylinux_2_36``, validate)."""

    python: str
    platform: str
    interpreter: Path | None = None
    uv_platform: str | None = None

    def uv_args(self) -> list[str]:
        if self.interpreter is not None:
            return ["--python", str(self.interpreter)]
        return ["--python-version", self.python, "--python-platform", str(self.uv_platform)]

    def markers(self) -> dict[str, str]:
        """PEP 508 marker values of the target (for following ``Requires-Dist`` lines)."""
        machine = next((m for m, p in _ARCH.items() if p == self.platform), "x86_64")
        return {
            "python_version": self.python,
            "python_full_version": f"{self.python}.0",
            "os_name": "posix",
            "sys_platform": "linux",
            "platform_system": "Linux",
            "platform_machine": machine,
            "implementation_name": "cpython",
            "platform_python_implementation": "CPython",
            "extra": "",
        }


def platform_of(machine: str) -> str:
    """``linux/amd64`` / ``linux/arm64`` for a machine name (``platform.machine()``)."""
    return _ARCH.get(machine, f"linux/{machine}")


@dataclass(frozen=True)
class ClosureGap:
    """Why ``wheels/`` is not a closure: ``project`` (canonical name), ``what`` (``missing``,
    ``no fitting version`` or ``no wheel for the target``), ``chain`` (root -> ... -> project)."""

    project: str
    what: str
    chain: tuple[str, ...] = field(default_factory=tuple)

    def describe(self, pool_versions: str) -> str:
        via = f" (needed by {' -> '.join(self.chain)})" if len(self.chain) > 1 else ""
        have = "" if self.what == "missing" else f"; wheels/ has {self.project} {pool_versions}"
        return f"{self.project} is {self.what} in wheels/{via}{have}"


def proof_text(source: InstallSource, sdk_replacement: str) -> str:
    """The install file as uv installs it (:meth:`InstallSource.render`), without option lines
    (index settings: the proof has no index) and ``--hash`` options (nothing is downloaded)."""
    lines = source.render(sdk_replacement).splitlines()
    for ln in source.lines:
        if ln.kind == "option":
            lines[ln.lineno - 1] = ""
        elif ln.hashes:
            lines[ln.lineno - 1] = re.sub(r"\s+--hash[=\s:]+\S+", "", lines[ln.lineno - 1])
    return "\n".join(lines) + "\n"


def roots_of(source: InstallSource, pins: Iterable[tuple[str, bool]]) -> list[str]:
    """The distributions the install file and the installed pins ask for (where chains start)."""
    names = [SDK_NAME if ln.gym_sdk else ln.name for ln in source.lines if ln.name or ln.gym_sdk]
    return [n for n in names if n] + [Requirement(r).name for r, only in pins if not only]


def nothing_to_prove(source: InstallSource, pins: Iterable[tuple[str, bool]]) -> bool:
    """True when the install file requests nothing and no pin is installed: the closure is empty,
    so no resolver needs to run."""
    return not any(ln.kind != "option" for ln in source.lines) and all(only for _, only in pins)


def write_inputs(directory: Path, rendered: str, pins: Iterable[tuple[str, bool]]) -> list[str]:
    """Write the install file text and the injected pins (``(requirement, constraint only)``) for
    the proof into ``directory``; returns the file arguments for ``uv pip compile``."""
    directory.mkdir(parents=True, exist_ok=True)
    req = directory / "closure-requirements.txt"
    installed = [r for r, only in pins if not only]
    req.write_text(rendered.rstrip("\n") + "\n" + "".join(f"{r}\n" for r in installed))
    args = [str(req)]
    constraints = [r.replace("[default]", "") for r, only in pins if only]
    if constraints:
        (directory / "closure-constraints.txt").write_text("".join(f"{c}\n" for c in constraints))
        args += ["--constraint", str(directory / "closure-constraints.txt")]
    return args


def override_args(overrides: Overrides | None, directory: Path) -> list[str]:
    """Write ``overrides`` (the server's ``overrides.txt``) into ``directory`` for the proof; the
    ``uv pip compile`` arguments that pass it (``[]``: none). Stage 2 installs under the same
    overrides, so the proof must resolve under them too."""
    if overrides is None:
        return []
    path = directory / "closure-overrides.txt"
    path.write_text(overrides.render())
    return ["--overrides", str(path)]


def prove(
    files: list[str],
    wheels_dir: Path,
    target: ClosureTarget,
    *,
    env: dict[str, str],
    log: Path,
    cwd: Path,
    cancel: threading.Event | None = None,
) -> UvResult:
    """``uv pip compile`` of ``files`` against ``wheels_dir`` only (no index, offline, no uv config);
    the result's ``returncode`` is 0 when the closure is complete."""
    env = {k: v for k, v in env.items() if k != "UV_FIND_LINKS"}
    args = [
        "pip",
        "compile",
        "--no-index",
        "--offline",
        "--no-config",
        "--no-python-downloads",
        "--find-links",
        str(wheels_dir),
        *target.uv_args(),
        "--no-header",
        "--no-annotate",
        "--output-file",
        "/dev/null",
        *files,
    ]
    return run_uv(
        args,
        env=env,
        log=log,
        cwd=cwd,
        cancel=cancel,
        header=f"closure check: does wheels/ alone satisfy the install file for CPython {target.python} "
        f"{target.platform}? (no index, offline)\n",
    )


def gap(output: str, wheels_dir: Path, roots: list[str], root_label: str, target: ClosureTarget) -> ClosureGap | None:
    """The first gap uv's error names (None when it names none), with the chain that needs it."""
    m = re.search(_NAME + r" was not found in the provided package locations", output)
    what = "missing"
    if m is None:
        m = re.search(_NAME + r"(?:==\S+)? has no wheels with a matching", output) or re.search(
            _NAME + r"(?:==\S+)? has no (?:usable )?wheels?", output
        )
        what = "present but has no wheel for the target"
    if m is None:
        m = re.search(r"(?:only|no versions of|there is no version of) " + _NAME, output)
        what = "present but in no fitting version"
    if m is None:
        return None
    project = canonicalize_name(m.group(1))
    return ClosureGap(project, what, chain(wheels_dir, roots, project, root_label, target))


def _requires(wheel: Path) -> list[Requirement]:
    try:
        with zipfile.ZipFile(wheel) as z:
            name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
            return list(Metadata.from_email(z.read(name), validate=False).requires_dist or [])
    except (OSError, zipfile.BadZipFile, StopIteration, ValueError, InvalidRequirement):
        return []


def chain(wheels_dir: Path, roots: list[str], project: str, root_label: str, target: ClosureTarget) -> tuple[str, ...]:
    """The shortest ``root_label -> root -> ... -> project`` path through the ``Requires-Dist`` of
    the wheels in ``wheels_dir`` (markers evaluated for ``target``); ``(root_label, project)`` when
    ``project`` is a root itself or no path is found."""
    deps: dict[str, list[str]] = {}
    for w in sorted(wheels_dir.glob("*.whl")):
        try:
            name = canonicalize_name(parse_wheel_filename(w.name)[0])
        except ValueError:
            continue
        env = target.markers()
        deps[name] = [canonicalize_name(r.name) for r in _requires(w) if r.marker is None or r.marker.evaluate(env)]
    start = [canonicalize_name(r) for r in roots]
    seen: dict[str, tuple[str, ...]] = {r: (r,) for r in start}
    queue: deque[str] = deque(start)
    while queue:
        node = queue.popleft()
        if node == project:
            return (root_label, *seen[node])
        for nxt in deps.get(node, []):
            if nxt not in seen:
                seen[nxt] = (*seen[node], nxt)
                queue.append(nxt)
    return (root_label, project)


def package_proof(merged: MergedConfig, settings: RuntimeSettings, target: Target) -> list[Violation]:
    """``gym-runtime validate --platform --python``: the proof of stage 2 for every agent and
    resources server of a wheels-format package, for ``target`` (nothing is built or fetched).
    One ``GR-BUILD-CLOSURE`` violation per install file whose closure ``wheels/`` does not hold."""
    from gym_runtime.venvs.plan import STAGE2_TYPES, pins_for, sdk_line

    pkg = merged.package
    if pkg.format == "native-v1" or pkg.wheels_dir is None or not pkg.wheels_dir.is_dir():
        return []
    uv_env = make_env(settings.environ, settings.uv_cache_dir)
    py = f"{target.python[0]}.{target.python[1]}"
    goal = ClosureTarget(
        py, target.platform, uv_platform=f"{target.arch}-manylinux_{target.glibc[0]}_{target.glibc[1]}"
    )
    groups: dict[Path, list[ServerInstance]] = {}
    for inst in merged.instances.values():
        if inst.server_type in STAGE2_TYPES:
            groups.setdefault(inst.server_dir.install_file, []).append(inst)
    out: list[Violation] = []
    with tempfile.TemporaryDirectory(prefix="gym-runtime-closure-") as d:
        for i, (file, insts) in enumerate(groups.items()):
            names = ", ".join(x.name for x in insts)
            source = read_install_source(file, server=names)
            pins = [(p.requirement, p.as_constraint) for p in pins_for(settings, settings.pin_mode, source)]
            if nothing_to_prove(source, pins):
                continue
            files = write_inputs(Path(d) / str(i), proof_text(source, sdk_line(settings)), pins)
            files += override_args(read_overrides(source, server=names), Path(d) / str(i))
            res = prove(
                files,
                pkg.wheels_dir,
                goal,
                env=uv_env.env,
                cwd=Path(d),
                log=settings.logs_dir / "validate" / f"{insts[0].name}.closure.log",
            )
            if res.returncode == 0:
                continue
            rel = (
                pkg.rel(file)
                if insts[0].server_dir.origin == "package"
                else f"servers/{insts[0].server_type}/{insts[0].implementation}/{file.name} (built-in)"
            )
            found = gap(res.output, pkg.wheels_dir, roots_of(source, pins), insts[0].implementation, goal)
            what = (
                found.describe(_versions(pkg.wheels_dir, found.project))
                if found
                else "uv cannot resolve it from wheels/ alone: " + _uv_cause(res.output)
            )
            out.append(
                Violation(
                    "GR-BUILD-CLOSURE",
                    f"{names}: wheels/ does not hold the whole closure for {target.describe()}: {what}",
                    file=rel,
                    hint=f"vendor the closure: `gym-runtime vendor {pkg.root} --platform {target.platform}"
                    f" --python {py}`"
                    + (f" (or add a wheel of {found.project} for the target to wheels/)" if found else ""),
                )
            )
    return out


def _versions(wheels_dir: Path, project: str) -> str:
    found = sorted(
        {
            str(parse_wheel_filename(w.name)[1])
            for w in wheels_dir.glob("*.whl")
            if canonicalize_name(parse_wheel_filename(w.name)[0]) == project
        }
    )
    return ", ".join(found) or "none"


def _uv_cause(output: str) -> str:
    lines = [ln.strip() for ln in output.splitlines() if ln.strip().startswith(("cause:", "error:", "Because"))]
    return " ".join(lines[-2:]) or output.strip().splitlines()[-1]
