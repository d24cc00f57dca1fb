"""Tiny, real distributions for tests: wheels, sdists, a PEP 517 backend, case listings.

Everything here writes genuine files that uv and pip install (zip wheels with ``METADATA``,
``WHEEL`` and ``RECORD``; ``.tar.gz`` sdists with ``PKG-INFO`` and ``pyproject.toml``), so tests
never need PyPI. Typical use::

    from tests.helpers.wheels import build_wheel, materialise_listing
    whl = build_wheel(tmp_path / "wheels", "acme-gym-core", "0.4.0", requires=["oaiclient<=2.7.2"])
    files = materialise_listing(CASES / "C07" / "wheels_listing.txt", tmp_path / "wheels")

Listing files (``wheels_listing.txt`` / ``index_listing.txt`` in ``tests/cases/data``) hold one file
name per line, optionally followed by ``Requires-Dist: a, b`` and/or ``data-yanked="reason"``;
``#`` starts a comment. :func:`parse_listing` reads them, :func:`materialise_listing` builds them.
"""

from __future__ import annotations

import base64
import hashlib
import io
import re
import tarfile
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename

_EPOCH = (2020, 1, 1, 0, 0, 0)


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file (the form ``--hash=sha256:...`` takes)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def module_name(name: str) -> str:
    """The importable top-level module of a tiny distribution: ``acme-gym-core`` -> ``acme_gym_core``."""
    return canonicalize_name(name).replace("-", "_")


def wheel_filename(name: str, version: str, tags: str = "py3-none-any") -> str:
    return f"{module_name(name)}-{version}-{tags}.whl"


def build_wheel(
    out_dir: Path,
    name: str,
    version: str,
    *,
    requires: Iterable[str] = (),
    tags: str = "py3-none-any",
    files: dict[str, str] | None = None,
    salt: str = "",
    extras: Iterable[str] = (),
) -> Path:
    """Write ``<module>-<version>-<tags>.whl`` into ``out_dir`` and return its path.

    ``requires``: ``Requires-Dist`` lines (PEP 508). ``tags``: the compressed tag triple of the
    file name (e.g. ``cp313-cp313-manylinux_2_39_x86_64``). ``files``: extra archive members
    (path -> text); the default module ``<module>/__init__.py`` sets ``__version__``.
    ``salt`` changes the content (and so the sha256) without changing the name: a "rebuilt" wheel.
    ``extras``: ``Provides-Extra`` names (their requirements go in ``requires`` with ``extra == "x"``).
    The file is deterministic for the same arguments.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    mod = module_name(name)
    dist_info = f"{mod}-{version}.dist-info"
    members: dict[str, bytes] = {
        f"{mod}/__init__.py": f'__version__ = "{version}"\n{"# " + salt if salt else ""}\n'.encode(),
    }
    for path, text in (files or {}).items():
        members[path] = text.encode()
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    meta += [f"Provides-Extra: {e}" for e in extras]
    meta += [f"Requires-Dist: {r}" for r in requires]
    members[f"{dist_info}/METADATA"] = ("\n".join(meta) + "\n").encode()
    pure = tags.endswith("-none-any")
    wheel_tags = [
        f"Tag: {t}" for t in sorted(str(t) for t in parse_wheel_filename(wheel_filename(name, version, tags))[3])
    ]
    members[f"{dist_info}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: gym-runtime-tests\n"
        f"Root-Is-Purelib: {'true' if pure else 'false'}\n" + "\n".join(wheel_tags) + "\n"
    ).encode()
    record = [f"{p},{_record_hash(d)},{len(d)}" for p, d in members.items()]
    record.append(f"{dist_info}/RECORD,,")
    members[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = out_dir / wheel_filename(name, version, tags)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for p, d in members.items():
            zf.writestr(zipfile.ZipInfo(p, _EPOCH), d)
    return path


# A complete PEP 517 backend in one module: builds a wheel from an sdist made by build_sdist.
_BACKEND_SRC = '''\
"""tinybackend: the smallest PEP 517 backend; packs <module>/ from the project dir into a wheel."""
import base64, hashlib, os, re, zipfile

def _meta():
    text = open("PKG-INFO").read()
    name = re.search(r"^Name: (.+)$", text, re.M).group(1).strip()
    version = re.search(r"^Version: (.+)$", text, re.M).group(1).strip()
    return name, version, text

def get_requires_for_build_wheel(config_settings=None):
    return []

def _h(d):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b"=").decode()

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name, version, meta = _meta()
    mod = re.sub(r"[-_.]+", "_", name).lower()
    di = f"{mod}-{version}.dist-info"
    members = {}
    for root, _, files in os.walk(mod):
        for f in files:
            p = os.path.join(root, f)
            members[p.replace(os.sep, "/")] = open(p, "rb").read()
    members[di + "/METADATA"] = meta.encode()
    members[di + "/WHEEL"] = b"Wheel-Version: 1.0\\nGenerator: tinybackend\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
    rec = [f"{p},{_h(d)},{len(d)}" for p, d in members.items()] + [di + "/RECORD,,"]
    members[di + "/RECORD"] = ("\\n".join(rec) + "\\n").encode()
    fn = f"{mod}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, fn), "w") as zf:
        for p, d in members.items():
            zf.writestr(p, d)
    return fn
'''


def build_backend_wheel(out_dir: Path, name: str = "tinybackend", version: str = "1.0.0") -> Path:
    """A wheel holding a working PEP 517 backend module ``tinybackend`` (use
    ``build_backend="tinybackend"``, ``build_requires=["tinybackend"]`` in :func:`build_sdist`)."""
    return build_wheel(out_dir, name, version, files={"tinybackend/__init__.py": _BACKEND_SRC})


def build_sdist(
    out_dir: Path,
    name: str,
    version: str,
    *,
    build_requires: Iterable[str] = ("tinybackend",),
    build_backend: str = "tinybackend",
    requires: Iterable[str] = (),
    pyproject: str | None = None,
) -> Path:
    """Write ``<module>-<version>.tar.gz`` (PEP 625 name) and return its path.

    The archive holds ``PKG-INFO``, ``pyproject.toml`` (``pyproject`` verbatim when given, else
    one built from ``build_requires`` / ``build_backend``) and ``<module>/__init__.py``.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    mod = module_name(name)
    top = f"{mod}-{version}"
    reqs = ", ".join(f'"{r}"' for r in build_requires)
    pyproject = pyproject or (
        f'[build-system]\nrequires = [{reqs}]\nbuild-backend = "{build_backend}"\n\n'
        f'[project]\nname = "{name}"\nversion = "{version}"\n'
    )
    meta = (
        "\n".join(
            [
                "Metadata-Version: 2.1",
                f"Name: {name}",
                f"Version: {version}",
                *[f"Requires-Dist: {r}" for r in requires],
            ]
        )
        + "\n"
    )
    members = {
        f"{top}/PKG-INFO": meta,
        f"{top}/pyproject.toml": pyproject,
        f"{top}/{mod}/__init__.py": f'__version__ = "{version}"\n',
    }
    path = out_dir / f"{top}.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        for p, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(p)
            info.size, info.mtime, info.mode = len(data), 1577836800, 0o644
            tf.addfile(info, io.BytesIO(data))
    return path


