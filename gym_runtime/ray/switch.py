"""Run a NeMo Gym server without the Ray driver its SDK would give it (docs/runtime.md, "Ray").

Which servers: :mod:`gym_runtime.ray.use` (``RayUse.skipped``: a 0.7 class that
declares no ``ray_enabled`` and whose tree imports no Ray). How: every venv the runtime builds that
holds NeMo Gym (:func:`~gym_runtime.venv_layout.holds_nemo_gym`) holds the module
``_gym_runtime_ray_switch`` (``dist/``) and a ``.pth`` line that installs it at every start of the
venv's interpreter; such a server's environment gets :data:`VAR` = ``1``
(:func:`server_env`), and the module makes NeMo Gym's ``_server_uses_ray`` answer False for its
undeclared class. A venv built before the module existed gets it at its next start
(:func:`ensure_ray_switch`), as the task-sandbox provider does.
"""

from __future__ import annotations

from pathlib import Path

from gym_runtime.files import write_bytes
from gym_runtime.venv_layout import holds_nemo_gym, site_packages

MODULE = "_gym_runtime_ray_switch"
SOURCE = Path(__file__).with_name("dist") / f"{MODULE}.py"
PTH = f"{MODULE}.pth"
PTH_LINE = f"import {MODULE}; {MODULE}.install()\n"
VAR = "GYM_RUNTIME_NO_RAY_DRIVER"


def server_env() -> dict[str, str]:
    """The variables a server run without Ray gets (module doc): :data:`VAR`, and Ray's own
    ``RAY_ENABLE_AUTO_CONNECT=0`` (Ray 2.60 ``ray/_private/auto_init_hook.py``, read when Ray is
    imported), so a Ray call the runtime's reading missed raises Ray's "not initialized" error
    instead of starting a cluster in the server's sandbox."""
    return {VAR: "1", "RAY_ENABLE_AUTO_CONNECT": "0"}


def install_ray_switch(venv: Path) -> bool:
    """Write the module and its ``.pth`` line into every ``lib/python*/site-packages`` of ``venv``
    when it holds NeMo Gym, each file replaced whole; True when written. Raises
    ``FileNotFoundError`` when the venv has no site-packages, ``OSError`` when it cannot be written."""
    dirs = site_packages(venv)
    if not dirs:
        raise FileNotFoundError(f"no site-packages under {venv / 'lib'}")
    if not holds_nemo_gym(venv):
        return False
    data = SOURCE.read_bytes()
    for d in dirs:  # each file whole or not at all: other environments may start on this venv meanwhile
        write_bytes(d / f"{MODULE}.py", data)
        write_bytes(d / PTH, PTH_LINE.encode())
    return True


def ensure_ray_switch(venv: Path) -> bool:
    """Install or refresh the switch in ``venv`` (one holding NeMo Gym) when it differs from this
    runtime's; True when written. A venv without site-packages is left alone; raises ``OSError``
    when it cannot be written."""
    sites = site_packages(venv)
    if not sites or not holds_nemo_gym(venv):
        return False
    data = SOURCE.read_bytes()
    if all(
        (d / f"{MODULE}.py").is_file()
        and (d / f"{MODULE}.py").read_bytes() == data
        and (d / PTH).is_file()
        and (d / PTH).read_text() == PTH_LINE
        for d in sites
    ):
        return False
    return install_ray_switch(venv)
