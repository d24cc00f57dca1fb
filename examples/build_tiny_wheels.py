"""Build the examples' tiny wheels from the sources in ``examples/src/`` into each package's ``wheels/``.

    python3 examples/build_tiny_wheels.py            # rebuild the committed wheels

``verifiers`` (``src/verifiers-lite``) and ``tiny-math`` (``src/tiny-math``) go to
``verifiers-tiny-math/wheels/``. Builds use ``uv build`` (hatchling, reproducible: the same
sources give the same bytes, so a rebuild leaves git clean). ``uv build`` writes a
``.gitignore`` into a fresh output directory, so it builds into a temporary one and only
``.whl`` files are copied (a package's ``wheels/`` holds nothing else).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import uv

EXAMPLES = Path(__file__).resolve().parent
TINY_WHEELS = {"verifiers-tiny-math": ["verifiers-lite", "tiny-math"]}


def build(source: Path, dest: Path) -> Path:
    """``uv build --wheel`` of ``source``; returns the wheel copied into ``dest``."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([uv.find_uv_bin(), "build", "--wheel", "--quiet", "-o", tmp, str(source)], check=True)
        [wheel] = Path(tmp).glob("*.whl")
        dest.mkdir(parents=True, exist_ok=True)
        return Path(shutil.copy2(wheel, dest / wheel.name))


def main() -> int:
    for package, sources in TINY_WHEELS.items():
        for name in sources:
            print(build(EXAMPLES / "src" / name, EXAMPLES / package / "wheels").relative_to(EXAMPLES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
