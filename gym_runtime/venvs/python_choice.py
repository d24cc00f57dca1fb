"""Which interpreter each server venv is built from, and the checks on that choice (docs/runtime.md, "Venvs").

Who asks, first wins: the server's own ``python_version``, the job's ``--python``, the config's
top-level ``python_version``, ``GYM_RUNTIME_PYTHON``. What the server needs: a built-in server the
runtime's own minimum (it runs gym-runtime's server kit); a package server whose install file uses
the Gym SDK the ``Requires-Python`` of the release the environment runs
(:attr:`~gym_runtime.gym_release.GymRelease.requires_python`: ``>=3.13.14`` for 0.5 and later);
a ``pyproject.toml`` server its ``requires-python`` as well. When nobody asked, a server gets the
runtime's own ``X.Y`` as before; when that does not meet what it needs, the interpreter
:func:`~gym_runtime.venvs.pythons.pick_python` chooses (the same one for every such server).
When somebody asked for one that does not meet it, the build stops before any install with
``GR-BUILD-PYTHON`` naming the server, the release, its ``Requires-Python``, the interpreters
found that would work and the fix.

Servers that use Ray share one Ray head, and Ray refuses a driver whose Python version differs
from the cluster's (Ray's ``_private/utils.py`` ``check_version_info``, patch level included):
:func:`ray_python_problems` reports two such servers on different Pythons (``GR-RAY-PYTHON``).
``validate`` and the plan (``build``, ``up``) run the same checks (:func:`python_problems`).
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

from packaging.specifiers import SpecifierSet

from gym_runtime.errors import BuildError, Violation
from gym_runtime.known_releases import RELEASES
from gym_runtime.package.requirements import InstallSource, read_install_source
from gym_runtime.venvs.pythons import Interpreter, find_python, pick_python

if TYPE_CHECKING:
    from gym_runtime.config import MergedConfig, ServerInstance
    from gym_runtime.ray.use import RayUse
    from gym_runtime.settings import RuntimeSettings

# The built-in servers run the runtime's own code (servers/_kit: pydantic models with `X | None`),
# so they need what gym-runtime needs: pyproject.toml's requires-python (a test keeps them equal).
BUILTIN_REQUIRES_PYTHON = ">=3.11"


def python_request(
    inst: ServerInstance, merged: MergedConfig, python: str | None, settings: RuntimeSettings
) -> tuple[str | None, str]:
    """``(request, origin)``: the interpreter asked for ``inst`` and who asked; ``(None, ...)`` when
    nobody did (the runtime's own ``X.Y`` is the default)."""
    key = f"{inst.name}.{inst.server_type}.{inst.implementation}.python_version"
    if inst.config.get("python_version") is not None:
        return str(inst.config["python_version"]), f"{merged.sources.of(key) or 'the config'} ({key})"
    if python:
        return python, "the job's --python"
    if merged.data.get("python_version") is not None:
        return str(merged.data["python_version"]), f"{merged.sources.of('python_version') or 'the config'}"
    if settings.python_explicit or settings.environ.get("GYM_RUNTIME_PYTHON"):
        return settings.python, "GYM_RUNTIME_PYTHON"
    return None, "the runtime's own Python version"


def python_requirement(
    inst: ServerInstance, source: InstallSource, rel_file: str, merged: MergedConfig
) -> tuple[SpecifierSet | None, str]:
    """``(specifier, who needs it)``: the Python versions ``inst`` runs on (``None``: no limit)."""
    spec, who = source.requires_python, f"{rel_file} ([project].requires-python)"
    if inst.server_dir.origin == "builtin":
        builtin = SpecifierSet(BUILTIN_REQUIRES_PYTHON)
        return (
            builtin & spec if spec is not None else builtin,
            f"the built-in server {inst.server_type}/{inst.implementation} (it runs gym-runtime's server kit)",
        )
    release = merged.release
    if release is not None and source.uses_gym_sdk:
        sdk = release.requires_python
        who = f"nemo-gym {release.version} (the Gym SDK release this environment runs; {rel_file} installs it)" + (
            f" and its [project].requires-python ({spec})" if spec else ""
        )
        spec = sdk & spec if spec is not None else sdk
    return spec, who


def _fix(inst: ServerInstance, merged: MergedConfig, spec: SpecifierSet, request: str | None) -> str:
    """The hint of a Python that does not fit: a version found, or the release the request can run."""
    release = merged.release
    version = request if request and re.fullmatch(r"\d+\.\d+(\.\d+)?", request) else None
    probe = f"{version}.99" if version and version.count(".") == 1 else version  # a minor: its newest patch
    runs = [r.version for r in RELEASES if probe and r.python_spec.contains(probe)]
    older = (
        f", or run a Gym release whose Requires-Python it meets (GYM_RUNTIME_PIN_NEMO_GYM={runs[-1]})"
        if runs and release is not None and runs[-1] != str(release.version)
        else ""
    )
    return (
        f"ask for one that meets Python {spec} (the server's python_version, --python or GYM_RUNTIME_PYTHON: "
        f"a version found, or a path), or install one on the host (gym-runtime never downloads Python)" + older
    )


def _rel(inst: ServerInstance, merged: MergedConfig) -> str:
    sdir = inst.server_dir
    return (
        merged.package.rel(sdir.install_file)
        if sdir.origin == "package"
        else f"servers/{sdir.server_type}/{sdir.implementation}/{sdir.install_file.name} (built-in)"
    )


def shared_requirement(merged: MergedConfig) -> SpecifierSet | None:
    """What every package server with a Python requirement needs at once (None: none has one): an
    interpreter chosen for one of them meets this first, so they all get the same one (a Ray head
    takes one Python)."""
    shared: SpecifierSet | None = None
    for name, inst in merged.instances.items():
        if inst.server_dir.origin != "package":
            continue
        try:
            source = read_install_source(inst.server_dir.install_file, server=name)
        except BuildError:
            continue
        spec = python_requirement(inst, source, _rel(inst, merged), merged)[0]
        if spec is not None:
            shared = spec if shared is None else shared & spec
    return shared


def choose_python(
    inst: ServerInstance,
    merged: MergedConfig,
    settings: RuntimeSettings,
    python: str | None,
    source: InstallSource,
    rel_file: str,
    shared: SpecifierSet | None = None,
) -> tuple[Interpreter, str]:
    """``(interpreter, origin)`` of ``inst``'s venv (module doc); ``shared``: what every package
    server needs (:func:`shared_requirement`), met first when the interpreter is chosen here.
    Raises ``GR-BUILD-PYTHON`` (:class:`~gym_runtime.venvs.pythons.PythonRequestError` for a
    malformed request, else :class:`BuildError`) before anything is installed."""
    request, origin = python_request(inst, merged, python, settings)
    spec, why = python_requirement(inst, source, rel_file, merged)
    environ = settings.environ or os.environ
    fix = _fix(inst, merged, spec, request) if spec is not None else ""
    if request is not None:
        return find_python(
            request, environ, server=inst.name, origin=origin, requires=spec, requires_why=why, fix=fix
        ), origin
    own = settings.python  # the runtime's own X.Y: worth a look only when some X.Y.z can meet the need
    if spec is None or inst.server_dir.origin == "builtin" or spec.contains(f"{own}.999", prereleases=True):
        try:
            return find_python(own, environ, server=inst.name, origin=origin, requires=spec, requires_why=why), origin
        except BuildError:
            if spec is None or inst.server_dir.origin == "builtin":
                raise
    picked = None
    if shared is not None and shared != spec:
        try:
            picked = pick_python(spec & shared, environ, server=inst.name, requires_why=why, fix=fix)
        except BuildError:
            pass
    picked = picked or pick_python(spec, environ, server=inst.name, requires_why=why, fix=fix)
    return picked, f"chosen for Python {spec} (nobody asked; the runtime's own {settings.python} does not meet it)"


def ray_python_problems(pythons: dict[str, Interpreter], users: dict[str, RayUse]) -> list[Violation]:
    """``GR-RAY-PYTHON`` when servers that use Ray would run different exact Python versions."""
    on_ray = {n: pythons[n] for n, u in users.items() if u.uses and n in pythons}
    versions = sorted({i.version for i in on_ray.values()})
    if len(versions) < 2:
        return []
    listing = "; ".join(f"{n}: Python {i.version} ({i.path})" for n, i in on_ray.items())
    return [
        Violation(
            "GR-RAY-PYTHON",
            f"servers that use Ray would run different Pythons and share one Ray head, "
            f"which refuses a driver whose Python version differs from the cluster's: {listing}",
            hint=f"give them one interpreter: the same python_version on each (e.g. {versions[-1]}), or "
            f"one --python / GYM_RUNTIME_PYTHON for the job",
        )
    ]


def python_problems(merged: MergedConfig, settings: RuntimeSettings, python: str | None = None) -> list[Violation]:
    """Every Python problem of ``merged`` as violations, without building (``validate``): each
    server's interpreter (:func:`choose_python`) and Ray's one Python (:func:`ray_python_problems`)."""
    from gym_runtime.ray.use import ray_users

    out: list[Violation] = []
    pythons: dict[str, Interpreter] = {}
    shared = shared_requirement(merged)
    for name, inst in merged.instances.items():
        rel = _rel(inst, merged)
        try:
            source = read_install_source(inst.server_dir.install_file, server=name)
            pythons[name] = choose_python(inst, merged, settings, python, source, rel, shared)[0]
        except BuildError as e:
            if e.code != "GR-BUILD-PYTHON":
                continue  # an unreadable install file is reported by the package checks
            out.append(Violation(e.code, e.message, file=rel, hint=e.hint))
    return out + ray_python_problems(pythons, ray_users(merged, undeclared=settings.ray_undeclared))


def target_python_problems(merged: MergedConfig, python: tuple[int, int]) -> list[Violation]:
    """``validate --platform P --python X.Y``: a ``GR-BUILD-PYTHON`` violation for each server using
    the Gym SDK when no CPython X.Y release meets the release's ``Requires-Python``."""
    release = merged.release
    if release is None:
        return []
    minor = f"{python[0]}.{python[1]}"
    out = []
    for name, inst in merged.instances.items():
        if inst.server_dir.origin != "package":
            continue
        try:
            source = read_install_source(inst.server_dir.install_file, server=name)
        except BuildError:
            continue
        rel = merged.package.rel(inst.server_dir.install_file)
        spec, why = python_requirement(inst, source, rel, merged)
        if spec is not None and not spec.contains(f"{minor}.99"):
            out.append(
                Violation(
                    "GR-BUILD-PYTHON",
                    f"{name}: the target Python {minor} does not meet {why}: it needs Python {spec}",
                    file=rel,
                    hint=_fix(inst, merged, spec, minor),
                )
            )
    return out
