"""Which wheel files an interpreter on this host can install, and why a file is rejected (case C12).

Tags come from ``packaging.tags`` for the venv's Python version on this host's platforms (venvs
are built on the host that runs them, so its glibc decides the manylinux tags).
"""

from __future__ import annotations

from functools import cache

from packaging.tags import Tag, compatible_tags, cpython_tags, platform_tags
from packaging.utils import parse_wheel_filename

from gym_runtime.venvs.pythons import Interpreter


@cache
def host_platforms() -> tuple[str, ...]:
    """This host's platform tags, most specific first (e.g. ``manylinux_2_36_x86_64`` ...)."""
    return tuple(platform_tags())


@cache
def _supported(version: tuple[int, int]) -> frozenset[Tag]:
    plats = list(host_platforms())
    return frozenset([*cpython_tags(version, platforms=plats), *compatible_tags(version, platforms=plats)])


def _version(interp: Interpreter) -> tuple[int, int]:
    major, minor = interp.version.split(".")[:2]
    return int(major), int(minor)


def abi_tag(interp: Interpreter) -> str:
    major, minor = _version(interp)
    return f"cp{major}{minor}"


def highest_platform() -> str:
    """The most capable platform tag this host installs, as uv names it in its hints: the highest
    ``manylinux_2_N_<arch>`` (packaging >= 26 lists the plain ``linux_<arch>`` first, which no
    vendored wheel uses), else the first tag (macOS, musl), else ``unknown``."""
    plats = host_platforms()
    return next((p for p in plats if p.startswith("manylinux_")), plats[0] if plats else "unknown")


def fits(filename: str, interp: Interpreter) -> bool:
    """True when the wheel ``filename`` installs on ``interp`` here (sdists always 'fit')."""
    if not filename.endswith(".whl"):
        return True
    return bool(parse_wheel_filename(filename)[3] & _supported(_version(interp)))


def rejection(filename: str, interp: Interpreter) -> str | None:
    """Why ``filename`` cannot install on ``interp`` here, or ``None`` when it can."""
    if fits(filename, interp):
        return None
    tags = parse_wheel_filename(filename)[3]
    plats = set(host_platforms()) | {"any"}
    have = ", ".join(sorted(str(t) for t in tags))
    if any(t.platform in plats for t in tags):
        return (
            f"Python/ABI tag mismatch: the venv runs {interp.implementation} {interp.version} "
            f"({abi_tag(interp)}); the file has {have}"
        )
    return f"platform tag mismatch: this host supports up to {highest_platform()}; the file has {have}"