@dataclass(frozen=True)
class ListingEntry:
    """One line of a case listing: the file name, its ``Requires-Dist`` and yank reason."""

    filename: str
    requires: tuple[str, ...] = ()
    yanked: str | None = None
    extra: dict[str, str] = field(default_factory=dict, hash=False)

    @property
    def name(self) -> str:
        if self.filename.endswith(".whl"):
            return str(parse_wheel_filename(self.filename)[0])
        return str(parse_sdist_filename(self.filename)[0])

    @property
    def version(self) -> str:
        if self.filename.endswith(".whl"):
            return str(parse_wheel_filename(self.filename)[1])
        return str(parse_sdist_filename(self.filename)[1])


_YANK = re.compile(r'data-yanked="([^"]*)"')


def parse_listing(path: Path) -> list[ListingEntry]:
    """Read a ``wheels_listing.txt`` / ``index_listing.txt``; comment lines are skipped."""
    out = []
    for raw in Path(path).read_text().splitlines():
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        yanked = _YANK.search(line)
        line = _YANK.sub("", line).strip()
        fname, _, rest = line.partition(" ")
        requires: tuple[str, ...] = ()
        if "Requires-Dist:" in rest:
            requires = tuple(r.strip() for r in rest.split("Requires-Dist:", 1)[1].split(",") if r.strip())
        out.append(ListingEntry(fname, requires, yanked.group(1) if yanked else None))
    return out


def materialise(entries: Iterable[ListingEntry], out_dir: Path, **sdist_kw: object) -> list[Path]:
    """Build every entry as a tiny wheel (or sdist for ``.tar.gz``) in ``out_dir``."""
    paths = []
    for e in entries:
        if e.filename.endswith(".whl"):
            tags = "-".join(e.filename[:-4].split("-")[-3:])
            p = build_wheel(out_dir, e.name, e.version, requires=e.requires, tags=tags)
            if p.name != e.filename:  # keep the listing's exact spelling (e.g. compressed tag sets)
                p = p.rename(p.with_name(e.filename))
            paths.append(p)
        else:
            paths.append(build_sdist(out_dir, e.name, e.version, requires=e.requires, **sdist_kw))  # type: ignore[arg-type]
    return paths


def materialise_listing(listing: Path, out_dir: Path, **sdist_kw: object) -> list[Path]:
    """:func:`parse_listing` + :func:`materialise`: the listing's files, built in ``out_dir``."""
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    return materialise(parse_listing(listing), out_dir, **sdist_kw)
