"""Put the ``gym_runtime`` sandbox provider into a server venv: a small distribution with its dist-info.

NeMo Gym 0.7.0 finds providers by name in the entry point group ``nemo_gym.sandbox_providers``
(``nemo_gym/sandbox/providers/registry.py``), so the provider is installed as a distribution of
its own, ``gym-runtime-sandbox``: the module ``gym_runtime_sandbox.py`` (``dist/``) and a
``gym_runtime_sandbox-<version>.dist-info`` holding ``METADATA``, ``entry_points.txt``,
``top_level.txt``, ``INSTALLER`` and a ``RECORD`` with each file's sha256, as an installer writes
them (PEP 376, PEP 627), so ``importlib.metadata`` and ``pip``/``uv`` see it like any other. Every
venv the runtime builds gets it (``gym_runtime/venvs/build.py``), like the exit hook; a venv
without ``nemo_gym`` never loads it.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from gym_runtime.venv_layout import site_packages

DIST, MODULE, VERSION = "gym-runtime-sandbox", "gym_runtime_sandbox", "1.0"
SOURCE = Path(__file__).with_name("dist") / f"{MODULE}.py"
ENTRY_POINTS = f"[nemo_gym.sandbox_providers]\ngym_runtime = {MODULE}:GymRuntimeProvider\n"


def _record_line(rel: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{rel},sha256={digest},{len(data)}"


def install_provider(venv: Path) -> list[Path]:
    """Write the provider distribution into every ``lib/python*/site-packages`` of ``venv``;
    returns the dist-info directories written. Raises ``FileNotFoundError`` without site-packages."""
    dirs = site_packages(venv)
    if not dirs:
        raise FileNotFoundError(f"no site-packages under {venv / 'lib'}")
    files = {
        f"{MODULE}.py": SOURCE.read_bytes(),
        "METADATA": (
            f"Metadata-Version: 2.1\nName: {DIST}\nVersion: {VERSION}\nSummary: NeMo Gym sandbox "
            "provider of gym-runtime (task sandboxes made by the daemon)\n"
        ).encode(),
        "entry_points.txt": ENTRY_POINTS.encode(),
        "top_level.txt": f"{MODULE}\n".encode(),
        "INSTALLER": b"gym-runtime\n",
    }
    written = []
    for site in dirs:
        info = site / f"{MODULE}-{VERSION}.dist-info"
        info.mkdir(exist_ok=True)
        record = []
        for name, data in files.items():
            rel = name if name.endswith(".py") else f"{info.name}/{name}"
            (site / rel).write_bytes(data)
            record.append(_record_line(rel, data))
        record.append(f"{info.name}/RECORD,,")
        (info / "RECORD").write_text("\n".join(record) + "\n")
        written.append(info)
    return written


def ensure_provider(venv: Path) -> bool:
    """Install or refresh the provider in ``venv`` when its module differs from this runtime's
    (a venv built by an older runtime, or before the provider existed); True when written. A venv
    without site-packages is left alone."""
    want = SOURCE.read_bytes()
    sites = site_packages(venv)
    if not sites or all(
        (d / f"{MODULE}.py").is_file()
        and (d / f"{MODULE}.py").read_bytes() == want
        and (d / f"{MODULE}-{VERSION}.dist-info" / "entry_points.txt").is_file()
        for d in sites
    ):
        return False
    install_provider(venv)
    return True
