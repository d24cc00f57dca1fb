"""Wheel files of a wheelhouse: names, versions, tags, and compatibility with a target.

All parsing is ``packaging``'s (``parse_wheel_filename``, ``canonicalize_name``, ``tags``).
The target tag set follows pip/uv: CPython ``cpXY`` / ``abi3`` (for ``cp3N <= XY``) / ``none``
ABIs, ``manylinux_2_N`` for every glibc minor from 17 up to the target's, the legacy aliases
(``manylinux2014`` = 2.17, ``manylinux2010`` = 2.12, ``manylinux1`` = 2.5 on x86_64) and
``linux_<arch>``.
"""

from __future__ import annotations

import zipfile
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import InvalidWheelFilename, NormalizedName, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from gym_runtime.errors import Violation

ARCHES = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}
DEFAULT_GLIBC = (2, 36)  # Debian 12: what runs there also runs on the runtime image (Debian 13, glibc 2.41)
_VENDOR_HINT = (
    "run `gym-runtime vendor PKG --platform linux/amd64 --python 3.13` (it resolves the servers' "
    "requirements and downloads the closure as wheels into wheels/)"
)


@dataclass(frozen=True)
class WheelFile:
    """One ``.whl`` in ``wheels/``: its path, normalised distribution name, version and tags."""

    path: Path
    name: NormalizedName
    version: Version
    tags: frozenset[Tag]

    @property
    def filename(self) -> str:
        return self.path.name


@dataclass(frozen=True)
class Target:
    """Where wheels must install: ``platform`` (``linux/amd64``|``linux/arm64``), Python ``(3, 13)``, glibc."""

    platform: str
    python: tuple[int, int]
    glibc: tuple[int, int] = DEFAULT_GLIBC

    @property
    def arch(self) -> str:
        return ARCHES[self.platform]

    def platform_tags(self) -> list[str]:
        """Platform tags this target accepts, most specific first."""
        arch, (_, gminor) = self.arch, self.glibc
        tags = [f"manylinux_2_{m}_{arch}" for m in range(gminor, 16, -1)]
        tags.append(f"manylinux2014_{arch}")
        if arch == "x86_64":
            tags += [f"manylinux_2_{m}_{arch}" for m in (12, 5)] + [f"manylinux2010_{arch}", f"manylinux1_{arch}"]
        return tags + [f"linux_{arch}"]

    def supported_tags(self) -> frozenset[Tag]:
        """Every (interpreter, abi, platform) tag a CPython of this version on this platform installs."""
        plats = self.platform_tags()
        cp = list(cpython_tags(self.python, abis=[f"cp{self.python[0]}{self.python[1]}"], platforms=plats))
        rest = list(compatible_tags(self.python, f"cp{self.python[0]}{self.python[1]}", plats))
        return frozenset(cp + rest)

    def describe(self) -> str:
        return f"CPython {self.python[0]}.{self.python[1]} {self.platform} (glibc {self.glibc[0]}.{self.glibc[1]})"


def _version_pair(text: str, flag: str, example: str) -> tuple[int, int]:
    parts = text.strip().split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        raise ValueError(f"{flag} must look like {example}, got {text!r}")
    return int(parts[0]), int(parts[1])


def parse_target(platform: str, python: str, glibc: str | None = None) -> Target:
    """Build a :class:`Target` from CLI strings (``linux/amd64``, ``3.13``, ``2.36``).

    Raises ``ValueError`` with a readable message for an unknown platform, a Python that is not
    CPython 3.8+ or a glibc older than 2.17 (manylinux2014, the oldest tag the runtime supports).
    """
    if platform not in ARCHES:
        raise ValueError(f"--platform must be one of {', '.join(ARCHES)}, got {platform!r}")
    py = _version_pair(python, "--python", "3.13")
    if py[0] != 3 or py[1] < 8:
        raise ValueError(f"--python must be CPython 3.8 or newer, got {python!r}")
    g = _version_pair(glibc, "--glibc", "2.36") if glibc else DEFAULT_GLIBC
    if g[0] != 2 or g[1] < 17:
        raise ValueError(f"--glibc must be 2.17 or newer, got {glibc!r}")
    return Target(platform, py, g)


def read_wheelhouse(wheels_dir: Path, rel_to: Path) -> tuple[list[WheelFile], list[Violation]]:
    """List and check ``wheels_dir``: flat, non-empty, only parseable ``.whl`` files, no symlinks,
    one version per normalised distribution name. Returns the wheels and every violation found."""
    v: list[Violation] = []
    rel = wheels_dir.relative_to(rel_to).as_posix()
    if wheels_dir.is_symlink():
        return [], [Violation("GR-PKG-WHEELS-SYMLINK", "wheelhouse symlinks are not allowed", file=rel)]
    if not wheels_dir.is_dir():
        return [], [
            Violation(
                "GR-PKG-WHEELS-MISSING",
                "this format installs its dependencies offline, so the "
                "package must carry a non-empty wheels/ directory",
                file=rel,
                hint=_VENDOR_HINT,
            )
        ]
    wheels: list[WheelFile] = []
    entries = sorted(wheels_dir.iterdir())
    if not entries:
        v.append(Violation("GR-PKG-WHEELS-EMPTY", "wheels/ is empty", file=rel, hint=_VENDOR_HINT))
    for p in entries:
        prel = p.relative_to(rel_to).as_posix()
        if p.is_symlink():
            v.append(Violation("GR-PKG-WHEELS-SYMLINK", "wheel symlinks are not allowed", file=prel))
        elif p.is_dir():
            v.append(
                Violation("GR-PKG-WHEELS-NESTED", "wheels/ must be flat; nested entries are not supported", file=prel)
            )
        elif not p.name.endswith(".whl"):
            v.append(
                Violation(
                    "GR-PKG-WHEELS-NON-WHEEL",
                    "non-wheel file in wheels/",
                    file=prel,
                    hint="sdists cannot be installed offline without a build backend; build a wheel",
                )
            )
        else:
            try:
                name, version, _build, tags = parse_wheel_filename(p.name)
            except InvalidWheelFilename as e:
                v.append(Violation("GR-PKG-WHEELS-BAD-NAME", f"not a valid wheel file name: {e}", file=prel))
                continue
            wheels.append(WheelFile(p, name, version, frozenset(tags)))
    by_name: dict[str, set[str]] = defaultdict(set)
    for w in wheels:
        by_name[w.name].add(str(w.version))
    for dist, versions in sorted(by_name.items()):
        if len(versions) > 1:
            vs = ", ".join(sorted(versions, key=Version))
            files = ", ".join(sorted(w.filename for w in wheels if w.name == dist))
            v.append(
                Violation(
                    "GR-PKG-WHEELS-DUPLICATE",
                    f"vendors multiple versions of {dist} ({vs}): {files}",
                    file=rel,
                    hint="regenerate wheels/ with one resolved version per distribution",
                )
            )
    return wheels, v


