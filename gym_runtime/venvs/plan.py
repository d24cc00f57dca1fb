"""The install plan: one :class:`VenvPlan` per distinct set of inputs (docs/architecture.md §5).

For each server instance: its install file (parsed, Gym's SDK line replaced), the image pins in
the configured mode, the interpreter, the wheel pool (``wheels/``) and whether stage 2 (offline
closure install) runs. Pin modes (runtime setting ``pin_mode``):

- ``gym``: every pin is installed into every venv (Gym's contract, NeMo Gym 0.4.0 `nemo_gym/global_config.py`, the openai/ray pins of server venvs);
- ``auto`` (default): the full set for servers that reference the Gym SDK, the pins only as
  constraints elsewhere (a server that installs ray or openai gets the pinned version);
- ``none``: no pins.

Injected pins are written to their own file (``gym-runtime-pins.txt`` or
``gym-runtime-constraints.txt``), logged, and attributed in errors with their origin (cases C07,
C09). Instances whose inputs digest the same share one venv.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from gym_runtime.config import MergedConfig, ServerInstance
from gym_runtime.errors import BuildError
from gym_runtime.gym_release import GymRelease
from gym_runtime.gym_release.imports import raise_on_missing
from gym_runtime.package.requirements import SDK_NAME, InstallSource, read_install_source
from gym_runtime.package.wheels import metadata_mismatches, wheel_dist_info
from gym_runtime.ray.use import ray_use, ray_users
from gym_runtime.settings import RuntimeSettings
from gym_runtime.venvs.digest import HashCache, plan_digest, tree_digest
from gym_runtime.venvs.overrides import Overrides, ignored_note, read_overrides
from gym_runtime.venvs.preflight import preflight
from gym_runtime.venvs.python_choice import choose_python, ray_python_problems, shared_requirement
from gym_runtime.venvs.uvrun import UvEnv, make_env, uv_version
from gym_runtime.venvs.venv_plan import STAGE2_TYPES, Pin, PoolFile, VenvPlan, read_pool_entries


@dataclass(frozen=True)
class InstallPlan:
    """Distinct venv plans and the mapping instance name -> digest."""

    venvs: tuple[VenvPlan, ...]
    by_instance: dict[str, str]
    pin_mode: str
    uv_version: str
    uv_env: UvEnv = field(repr=False)
    package_root: Path | None = None
    notes: tuple[str, ...] = ()  # about the whole plan (e.g. an SDK import scan that was skipped)

    def for_instance(self, name: str) -> VenvPlan:
        digest = self.by_instance[name]
        return next(v for v in self.venvs if v.digest == digest)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pin_mode": self.pin_mode,
            "uv": self.uv_version,
            "venvs": [v.to_dict() for v in self.venvs],
            "servers": dict(self.by_instance),
        }


def pins_for(
    settings: RuntimeSettings,
    mode: str,
    source: InstallSource,
    release: GymRelease | None = None,
    uses_ray: bool = True,
) -> tuple[Pin, ...]:
    """The injected pins for one install source in ``mode`` (see module doc); ``release`` (the Gym
    release the environment runs) fills the pins the operator did not set (:meth:`GymRelease.pins`).
    ``uses_ray``: whether the server gets a Ray driver; when the release has Ray only as an extra
    (:attr:`GymRelease.ray_optional`), or is of a line the runtime does not know
    (:attr:`GymRelease.stand_in`, whose metadata may be unread), a server without one gets no Ray
    pin, so its venv holds Ray only if the release or its own requirements ask for it."""
    if mode == "none":
        return ()
    as_constraint = mode == "auto" and not source.uses_gym_sdk
    pins, origins = release.pins(settings) if release is not None else (settings.pins, settings.pin_origins)
    no_ray = release is not None and (release.ray_optional or release.stand_in) and not uses_ray
    out = []
    for req, version in pins.items():
        origin = origins.get(req, "the runtime's pin settings")
        name = canonicalize_name(Requirement(req).name)
        if no_ray and name == "ray":
            continue
        out.append(Pin(f"{req}=={version}", name, version, f"added by gym-runtime: {origin}", as_constraint))
    return tuple(out)


def _uses_ray(inst: ServerInstance, merged: MergedConfig, settings: RuntimeSettings) -> bool:
    """Whether ``inst`` gets a Ray driver, asked only where it changes the pins (a release with Ray
    as an extra, or of an unknown line: :func:`pins_for`); True otherwise."""
    if merged.release is None or not (merged.release.ray_optional or merged.release.stand_in):
        return True
    return ray_use(inst, merged, undeclared=settings.ray_undeclared).uses


def sdk_line(settings: RuntimeSettings, release: GymRelease | None = None) -> str:
    """What replaces Gym's ``-e nemo-gym[dev] @ ../../`` line: the pinned SDK (``nemo-gym==X``)."""
    sdk_pin = (release.pins(settings)[0] if release is not None else settings.pins).get(SDK_NAME)
    return f"{SDK_NAME}=={sdk_pin}" if sdk_pin and settings.pin_mode != "none" else SDK_NAME


