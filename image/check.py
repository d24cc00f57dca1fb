"""The runtime image's last build step (``setup.sh project``): the image's Python runs the current
NeMo Gym release, and the wheels the image's ``vendor`` targets by default install on it.

Run with the project venv's interpreter once the project is installed; reads the settings the
Dockerfile sets (``GYM_RUNTIME_PYTHON``, ``GYM_RUNTIME_VENDOR_PLATFORM``). Prints the Python each
range of known Gym releases needs and whether the image's satisfies it, then exits 1 naming what is
wrong, if anything: ``GYM_RUNTIME_PYTHON`` is not the interpreter the runtime itself runs on, it is
below the current release's ``Requires-Python`` (nemo-gym 0.5.0 and later need >= 3.13.14), or the
interpreter cannot install wheels of the vendor platform (a base of another architecture, or a
glibc below the default target's). docs/container.md "Python".
"""

from __future__ import annotations

import platform
import sys
from itertools import groupby
from pathlib import Path

from packaging.tags import sys_tags

from gym_runtime.gym_release import CURRENT, RELEASES, known_release
from gym_runtime.package import parse_target
from gym_runtime.settings import load_settings
from gym_runtime.venvs.pythons import find_python


def problems() -> list[str]:
    """What is wrong with this interpreter as the image's Python (``[]``: nothing); prints the table."""
    settings = load_settings()
    python = find_python(settings.python, settings.environ, origin="GYM_RUNTIME_PYTHON")
    own = Path(getattr(sys, "_base_executable", sys.executable)).resolve()
    out = []
    if python.path != own:
        out.append(
            f"GYM_RUNTIME_PYTHON={settings.python} is {python.describe()}, not the runtime's own interpreter {own}"
        )
    for need, rows in groupby(RELEASES, key=lambda r: r.requires_python):
        versions = [r.version for r in rows]
        ok = known_release(versions[0]).python_spec.contains(python.version, prereleases=True)
        print(f"nemo-gym {versions[0]}-{versions[-1]}: Python {need}: {'ok' if ok else 'NO'} ({python.version})")
    current = known_release(CURRENT).python_spec
    if not current.contains(python.version, prereleases=True):
        out.append(
            f"{python.describe()} cannot run nemo-gym {CURRENT}, the current release, which needs Python "
            f"{current}: use a base whose python3.13 is new enough (docs/container.md)"
        )
    if settings.vendor_platform is None:
        out.append("GYM_RUNTIME_VENDOR_PLATFORM is not set (each Dockerfile sets its architecture's)")
        return out
    target = parse_target(settings.vendor_platform, python.minor)
    tags = target.platform_tags()
    print(f"vendor default: {target.describe()}, platform tags {tags[0]} ... {tags[-1]}")
    if tags[0] not in {t.platform for t in sys_tags()}:
        libc = " ".join(platform.libc_ver())
        out.append(
            f"this interpreter ({platform.machine()}, {libc}) does not install {tags[0]} wheels: the base "
            f"is not {settings.vendor_platform}, or its glibc is older than the target's"
        )
    return out


def main() -> int:
    found = problems()
    for p in found:
        print(f"image check: {p}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