def _reason(w: WheelFile, target: Target) -> str:
    """Why none of ``w``'s tags fits ``target``, in words (first failing dimension)."""
    arch, py = target.arch, f"{target.python[0]}{target.python[1]}"
    plats = {t.platform for t in w.tags}
    if not any(p == "any" or p.endswith("_" + arch) for p in plats):
        return f"built for another platform ({', '.join(sorted(plats))}), the target is {arch}"
    if all(p.startswith("musllinux") for p in plats if p != "any"):
        return "built for musl libc (musllinux); the target uses glibc"
    glibc = [tuple(int(x) for x in p.split("_")[1:3]) for p in plats if p.startswith("manylinux_")]
    ok_plats = set(target.platform_tags()) | {"any"}
    if glibc and not plats & ok_plats:
        return f"needs glibc {min(glibc)[0]}.{min(glibc)[1]}, the target has glibc {target.glibc[0]}.{target.glibc[1]}"
    if not plats & ok_plats:
        return f"platform tags {', '.join(sorted(plats))} are not supported on {target.describe()}"
    interp = sorted({f"{t.interpreter}-{t.abi}" for t in w.tags})
    return f"built for {', '.join(interp)}, not CPython {target.python[0]}.{target.python[1]} (cp{py})"


def incompatible_wheels(wheels: list[WheelFile], target: Target, rel_to: Path) -> list[Violation]:
    """One violation per wheel none of whose tags the target supports, naming the tags it has."""
    ok = target.supported_tags()
    out = []
    for w in wheels:
        if w.tags & ok:
            continue
        have = ", ".join(sorted(str(t) for t in w.tags))
        out.append(
            Violation(
                "GR-PKG-WHEEL-TAG",
                f"not installable on {target.describe()}: {_reason(w, target)} (tags: {have})",
                file=w.path.relative_to(rel_to).as_posix(),
                hint=f"vendor a wheel built for {target.describe()} (or a py3-none-any wheel)",
            )
        )
    return out


def wheel_dist_info(path: Path) -> list[str] | None:
    """``[dist-info directory, METADATA Name, METADATA Version]`` of a wheel, reading only the zip's
    directory and its ``*.dist-info/METADATA`` headers; ``None`` when the file is no zip or has none."""
    try:
        with zipfile.ZipFile(path) as z:
            name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
            meta = Parser().parsestr(z.read(name)[: 1 << 16].decode("utf-8", "replace"), headersonly=True)
    except (OSError, zipfile.BadZipFile, StopIteration, KeyError):
        return None
    return [name.split("/")[0], str(meta.get("Name") or ""), str(meta.get("Version") or "")]


def metadata_mismatches(
    wheels: Iterable[WheelFile], rel_to: Path, read: Callable[[Path], list[str] | None] = wheel_dist_info
) -> list[Violation]:
    """One ``GR-PKG-WHEEL-METADATA`` violation per wheel whose file name and ``METADATA`` disagree on
    the distribution's name or version (case C50: a wheel renamed or re-tagged by hand, a local
    ``+cu130`` added to the file name only), or that has no readable ``METADATA``. uv refuses to
    install such a wheel ("Wheel version does not match filename"), and stage 2 installs the
    whole of ``wheels/`` into every agent and resources server venv. ``read`` may remember results
    (:meth:`gym_runtime.venvs.digest.HashCache.memo`)."""
    out = []
    for w in wheels:
        rel = w.path.relative_to(rel_to).as_posix()
        info = read(w.path)
        if info is None:
            out.append(
                Violation(
                    "GR-PKG-WHEEL-METADATA",
                    "not a readable wheel: no *.dist-info/METADATA in it",
                    file=rel,
                    hint="rebuild the wheel, or remove it from wheels/",
                )
            )
            continue
        dist_info, name, version = info
        try:
            same = canonicalize_name(name) == w.name and Version(version) == w.version
        except InvalidVersion:
            same = False
        if not same:
            out.append(
                Violation(
                    "GR-PKG-WHEEL-METADATA",
                    f"the file name says {w.name} {w.version}, but its METADATA ({dist_info}) "
                    f"says {name or '(no Name)'} {version or '(no Version)'}; uv refuses to install a wheel whose name "
                    "and METADATA disagree",
                    file=rel,
                    hint=f"rebuild or rename the wheel: build it again as {w.name} {w.version}, or name the file after "
                    f"what it holds ({canonicalize_name(name or w.name).replace('-', '_')}-{version}-...whl)",
                )
            )
    return out