def read_pool(wheels_dir: Path | None, cache: HashCache) -> tuple[PoolFile, ...]:
    """Every wheel and sdist in ``wheels_dir`` with its sha256 (other files are ignored)."""
    return tuple(PoolFile(e.path, e.name, e.version, cache.sha256(e.path)) for e in read_pool_entries(wheels_dir))


def _local_inputs(source: InstallSource, cache: HashCache) -> dict[str, str]:
    """Digests of local files/directories the install file points at (includes, paths)."""
    out = {}
    for ln in source.lines:
        if ln.gym_sdk or ln.kind not in ("include", "path", "editable") or not ln.target:
            continue
        if ln.target.startswith(("git+", "http")):
            continue
        p = Path(ln.target.removeprefix("file://").removeprefix("file:"))
        p = p if p.is_absolute() else (source.file.parent / p).resolve()
        out[str(p)] = tree_digest(p, cache) if p.exists() else "missing"
    return out


def plan_instance(
    inst: ServerInstance,
    merged: MergedConfig,
    settings: RuntimeSettings,
    python: str | None,
    uv_env: UvEnv,
    cache: HashCache,
    shared: SpecifierSet | None = None,
) -> VenvPlan:
    """The plan of one instance (its digest decides sharing); ``shared``: what every package
    server's Python must meet (:func:`~gym_runtime.venvs.python_choice.shared_requirement`)."""
    sdir = inst.server_dir
    source = read_install_source(sdir.install_file, server=inst.name)
    overrides = read_overrides(source, server=inst.name)
    mode = settings.pin_mode
    pins = pins_for(settings, mode, source, merged.release, _uses_ray(inst, merged, settings))
    pkg = merged.package
    rel_file = (
        pkg.rel(sdir.install_file)
        if sdir.origin == "package"
        else f"servers/{sdir.server_type}/{sdir.implementation}/{sdir.install_file.name} (built-in)"
    )
    interp, origin = choose_python(inst, merged, settings, python, source, rel_file, shared)
    wheels_dir = pkg.wheels_dir if pkg.wheels_dir and pkg.wheels_dir.is_dir() else None
    pool = read_pool(wheels_dir, cache)
    closure: tuple[str, ...] = ()
    if wheels_dir and inst.server_type in STAGE2_TYPES:
        versions: dict[str, set[str]] = {}
        for f in pool:
            versions.setdefault(f.name, set()).add(f.version)
        # several versions are a packaging error (preflight); pin the newest so uv explains its tags
        closure = tuple(sorted(f"{n}=={max(vs, key=Version)}" for n, vs in versions.items()))
    sdk_replacement = sdk_line(settings, merged.release)
    notes = []
    for ln in source.lines:
        if ln.takes_sdk_pin and ln.sdk_requirement(sdk_replacement) != ln.text:
            why = "Gym's editable checkout line" if ln.gym_sdk else "the Gym SDK without a version"
            notes.append(
                f"{source.where(ln)}: `{ln.text}` replaced by `{ln.sdk_requirement(sdk_replacement)}` "
                f"({why}; the runtime installs the pinned SDK)"
            )
    if pins:
        how = "constraints only" if pins[0].as_constraint else "installed"
        notes.append(f"pins ({mode} mode, {how}): " + ", ".join(p.requirement for p in pins))
    notes += _override_notes(source, overrides, rel_file, pins)
    hash_mode = source.has_hashes
    rendered = source.render(sdk_replacement)
    # what uv is given decides the venv, not the file kind or its blank lines: a pyproject server
    # and a requirements.txt server asking for the same requirements share one venv
    inputs = {
        "install": [ln for ln in rendered.splitlines() if ln.strip()],
        "local": _local_inputs(source, cache),
        "pins": [[p.requirement, p.as_constraint] for p in pins],
        "hash_mode": hash_mode,
        "python": [str(interp.path), interp.implementation, interp.version],
        "uv": uv_version(),
        "pool": [[f.path.name, f.sha256] for f in pool],
        "closure": list(closure),
        "index": uv_env.index_settings(),
    }
    if overrides is not None:  # only then: a venv without overrides keeps the digest it had
        inputs["overrides"] = overrides.requirements
    digest = plan_digest(inputs)
    # a wheel rebuilt under the same file name: make uv re-read it instead of using its cached copy
    refresh = tuple(sorted({f.name for f in pool if cache.changed_since_seen(f.path.name, f.sha256)}))
    return VenvPlan(
        digest,
        settings.venv_dir / digest[:24],
        (inst.name,),
        inst.server_type,
        sdir.path,
        source,
        rel_file,
        pins,
        mode,
        interp,
        origin,
        wheels_dir,
        pool,
        closure,
        hash_mode,
        sdk_replacement,
        tuple(notes),
        refresh,
        overrides,
        inputs,
    )


