"""What a cluster "image" gives its nodes, for placement tests on another Python: a venv holding the
runtime's locked dependencies (``uv export --frozen --no-dev --extra ray`` of this checkout: the same Ray as
the runtime), on a given interpreter, made with real uv from PyPI and kept under the test cache.

The runtime's own code is not installed in it: processes started from it get this checkout on
``PYTHONPATH`` (:func:`image_env`), so the daemon, the cluster's nodes and the code Ray ships to
them (``py_modules``) are the same files.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from tests.helpers.gym_package import cache_dir

ROOT = Path(__file__).resolve().parents[2]


def node_venv(python: str) -> Path:
    """The venv (module doc) for ``python``, built on first use; later runs reuse it while the lock
    file is unchanged (its name carries the lock's digest). A marker written last says it is whole;
    a file lock keeps parallel runs from building it twice."""
    import uv
    from filelock import FileLock

    lock = (ROOT / "uv.lock").read_bytes()
    version = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True, text=True, check=True
    ).stdout.strip()
    venv = cache_dir() / f"node-image-py{version}-{hashlib.sha256(lock).hexdigest()[:12]}"
    marker = venv / ".complete"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(venv) + ".lock", timeout=1800):
        if not marker.is_file():
            shutil.rmtree(venv, ignore_errors=True)
            reqs = subprocess.run(
                [
                    uv.find_uv_bin(),
                    "export",
                    "--frozen",
                    "--no-dev",
                    "--extra",
                    "ray",
                    "--no-emit-project",
                    "--no-hashes",
                    "--python",
                    python,
                ],
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            venv.mkdir(parents=True)
            (venv / "requirements.txt").write_text(reqs)
            subprocess.run(
                [uv.find_uv_bin(), "venv", "--quiet", "--allow-existing", "--python", python, str(venv)], check=True
            )
            subprocess.run(
                [
                    uv.find_uv_bin(),
                    "pip",
                    "install",
                    "--quiet",
                    "--python",
                    str(venv / "bin" / "python"),
                    "-r",
                    str(venv / "requirements.txt"),
                ],
                check=True,
                timeout=1800,
            )
            marker.write_text(version)
    return venv


def image_env(venv: Path, base: dict[str, str]) -> dict[str, str]:
    """``base`` with ``venv``'s ``bin`` first on ``PATH`` and this checkout on ``PYTHONPATH``."""
    return {
        **base,
        "PATH": f"{venv / 'bin'}:{base.get('PATH', '/usr/bin:/bin')}",
        "PYTHONPATH": str(ROOT),
        "VIRTUAL_ENV": str(venv),
    }
