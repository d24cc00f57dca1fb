"""Run a NeMo Gym server without the Ray driver its SDK would give it (docs/runtime.md, "Ray").

Which servers: :mod:`gym_runtime.gym_release.ray_use` (``RayUse.skipped``: a 0.7 class that
declares no ``ray_enabled`` and whose tree imports no Ray). How: every venv the runtime builds that
holds NeMo Gym (a ``nemo_gym-*.dist-info``, editable installs too) holds the module
``_gym_runtime_ray_switch`` (``dist/``) and a ``.pth`` line that installs it at every start of the
venv's interpreter; such a server's environment gets :data:`VAR` = ``1``
(:func:`server_env`), and the module makes NeMo Gym's ``_server_uses_ray`` answer False for its
undeclared class. A venv built before the module existed gets it at its next start
(:func:`ensure_ray_switch`), as the task-sandbox provider does.
"""

from __future__ import annotations

from pathlib import Path

from gym_runtime.venvs.layout import site_packages

MODULE = "_gym_runtime_ray_switch"
SOURCE = Path(__file__).with_name("dist") / f"{MODULE}.py"
PTH = f"{MODULE}.pth"
PTH_LINE = f"import {MODULE}; {MODULE}.install()\n"
VAR = "GYM_RUNTIME_NO_RAY_DRIVER"


def server_env() -> dict[str, str]:
    """The variable a server run without Ray gets (module doc)."""
    return {VAR: "1"}


def _holds_gym(sites: list[Path]) -> bool:
    return any(any(d.glob("nemo_gym-*.dist-info")) for d in sites)


def install_ray_switch(venv: Path) -> bool:
    """Write the module and its ``.pth`` line into every ``lib/python*/site-packages`` of ``venv``
    when it holds NeMo Gym; True when written. Raises ``FileNotFoundError`` when the venv has no
    site-packages."""
    dirs = site_packages(venv)
    if not dirs:
        raise FileNotFoundError(f"no site-packages under {venv / 'lib'}")
    if not _holds_gym(dirs):
        return False
    data = SOURCE.read_bytes()
    for d in dirs:
        (d / f"{MODULE}.py").write_bytes(data)
        (d / PTH).write_text(PTH_LINE)
    return True


def ensure_ray_switch(venv: Path) -> bool:
    """Install or refresh the switch in ``venv`` (one holding NeMo Gym) when it differs from this
    runtime's; True when written. A venv without site-packages is left alone."""
    data, sites = SOURCE.read_bytes(), site_packages(venv)
    if not sites or all((d / f"{MODULE}.py").is_file() and (d / f"{MODULE}.py").read_bytes() == data
                        and (d / PTH).is_file() and (d / PTH).read_text() == PTH_LINE for d in sites):
        return False
    return install_ray_switch(venv)