def _override_notes(
    source: InstallSource, overrides: Overrides | None, rel_file: str, pins: tuple[Pin, ...]
) -> list[str]:
    """The plan's words on ``overrides.txt``: what it overrides (and which injected pin it beats),
    or why one beside a ``pyproject.toml`` is not applied."""
    if overrides is None:
        note = ignored_note(source, rel_file)
        return [note] if note else []
    if not overrides.lines:
        return []
    out = [
        f"overrides ({overrides.file.name}, every requirement on these distributions): "
        + ", ".join(overrides.requirements)
    ]
    for p in pins:
        ln = overrides.line_of(p.name)
        if ln is not None and ln.text.replace(" ", "") != p.constraint:
            out.append(f"{overrides.where(ln)}: `{ln.text}` overrides the injected pin {p.requirement} ({p.origin})")
    return out


def plan_venvs(merged: MergedConfig, settings: RuntimeSettings, python: str | None = None) -> InstallPlan:
    """Plan one venv per distinct set of inputs for every server instance of ``merged``.

    ``python`` overrides the interpreter for the job (a version like ``3.13`` or a path); a
    server's own ``python_version`` config key wins over it. Raises
    :class:`~gym_runtime.errors.BuildError` before anything is installed: ``GR-BUILD-PYTHON``
    (interpreter not found, case C17), ``GR-BUILD-INSTALL-FILE``, and the preflight checks of
    :mod:`gym_runtime.venvs.preflight` (cases C10, C11, C16, two vendored versions).
    """
    cache = HashCache(settings.venv_dir / ".cache" / "sha256.json")
    uv_env = make_env(settings.environ, settings.uv_cache_dir)
    plans: dict[str, VenvPlan] = {}
    by_instance: dict[str, str] = {}
    shared = shared_requirement(merged)
    for inst in merged.instances.values():
        vp = plan_instance(inst, merged, settings, python, uv_env, cache, shared)
        if vp.digest in plans:
            prev = plans[vp.digest]
            vp = VenvPlan(**{**prev.__dict__, "instances": prev.instances + (inst.name,)})
        plans[vp.digest] = vp
        by_instance[inst.name] = vp.digest
    pkg = merged.package
    bad_wheels = metadata_mismatches(pkg.wheels, pkg.root, lambda p: cache.memo(p, "dist-info", wheel_dist_info))
    cache.save()
    if bad_wheels:  # uv refuses them at install, and stage 2 installs all of wheels/ into each venv (C50)
        one = bad_wheels[0]
        raise BuildError(
            f"{one.file}: {one.message}"
            if len(bad_wheels) == 1
            else f"{len(bad_wheels)} wheels in wheels/ cannot be installed: their file names and METADATA disagree",
            violations=bad_wheels if len(bad_wheels) > 1 else None,
            hint=one.hint
            if len(bad_wheels) == 1
            else "rebuild or rename each wheel (`gym-runtime validate PKG` lists them without building)",
            code="GR-PKG-WHEEL-METADATA",
            extra={"stage": "preflight", "file": one.file, "servers": list(merged.instances)},
        )
    pythons = {n: plans[d].python for n, d in by_instance.items()}
    for v in ray_python_problems(pythons, ray_users(merged, undeclared=settings.ray_undeclared)):
        raise BuildError(v.message, code=v.code, hint=v.hint, extra={"stage": "python", "servers": list(pythons)})
    notes: tuple[str, ...] = ()
    if merged.release is not None:
        note = raise_on_missing(merged.package, merged.release)
        notes = (note,) if note else ()
    preflight(list(plans.values()), merged.package.format)
    return InstallPlan(
        tuple(plans.values()), by_instance, settings.pin_mode, uv_version(), uv_env, merged.package.root, notes
    )
