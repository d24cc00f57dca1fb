"""Which server instances start a Ray driver, decided before anything is built (docs/runtime.md, "Ray").

A server uses Ray when the release's profile says so for what the server is
(:meth:`~gym_runtime.gym_release.GymRelease.server_uses_ray`): whether its venv runs the Gym SDK
(its install file names ``nemo-gym`` or Gym's ``../..`` line; after a build, whether the venv holds
``nemo_gym``), what its entrypoint class declares (``ray_enabled``, read statically:
:mod:`gym_runtime.package.server_class`) and, for a class that declares nothing, whether its tree
imports Ray (:mod:`gym_runtime.ray.imports`). The environment gets a Ray head only when
some server uses Ray (:mod:`gym_runtime.ray.target`), and servers that do not are free to run at
``full`` isolation.

gym-runtime's own ``ray_enabled`` key in a server's config block is gone: the class declares it
(NeMo Gym 0.7.0); a config that still sets one gets the warning ``GR-CONFIG-RAY-ENABLED``
(:mod:`gym_runtime.config.ray_enabled`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gym_runtime.errors import BuildError
from gym_runtime.gym_release.base import GymRelease
from gym_runtime.gym_release.sdk_index import index_for
from gym_runtime.package.server_class import ray_declaration
from gym_runtime.ray.imports import Reach, ray_import
from gym_runtime.venv_layout import holds_nemo_gym

if TYPE_CHECKING:
    from gym_runtime.config import MergedConfig, ServerInstance


@dataclass(frozen=True)
class RayUse:
    """``uses``: the server starts a Ray driver; ``sdk``: its venv runs the Gym SDK; ``why``: one
    phrase (``declares ray_enabled = False (app.py:20 ...)``, ``a Gym SDK server of the 0.4 line``);
    ``skipped``: NeMo Gym would give it a driver, the runtime runs it without one (its class
    declares nothing and its tree imports no Ray: :meth:`~gym_runtime.gym_release.gym_07.Gym07.server_uses_ray`);
    ``unparsed``: the file of its tree it uses Ray for only because this interpreter could not
    parse it (:class:`~gym_runtime.ray.imports.Reach`)."""

    uses: bool
    sdk: bool
    why: str
    skipped: bool = False
    unparsed: Path | None = None


def _sdk_source(inst: ServerInstance) -> bool:
    from gym_runtime.package.requirements import read_install_source

    if inst.server_dir.origin == "builtin":
        return False
    try:
        return read_install_source(inst.server_dir.install_file, server=inst.name).uses_gym_sdk
    except BuildError:
        return False


def gym_sdk_venv(venv_python: Path) -> bool:
    """True when the venv of ``venv_python`` holds the ``nemo_gym`` package (its servers call
    ``ray.init`` at start; :func:`gym_runtime.venv_layout.holds_nemo_gym`)."""
    return holds_nemo_gym(venv_python.parent.parent)


def ray_use(
    inst: ServerInstance, merged: MergedConfig, sdk: bool | None = None, index=None, undeclared: str = "when-imported"
) -> RayUse:
    """The decision for one instance; ``sdk`` defaults to what its install file says;
    ``undeclared``: ``GYM_RUNTIME_RAY_UNDECLARED`` (``always``: every undeclared class of a line
    that declares gets Ray, as NeMo Gym gives it)."""
    release = merged.release
    if inst.server_dir.origin == "builtin":  # the runtime's own trees: no SDK, no Ray
        return RayUse(False, False, "a built-in server (no Gym SDK, no ray_enabled = True)")
    sdk = _sdk_source(inst) if sdk is None else sdk
    if sdk and release is not None and not release.declares_ray_enabled:  # nothing the class says changes it
        return RayUse(True, True, f"a Gym SDK server of the {release.line} line (run_webserver always starts Ray)")
    root = merged.package.root
    decl = ray_declaration(inst.server_dir.path, inst.entrypoint, root, index)
    declared = decl.value if decl.declared else None
    reach = None
    if release is None:  # no profile (a config built without one): the oldest line's rule
        uses = gym_would = declared is True or sdk
        line = GymRelease.line
    else:
        line = release.line
        if sdk and release.declares_ray_enabled and declared is None and not release.ray_optional:
            reach = _unread_base(decl.missing, release) or (
                Reach("GYM_RUNTIME_RAY_UNDECLARED=always")
                if undeclared == "always"
                else ray_import(inst.server_dir.path, release.ray_modules)
            )
        uses = release.server_uses_ray(sdk, declared, reach is not None)
        gym_would = release.gym_starts_ray(sdk, declared)
    if decl.declared and (release is None or release.declares_ray_enabled or not sdk):
        why = f"declares ray_enabled = {decl.value} ({decl.where})"
    elif release is not None and release.ray_optional:
        why = (
            f"its class does not declare ray_enabled = True ({decl.where}), and nemo-gym {release.version} has Ray "
            f"only as its `{release.metadata.ray_extra}` extra: no Ray driver, no Ray in its venv (declare "
            "`ray_enabled = True` on the class to have it)"
        )
    elif sdk and release is not None and release.declares_ray_enabled and uses:
        why = (
            f"a Gym SDK server whose class does not declare ray_enabled ({decl.where}): Ray, as NeMo Gym "
            f"does, since {reach.where if reach is not None else 'NeMo Gym gives an undeclared class one'}"
        )
    elif sdk and release is not None and release.declares_ray_enabled:
        why = (
            f"its class does not declare ray_enabled ({decl.where}) and nothing in its tree imports Ray: "
            "no Ray driver (NeMo Gym would start one; declare `ray_enabled = True` on the class, or set "
            "GYM_RUNTIME_RAY_UNDECLARED=always, to have it)"
        )
    elif sdk:
        why = f"a Gym SDK server of the {line} line (run_webserver always starts Ray)"
    else:
        why = "no Gym SDK and no ray_enabled = True"
    return RayUse(uses, sdk, why, gym_would and not uses, reach.unparsed if uses and reach is not None else None)


def _unread_base(missing: tuple[str, ...], release) -> Reach | None:
    """Why the class may declare Ray where it could not be read: a base from a Gym server tree
    (``responses_api_agents.harbor_agent.app.HarborAgent``) the package does not ship."""
    for name in missing:
        if name.split(".")[0] in release.server_types:
            return Reach(f"its base {name} is in no tree of this package (its ray_enabled is not read)")
    return None


def ray_users(
    merged: MergedConfig, sdk: dict[str, bool] | None = None, undeclared: str = "when-imported"
) -> dict[str, RayUse]:
    """:func:`ray_use` of every instance, in config order; ``sdk``: instance -> whether its (built)
    venv holds the Gym SDK, where known."""
    index = index_for(merged.release, merged.package)[0] if merged.release is not None else None
    return {
        name: ray_use(inst, merged, (sdk or {}).get(name), index, undeclared) for name, inst in merged.instances.items()
    }


def release_line(merged: MergedConfig) -> str:
    """The release's one line (:meth:`~gym_runtime.gym_release.GymRelease.describe`), saying so when
    no server of the package runs the Gym SDK: then neither the SDK nor its Python is needed (the
    bundled example's built-in servers run on any supported Python)."""
    assert merged.release is not None  # build_config always chooses one
    line = merged.release.describe()
    if not any(_sdk_source(inst) for inst in merged.instances.values()):
        line += "; no server of this package uses the Gym SDK, so neither it nor that Python is needed"
    return line
